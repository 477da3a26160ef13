"""Code intelligence over a codebase context: a symbol index, queries over it, a repo map."""

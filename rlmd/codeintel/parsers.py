"""Per-file symbol extraction: Python through :mod:`ast`, the other common languages through
tree-sitter and the ``tags.scm`` queries their grammar packages ship (the queries GitHub's
code navigation uses), so no grammar knowledge is ours.

A file's symbols are plain tuples (cheap to build, cache and pickle); :class:`Symbol` names
their fields. Extraction never raises on bad source: a file that does not parse gets the
symbols found before the error (tree-sitter recovers) or none (``ast``), plus an error note.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from typing import Any, NamedTuple

MAX_SIGNATURE = 200
"""Characters of a definition's first line(s) kept as its signature."""


class Symbol(NamedTuple):
    """One definition.

    Attributes:
        name: the bare name (``"open"``).
        kind: ``"class" | "function" | "method" | "constant" | "variable" | "type" |
            "interface" | "module" | "macro"``.
        line / end_line: 1-based lines of the whole definition.
        container: the enclosing definitions' dotted name (``"TextIOWrapper"``), ``""`` at
            top level.
        signature: its first source line(s), stripped (``"def open(file, mode='r'):"``).
        bases: for a class, the names it derives from (last dotted part), else ``()``.
    """

    name: str
    kind: str
    line: int
    end_line: int
    container: str
    signature: str
    bases: tuple[str, ...]

    @property
    def qualname(self) -> str:
        return f"{self.container}.{self.name}" if self.container else self.name


class FileSymbols(NamedTuple):
    """What one file defines and imports; ``error`` says why the parse was partial."""

    language: str
    symbols: tuple[Symbol, ...]
    imports: tuple[str, ...]
    error: str | None


EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
}
"""File extension → language. ``.h`` is parsed as C (C++ headers mostly parse as C too)."""


def language_of(path: str) -> str | None:
    """The language a path's extension names, or ``None`` (not indexed)."""
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower()) if dot > path.rfind("/") else None


def extract(language: str, text: str) -> FileSymbols:
    """The symbols and imports of one file's ``text`` in ``language`` (see
    :data:`EXTENSIONS`). Never raises for bad source; raises ``ValueError`` for an unknown
    language and ``ImportError`` when its grammar package is not installed."""
    if language == "python":
        return _python(text)
    return _treesitter(language, text)


# -- Python ---------------------------------------------------------------------------------


def _python(text: str) -> FileSymbols:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes
        return FileSymbols("python", (), (), f"{type(exc).__name__}: {exc}")
    lines = text.split("\n")
    symbols: list[Symbol] = []
    imports: list[str] = []
    # Walk statement bodies only (not expressions): what ast.walk would visit in 10x the time.
    stack: list[tuple[list[ast.stmt], str, bool]] = [(tree.body, "", False)]
    while stack:
        body, container, in_class = stack.pop()
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "method" if in_class else "function"
                symbols.append(_py_symbol(node, node.name, kind, container, lines, ()))
                stack.append((node.body, _join(container, node.name), False))
            elif isinstance(node, ast.ClassDef):
                bases = tuple(b for b in (_dotted_tail(x) for x in node.bases) if b)
                symbols.append(_py_symbol(node, node.name, "class", container, lines, bases))
                stack.append((node.body, _join(container, node.name), True))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                if container and not in_class:
                    continue  # a function's locals are not symbols
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in _assigned_names(target):
                        kind = "constant" if name.isupper() else "variable"
                        symbols.append(_py_symbol(node, name, kind, container, lines, ()))
            elif isinstance(node, ast.Import):
                imports.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                imports.append(base)
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    sub = getattr(node, field, None)
                    if sub:
                        for item in sub:
                            if isinstance(item, ast.ExceptHandler | ast.match_case):
                                stack.append((item.body, container, in_class))
                        stmts = [s for s in sub if isinstance(s, ast.stmt)]
                        if stmts:
                            stack.append((stmts, container, in_class))
    symbols.sort(key=lambda s: s.line)
    return FileSymbols("python", tuple(symbols), tuple(dict.fromkeys(imports)), None)


def _py_symbol(
    node: Any, name: str, kind: str, container: str, lines: list[str], bases: tuple[str, ...]
) -> Symbol:
    start = node.lineno  # a def's line, below its decorators: what people look for
    parts = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        # The header's lines, up to the one ending in ':' (comments after it left out).
        body = node.body[0].lineno if node.body else start
        last = start if body <= start else min(body - 1, start + 7)
        for text in lines[start - 1 : last]:
            text = _COMMENT.sub("", text).strip()
            parts.append(text)
            if text.endswith(":"):
                break
    else:
        parts.append(lines[start - 1].strip() if start - 1 < len(lines) else "")
    signature = " ".join(parts)
    if len(signature) > MAX_SIGNATURE:
        signature = signature[:MAX_SIGNATURE] + "..."
    end = getattr(node, "end_lineno", None) or start
    return Symbol(name, kind, start, end, container, signature, bases)


_COMMENT = re.compile(r"\s+#[^'\"]*$")


def _join(container: str, name: str) -> str:
    return f"{container}.{name}" if container else name


def _dotted_tail(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[T]
        return _dotted_tail(node.value)
    if isinstance(node, ast.Call):  # with_metaclass(Meta, Base)
        return None
    return None


def _assigned_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in _assigned_names(elt)]
    return []


# -- tree-sitter ----------------------------------------------------------------------------

_GRAMMARS = {
    "javascript": ("tree_sitter_javascript", "language", ("tree_sitter_javascript",)),
    "typescript": (
        "tree_sitter_typescript",
        "language_typescript",
        ("tree_sitter_javascript", "tree_sitter_typescript"),
    ),
    "tsx": (
        "tree_sitter_typescript",
        "language_tsx",
        ("tree_sitter_javascript", "tree_sitter_typescript"),
    ),
    "go": ("tree_sitter_go", "language", ("tree_sitter_go",)),
    "rust": ("tree_sitter_rust", "language", ("tree_sitter_rust",)),
    "java": ("tree_sitter_java", "language", ("tree_sitter_java",)),
    "c": ("tree_sitter_c", "language", ("tree_sitter_c",)),
    "cpp": ("tree_sitter_cpp", "language", ("tree_sitter_c", "tree_sitter_cpp")),
}
"""Language → (grammar module, its language function, modules whose ``tags.scm`` apply:
TypeScript's own tags cover only what it adds to JavaScript, C++'s what it adds to C)."""

_KINDS = {"implementation": "class"}

_IMPORT_PATTERNS = {
    "javascript": r"""(?:^|\n)\s*import\b[^'"\n]*['"]([^'"]+)['"]|\brequire\(\s*['"]([^'"]+)['"]\s*\)""",
    "go": r"""(?m)^\s*(?:import\s+)?(?:[\w.]+\s+)?"([\w./\-]+)"\s*$""",
    "rust": r"(?m)^\s*(?:pub\s+)?use\s+([\w:]+)",
    "java": r"(?m)^\s*import\s+(?:static\s+)?([\w.]+)",
    "c": r"""(?m)^\s*#\s*include\s*[<"]([^>"]+)[>"]""",
}
_IMPORT_PATTERNS["typescript"] = _IMPORT_PATTERNS["tsx"] = _IMPORT_PATTERNS["javascript"]
_IMPORT_PATTERNS["cpp"] = _IMPORT_PATTERNS["c"]

_BASES = re.compile(r"\b(?:extends|implements)\s+([\w.$<>, ]+?)\s*(?=\{|$|\bimplements\b)")
_CPP_BASES = re.compile(r"^[^:(]*\b(?:class|struct)\s+\w+\s*(?:final\s*)?:\s*([^{]+)")


def supported_languages() -> list[str]:
    """Languages whose grammar package imports here (Python always)."""
    found = ["python"]
    for language in _GRAMMARS:
        try:
            _parser(language)
        except ImportError:
            continue
        found.append(language)
    return found


@cache
def _parser(language: str) -> tuple[Any, Any]:
    """(Parser, Query) for ``language``, built once per process."""
    import importlib
    from importlib.resources import files

    import tree_sitter

    if language not in _GRAMMARS:
        raise ValueError(f"no grammar for language {language!r}")
    module, fn, tag_modules = _GRAMMARS[language]
    lang = tree_sitter.Language(getattr(importlib.import_module(module), fn)())
    source = "\n".join(
        (files(m) / "queries" / "tags.scm").read_text(encoding="utf-8") for m in tag_modules
    )
    return tree_sitter.Parser(lang), tree_sitter.Query(lang, source)


def _treesitter(language: str, text: str) -> FileSymbols:
    import tree_sitter

    parser, query = _parser(language)
    data = text.encode("utf-8", "surrogatepass")
    tree = parser.parse(data)
    lines = text.split("\n")
    found: dict[tuple[str, int], tuple[str, int, int, int]] = {}
    for _, captures in tree_sitter.QueryCursor(query).matches(tree.root_node):
        names = captures.get("name")
        kinds = [k for k in captures if k.startswith("definition.")]
        if not names or not kinds:
            continue
        node = captures[kinds[0]][0]
        name_node = names[0]
        name = data[name_node.start_byte : name_node.end_byte].decode("utf-8", "replace")
        kind = kinds[0].partition(".")[2]
        key = (name, name_node.start_point[0])
        if key not in found:  # the first pattern wins (Rust: a method before a function)
            found[key] = (
                _KINDS.get(kind, kind),
                node.start_point[0] + 1,
                node.end_point[0] + 1,
                node.start_byte,
            )
    # Containers: the innermost class-like definition whose lines hold this one.
    defs = sorted(
        ((v[1], -v[2], name, v[0], v[2]) for (name, _), v in found.items()),
    )
    symbols: list[Symbol] = []
    open_: list[tuple[int, str]] = []  # (end_line, qualname) of enclosing definitions
    for line, _neg, name, kind, end in defs:
        while open_ and open_[-1][0] < line:
            open_.pop()
        container = open_[-1][1] if open_ else ""
        if kind == "function" and container:
            kind = "method"
        signature = lines[line - 1].strip() if line - 1 < len(lines) else ""
        if len(signature) > MAX_SIGNATURE:
            signature = signature[:MAX_SIGNATURE] + "..."
        bases: tuple[str, ...] = ()
        if kind in ("class", "interface"):
            groups = [m.group(1) for m in _BASES.finditer(signature)]
            if not groups and language == "cpp":
                groups = [m.group(1) for m in _CPP_BASES.finditer(signature)]
            bases = tuple(
                b.split()[-1].split(".")[-1].split("::")[-1].split("<")[0]
                for g in groups
                for b in g.split(",")
                if b.strip()
            )
        symbols.append(Symbol(name, kind, line, end, container, signature, bases))
        if kind in ("class", "interface", "module", "type") and end > line:
            open_.append((end, _join(container, name)))
    imports = _imports(language, text)
    error = "syntax errors (partial parse)" if tree.root_node.has_error else None
    return FileSymbols(language, tuple(symbols), imports, error)


def _imports(language: str, text: str) -> tuple[str, ...]:
    pattern = _IMPORT_PATTERNS.get(language)
    if pattern is None:
        return ()
    out = []
    for m in re.finditer(pattern, text):
        value = next((g for g in m.groups() if g), None)
        if value:
            out.append(value)
    return tuple(dict.fromkeys(out))

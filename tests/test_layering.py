"""The package's layering, read from the source with ast: presentation stays in rlmd/cli/,
models/ imports nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

import rlmd

PACKAGE = Path(rlmd.__file__).resolve().parent
PRESENTATION = ("argparse", "rich", "textual")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (top level, functions, ``if`` blocks), by its
    absolute name (relative imports resolved against the file's package)."""
    package = ".".join(("rlmd", *path.relative_to(PACKAGE).parent.parts))
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            else:
                assert node.module is not None
                found.add(node.module)
    return found


def modules_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_only_the_cli_imports_argparse_rich_or_textual() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(
            m for m in imported_modules(path) if m.split(".")[0] in PRESENTATION
        )
        for path in modules_under(PACKAGE)
        if "cli" not in path.relative_to(PACKAGE).parts[:1]
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    # the check sees what it looks for: the CLI does import them
    cli_imports = set().union(*(imported_modules(p) for p in modules_under(PACKAGE / "cli")))
    assert {"argparse", "rich.console"} <= cli_imports


def test_models_import_nothing_above_them() -> None:
    above = ("rlmd.engine", "rlmd.sandbox", "rlmd.config", "rlmd.workspace", "rlmd.server")
    above += ("rlmd.store", "rlmd.runner", "rlmd.compat", "rlmd.cli", "rlmd.kernel")
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(
            m for m in imported_modules(path) if m.startswith(above)
        )
        for path in modules_under(PACKAGE / "models")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert "rlmd.models.base" in imported_modules(PACKAGE / "models" / "registry.py")


def _part(module: str) -> str:
    """The room a module belongs to: ``rlmd.engine.loop`` → ``engine``, ``rlmd.config`` →
    ``config``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rlmd"


def test_the_rooms_import_each_other_without_a_cycle() -> None:
    # Top-level imports only: a function-level import is a deliberate late binding.
    edges: dict[str, set[str]] = {}
    for path in modules_under(PACKAGE):
        rel = path.relative_to(PACKAGE)
        room = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [
                    node.module if node.module != "rlmd" else f"rlmd.{a.name}" for a in node.names
                ]
            for name in names:
                if name.startswith("rlmd.") and _part(name) != room:
                    edges.setdefault(room, set()).add(_part(name))

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted((a, b) for a, targets in edges.items() for b in targets if a in reachable(b))
    assert cycles == []
    assert "engine" in edges["server"] and "sandbox" in edges["engine"]  # the check sees edges
    assert "sandbox" not in edges["models"] and "engine" not in edges["sandbox"]


def test_only_the_cluster_package_imports_ray() -> None:
    """The engine's executor seam stays free of any cluster engine: Ray lives in
    rlmd/cluster/ (the ``ray`` extra) and nowhere else."""
    offenders = {
        str(path.relative_to(PACKAGE.parent))
        for path in modules_under(PACKAGE)
        if "cluster" not in path.relative_to(PACKAGE).parts[:1]
        and any(m.split(".")[0] == "ray" for m in imported_modules(path))
    }
    assert offenders == set()
    assert "ray" in imported_modules(PACKAGE / "cluster" / "ray_executor.py")


def test_only_the_verifiers_environment_imports_verifiers() -> None:
    """verifiers 0.4.0 cannot share rlmd's main venv (it pins mcp==2.0.0): one module,
    rlmd/train/verifiers_env.py, imports it, and nothing in the package imports that module."""
    importers = {
        str(path.relative_to(PACKAGE.parent))
        for path in modules_under(PACKAGE)
        if any(m.split(".")[0] == "verifiers" for m in imported_modules(path))
    }
    assert importers == {"rlmd/train/verifiers_env.py"}
    users = {
        str(path.relative_to(PACKAGE.parent))
        for path in modules_under(PACKAGE)
        if "rlmd.train.verifiers_env" in imported_modules(path)
    }
    assert users == set()

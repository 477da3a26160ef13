"""Codebase QA over a real Python package: questions whose answers come from ``ast``.

Templates (numbered T1..; wording our own):

====  ===================  =================================================  ========
T1    ``where_defined``    the file that defines a function/class named once   path
T2    ``call_count``       call expressions ``f(...)`` / ``x.f(...)``          numeric
T3    ``subclasses``       classes with a direct base named ``Z``              f1
T4    ``param_default``    a parameter's default, ``ast.unparse`` of it        exact
T5    ``module_constant``  a module-level UPPER_CASE constant's value          exact
T6    ``importers``        files that import module ``M`` (absolute imports)   f1
====  ===================  =================================================  ========

:func:`rename_codebase` maps every identifier the package defines (functions, classes,
parameters, assigned names and attributes) through a seeded bijection to made-up words,
drops docstrings and comments, and keeps file paths; the ground truth is then computed on
the renamed code, so it is remapped by construction and a model cannot answer from memory.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

TEMPLATES = (
    "where_defined",
    "call_count",
    "subclasses",
    "param_default",
    "module_constant",
    "importers",
)


def parse_all(files: dict[str, str]) -> dict[str, ast.Module]:
    """``{path: tree}`` for the files that parse (others are left out)."""
    trees = {}
    for path, text in sorted(files.items()):
        try:
            trees[path] = ast.parse(text)
        except SyntaxError:
            continue
    return trees


@dataclass(frozen=True)
class Definition:
    name: str
    path: str
    line: int
    kind: str  # "function" | "class"


def definitions(trees: dict[str, ast.Module]) -> dict[str, list[Definition]]:
    """Every function and class definition (any nesting level), by name."""
    out: dict[str, list[Definition]] = defaultdict(list)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[node.name].append(Definition(node.name, path, node.lineno, "function"))
            elif isinstance(node, ast.ClassDef):
                out[node.name].append(Definition(node.name, path, node.lineno, "class"))
    return out


def call_counts(trees: dict[str, ast.Module]) -> Counter:
    """Call expressions by called name: ``f(...)`` counts for ``f``, ``x.f(...)`` for ``f``."""
    c: Counter = Counter()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name):
                    c[node.func.id] += 1
                elif isinstance(node.func, ast.Attribute):
                    c[node.func.attr] += 1
    return c


def direct_subclasses(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Base name → names of classes that list it as a direct base (``Z`` or ``mod.Z``)."""
    out: dict[str, set[str]] = defaultdict(set)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name):
                        out[base.id].add(node.name)
                    elif isinstance(base, ast.Attribute):
                        out[base.attr].add(node.name)
    return {k: sorted(v) for k, v in out.items()}


def param_defaults(trees: dict[str, ast.Module]) -> list[tuple[str, str, str, str]]:
    """``(path, function, parameter, default source)`` for every parameter with a default."""
    out = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            positional = a.posonlyargs + a.args
            for arg, default in zip(
                positional[len(positional) - len(a.defaults) :], a.defaults, strict=True
            ):
                out.append((path, node.name, arg.arg, ast.unparse(default)))
            for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
                if default is not None:
                    out.append((path, node.name, arg.arg, ast.unparse(default)))
    return out


_CONST_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]{2,}$")


def module_constants(trees: dict[str, ast.Module]) -> list[tuple[str, str, str]]:
    """``(path, NAME, value source)`` for module-level ``NAME = <literal>`` assigned once in
    their file, with an int, float or str literal value."""
    out = []
    for path, tree in trees.items():
        seen: Counter = Counter()
        found = {}
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign | ast.AugAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Name):
                    seen[t.id] += 1
                    value = getattr(node, "value", None)
                    if (
                        isinstance(node, ast.Assign)
                        and len(node.targets) == 1
                        and _CONST_NAME.match(t.id)
                        and isinstance(value, ast.Constant)
                        and isinstance(value.value, int | float | str)
                        and not isinstance(value.value, bool)
                        and len(ast.unparse(value)) <= 40
                    ):
                        found[t.id] = ast.unparse(value)
        out += [(path, n, v) for n, v in found.items() if seen[n] == 1]
    return out


def importers(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Top-level module name → files that import it absolutely, anywhere in the file."""
    out: dict[str, set[str]] = defaultdict(set)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out[alias.name.split(".")[0]].add(path)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out[node.module.split(".")[0]].add(path)
    return {k: sorted(v) for k, v in out.items()}


def _good_name(name: str) -> bool:
    return not (name.startswith("__") and name.endswith("__")) and len(name.strip("_")) >= 4


def codeqa_question(
    rng: random.Random, files: dict[str, str], template: str
) -> tuple[str, Any, str, dict[str, Any]] | None:
    """``(question, answer, metric, params)`` for ``template`` over ``files``, or ``None``
    when the codebase has no instance of it. ``params["unique_basename"]`` is set for T1."""
    trees = parse_all(files)
    if template == "where_defined":
        defs = definitions(trees)
        names = sorted(n for n, d in defs.items() if len(d) == 1 and _good_name(n))
        if not names:
            return None
        d = defs[rng.choice(names)][0]
        base = d.path.rsplit("/", 1)[-1]
        unique = sum(1 for p in files if p.rsplit("/", 1)[-1] == base) == 1
        q = (
            f"In which file of the codebase is the {d.kind} `{d.name}` defined? "
            "Answer with the file's path as it appears in the codebase."
        )
        return (
            q,
            d.path,
            "path",
            {"template": template, "name": d.name, "line": d.line, "unique_basename": unique},
        )
    if template == "call_count":
        defs = definitions(trees)
        counts = call_counts(trees)
        names = sorted(n for n in defs if _good_name(n) and 2 <= counts[n] <= 40)
        if not names:
            return None
        name = rng.choice(names)
        q = (
            f"How many call expressions in the codebase call a function or method named "
            f"`{name}`? Count both `{name}(...)` and `something.{name}(...)`; the definition "
            "itself is not a call. Answer with a number only."
        )
        return q, counts[name], "numeric", {"template": template, "name": name}
    if template == "subclasses":
        subs = direct_subclasses(trees)
        defs = definitions(trees)
        bases = sorted(b for b, s in subs.items() if len(s) >= 2 and b in defs and b != "object")
        if not bases:
            bases = sorted(b for b, s in subs.items() if len(s) >= 2 and b != "object")
        if not bases:
            return None
        base = rng.choice(bases)
        q = (
            f"Which classes in the codebase are defined with `{base}` as a direct base class "
            f"(written `class X({base})` or `class X(module.{base})`)? List the class names."
        )
        return q, subs[base], "f1", {"template": template, "base": base}
    if template == "param_default":
        defs = definitions(trees)
        rows = [
            r
            for r in param_defaults(trees)
            if len(defs[r[1]]) == 1 and _good_name(r[1]) and r[2] != "self"
        ]
        rows = [r for r in rows if len(r[3]) <= 40]
        if not rows:
            return None
        path, fn, param, default = rng.choice(sorted(rows))
        q = (
            f"What is the default value of the parameter `{param}` of the function `{fn}` "
            f"(defined in {path})? Answer with the Python expression only."
        )
        return q, default, "exact", {"template": template, "function": fn, "param": param}
    if template == "module_constant":
        rows = module_constants(trees)
        if not rows:
            return None
        path, name, value = rng.choice(sorted(rows))
        q = (
            f"What is the value of the module-level constant `{name}` in {path}? "
            "Answer with the Python expression only."
        )
        return q, value, "exact", {"template": template, "name": name}
    if template == "importers":
        imp = importers(trees)
        mods = sorted(m for m, ps in imp.items() if 2 <= len(ps) <= 30)
        if not mods:
            return None
        mod = rng.choice(mods)
        q = (
            f"Which files of the codebase import the module `{mod}` (with `import {mod}`, "
            f"`import {mod}.something` or `from {mod}... import ...`)? List their paths."
        )
        return q, imp[mod], "f1", {"template": template, "module": mod}
    raise ValueError(f"unknown template {template!r}")


# -- renaming -------------------------------------------------------------------------------

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins))


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(
        rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)
    ) + rng.choice(_CONSONANTS)


def _styled(name: str, rng: random.Random) -> str:
    """A made-up name in the style of ``name`` (leading underscores, UPPER, CapWords,
    snake_case with as many parts)."""
    core = name.lstrip("_")
    lead = name[: len(name) - len(core)]
    parts = [p for p in re.split(r"_+", core) if p] or [core]
    if core.isupper():
        return lead + "_".join(_word(rng, 2) for _ in parts).upper()
    if core[:1].isupper():
        n = max(1, len(re.findall(r"[A-Z][a-z0-9]*", core)))
        return lead + "".join(_word(rng, 2).capitalize() for _ in range(min(n, 3)))
    return lead + "_".join(_word(rng, 2) for _ in parts[:3])


def _defined_names(trees: dict[str, ast.Module]) -> tuple[set[str], set[str]]:
    """``(defined, imported)`` identifiers of the package."""
    defined: set[str] = set()
    imported: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imported.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                for a in node.names:
                    imported.add(a.asname or a.name)
    return defined, imported


class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str], imported: set[str]) -> None:
        self.m = mapping
        self.imported = imported  # module names: ``os.path`` keeps ``path``

    def _r(self, name: str | None) -> str | None:
        return self.m.get(name, name) if name is not None else None

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._r(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        external = isinstance(node.value, ast.Name) and node.value.id in self.imported
        self.generic_visit(node)
        if not external:
            node.attr = self._r(node.attr)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        self.generic_visit(node)
        node.arg = self._r(node.arg)
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        self.generic_visit(node)
        node.arg = self._r(node.arg)
        return node

    def _def(self, node: Any) -> ast.AST:
        self.generic_visit(node)
        node.name = self._r(node.name)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _def

    def visit_Global(self, node: ast.Global) -> ast.AST:
        node.names = [self._r(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        self.generic_visit(node)
        node.name = self._r(node.name)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level > 0:  # the package's own modules: their names are renamed too
            for a in node.names:
                a.name = self._r(a.name)
                a.asname = self._r(a.asname)
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            for elt in getattr(node.value, "elts", []):
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                    elt.value = self.m.get(elt.value, elt.value)
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        self.generic_visit(node)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:]
        return node


def rename_codebase(
    files: dict[str, str], rng: random.Random
) -> tuple[dict[str, str], dict[str, str]]:
    """``(renamed files, {old name: new name})``; files that do not parse are dropped.

    Renamed: identifiers the package defines, minus dunder names, builtins, keywords and
    names bound by absolute imports; an attribute of an imported name (``os.path``) keeps
    its name. Docstrings and comments are removed (they would name
    the originals). Paths are kept.
    """
    trees = parse_all(files)
    defined, imported = _defined_names(trees)
    module_names = {p.rsplit("/", 1)[-1].removesuffix(".py") for p in trees}
    names = sorted(
        n
        for n in defined - imported - _RESERVED - module_names
        if not (n.startswith("__") and n.endswith("__")) and n not in ("self", "cls", "_")
    )
    rng.shuffle(names)
    taken = set(defined) | imported | _RESERVED | module_names
    mapping: dict[str, str] = {}
    for name in names:
        new = _styled(name, rng)
        while new in taken or not new.isidentifier():
            new = _styled(name, rng)
        taken.add(new)
        mapping[name] = new
    out = {}
    renamer = _Renamer(mapping, imported)
    for path, tree in trees.items():
        out[path] = ast.unparse(ast.fix_missing_locations(renamer.visit(tree))) + "\n"
    return out, mapping

"""Code-intelligence questions over real codebases in more than one language, and per-item
judgement questions over short texts (issue 15).

``codeintel`` family, JavaScript side (ground truth from a tree-sitter syntax walk written
here, not from rlmd's tag queries):

====  ===================  ===============================================  ======
J1    ``where_defined``    the file that defines a class/function named once  path
J2    ``subclasses``       classes declared ``extends Z`` (direct)             f1
J3    ``methods``          the methods a class defines                         f1
====  ===================  ===============================================  ======

The Python side reuses :func:`bench.quality.gen_code.codeqa_question` on a PyPI sdist.
:func:`rename_words` is the JavaScript "renamed identifiers" option: every class, function
and method name the package defines is replaced, as a whole word everywhere (comments and
strings too), through a seeded bijection, so answers cannot come from memory.

``judge`` family: numbered short descriptions (WordNet glosses, their labels kept aside);
"how many describe an X" and "which kind is most common" need a judgement per item, which no
keyword search gives (the pool drops glosses that name another category's keyword).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

JS_TEMPLATES = ("where_defined", "subclasses", "methods")
JUDGE_TEMPLATES = ("count_label", "most_common")

_JS_RESERVED = frozenset(
    "constructor prototype length name call apply bind toString valueOf Error Object Array "
    "String Number Boolean Promise Map Set Symbol process require module exports this super "
    "new class function return extends static async await get set of in for while if else".split()
)


def js_definitions(files: dict[str, str]) -> dict[str, Any]:
    """``{"defs": {name: [(path, kind, line)]}, "bases": {class: base}, "methods":
    {class: [method names]}}`` of the ``.js``/``.mjs`` files, by a tree-sitter walk."""
    import tree_sitter
    import tree_sitter_javascript

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_javascript.language()))
    defs: dict[str, list[tuple[str, str, int]]] = {}
    bases: dict[str, str] = {}
    methods: dict[str, list[str]] = {}
    for path, text in files.items():
        if not path.endswith((".js", ".mjs")):
            continue
        data = text.encode("utf-8")
        stack = [parser.parse(data).root_node]
        while stack:
            node = stack.pop()
            stack.extend(reversed(node.children))
            if node.type not in ("class_declaration", "function_declaration"):
                continue
            name_node = node.child_by_field_name("name")
            if name_node is None:
                continue
            name = data[name_node.start_byte : name_node.end_byte].decode()
            kind = "class" if node.type == "class_declaration" else "function"
            defs.setdefault(name, []).append((path, kind, node.start_point[0] + 1))
            if kind != "class":
                continue
            for child in node.children:
                if child.type == "class_heritage":
                    ident = [c for c in child.children if c.type == "identifier"]
                    if ident:
                        bases[name] = data[ident[0].start_byte : ident[0].end_byte].decode()
                if child.type == "class_body":
                    for member in child.children:
                        if member.type == "method_definition":
                            mname = member.child_by_field_name("name")
                            if mname is not None:
                                methods.setdefault(name, []).append(
                                    data[mname.start_byte : mname.end_byte].decode()
                                )
    return {"defs": defs, "bases": bases, "methods": methods}


def js_question(
    rng: random.Random, files: dict[str, str], template: str
) -> tuple[str, Any, str, dict[str, Any]] | None:
    """``(question, answer, metric, params)`` for a JavaScript ``template``, or ``None``."""
    info = js_definitions(files)
    defs, bases, methods = info["defs"], info["bases"], info["methods"]
    if template == "where_defined":
        names = sorted(n for n, d in defs.items() if len(d) == 1 and len(n) >= 4)
        if not names:
            return None
        name = rng.choice(names)
        path, kind, line = defs[name][0]
        q = (
            f"In which file of the codebase is the {kind} `{name}` defined? "
            "Answer with the file's path as it appears in the codebase."
        )
        return q, path, "path", {"template": template, "name": name, "line": line}
    if template == "subclasses":
        children: dict[str, list[str]] = {}
        for cls, base in bases.items():
            children.setdefault(base, []).append(cls)
        candidates = sorted(b for b, c in children.items() if c)
        if not candidates:
            return None
        base = rng.choice(candidates)
        q = (
            f"Which classes in the codebase are declared with `extends {base}` (direct "
            "subclasses)? List the class names."
        )
        return q, sorted(children[base]), "f1", {"template": template, "base": base}
    if template == "methods":
        classes = sorted(c for c, m in methods.items() if 2 <= len(set(m) - {"constructor"}) <= 25)
        if not classes:
            return None
        cls = rng.choice(classes)
        names = sorted(set(methods[cls]) - {"constructor"})
        q = (
            f"Which methods does the class `{cls}` define in its class body (the constructor "
            "left out)? List the method names."
        )
        return q, names, "f1", {"template": template, "class": cls}
    raise ValueError(f"unknown template {template!r}")


def rename_words(
    files: dict[str, str], rng: random.Random
) -> tuple[dict[str, str], dict[str, str]]:
    """``(renamed files, {old: new})``: the JavaScript class, function and method names the
    package defines, replaced as whole words everywhere through a seeded bijection."""
    from bench.quality.gen_code import _styled

    info = js_definitions(files)
    names = set(info["defs"]) | {m for ms in info["methods"].values() for m in ms}
    names = {n for n in names if len(n) >= 4 and n not in _JS_RESERVED and n.isidentifier()}
    words = set(re.findall(r"[A-Za-z_$][\w$]*", "\n".join(files.values())))
    mapping: dict[str, str] = {}
    for name in sorted(names):
        new = _styled(name, rng)
        while new in words or new in mapping.values():
            new = _styled(name, rng)
        mapping[name] = new
    if not mapping:
        return dict(files), {}
    rx = re.compile(
        r"(?<![\w$])("
        + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True)))
        + r")(?![\w$])"
    )
    out = {p: rx.sub(lambda m: mapping[m.group(1)], t) for p, t in files.items()}
    return out, mapping


# -- judge ----------------------------------------------------------------------------------


def judge_items(
    rng: random.Random, pool: dict[str, list[str]], n_items: int, labels: list[str]
) -> list[tuple[str, str]]:
    """``n_items`` ``(label, text)`` drawn from ``pool`` over ``labels``, with a random
    (non-uniform) mix."""
    weights = [rng.random() + 0.2 for _ in labels]
    picked = rng.choices(labels, weights=weights, k=n_items)
    items = []
    for label in picked:
        items.append((label, rng.choice(pool[label])))
    return items


def judge_context(items: list[tuple[str, str]]) -> str:
    """The items as numbered lines, labels left out."""
    return "\n".join(f"{i}. {text}" for i, (_, text) in enumerate(items, 1)) + "\n"


def judge_question(
    rng: random.Random, items: list[tuple[str, str]], labels: list[str], template: str
) -> tuple[str, Any, str, list[str] | None, dict[str, Any]] | None:
    """``(question, answer, metric, choices, params)`` for a judge ``template``."""
    counts = Counter(label for label, _ in items)
    kinds = ", ".join(labels[:-1]) + f" or {labels[-1]}"
    if template == "count_label":
        label = rng.choice(labels)
        q = (
            f"The context lists {len(items)} numbered short descriptions, each of a thing that "
            f"is one of: {kinds}. How many of them describe a {label}? Answer with a number "
            "only."
        )
        return q, counts[label], "numeric", None, {"template": template, "label": label}
    if template == "most_common":
        top = counts.most_common()
        if len(top) > 1 and top[0][1] == top[1][1]:
            return None
        q = (
            f"The context lists {len(items)} numbered short descriptions, each of a thing that "
            f"is one of: {kinds}. Which of these kinds do most of them describe? Answer with "
            "the kind only."
        )
        return q, top[0][0], "exact", list(labels), {"template": template}
    raise ValueError(f"unknown template {template!r}")

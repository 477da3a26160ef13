"""A compact map of a codebase for the root model's first turn, in the spirit of aider's repo
map: what is indexed, the definitions most files mention, and the biggest files with their
top-level definitions, cut to a token budget.

It orients a model that would otherwise guess paths; it never holds an answer by itself
(every line points at code to look at with the REPL helpers).
"""

from __future__ import annotations

from collections.abc import Callable

from rlmd.codeintel.index import CodeIndex

DEFAULT_MAP_TOKENS = 400
"""The map's default budget in root-model tokens."""

_TOP_KINDS = frozenset({"class", "interface", "type", "function", "module"})


def repo_map(
    index: CodeIndex, count_tokens: Callable[[str], int], budget: int = DEFAULT_MAP_TOKENS
) -> list[str]:
    """Lines of the map, at most ``budget`` tokens together (by ``count_tokens``).

    Returns ``[]`` when nothing is indexed or not even the summary fits. Sections, each cut short before the budget:
    a summary line, ``Most-used definitions`` (top-level names defined at most twice, ranked by how many
    other files mention them), ``Biggest files`` with their first top-level definitions.
    """
    if not index.files or budget <= 0:
        return []
    langs = ", ".join(f"{n} {lang}" for lang, n in index.languages().most_common())
    lines = [f"Indexed: {langs} files; {index.symbol_count():,} definitions."]
    used = count_tokens(lines[0])
    if used > budget:
        return []

    def add(line: str) -> bool:
        nonlocal used
        cost = count_tokens(line) + 1
        if used + cost > budget:
            return False
        lines.append(line)
        used += cost
        return True

    refs = index.reference_counts()
    ranked = []
    for name, entries in index.by_name.items():
        if len(entries) > 2 or len(name) < 4 or name.startswith("__") or refs.get(name, 0) < 2:
            continue
        path, sym = entries[0]
        if sym.container or sym.kind not in _TOP_KINDS | {"constant"}:
            continue  # methods and variables: their names are common words
        ranked.append((-refs[name], name, path, sym))
    ranked.sort(key=lambda t: t[:2])
    biggest = sorted(index.files, key=lambda p: (-len(index.texts[p]), p))
    half = budget // 2
    if ranked and add("Most-used definitions (files mentioning them):"):
        for neg, _name, path, sym in ranked[:40]:
            if used > half or not add(f"  {sym.kind} {sym.qualname} ({path}:{sym.line}) {-neg}"):
                break
    if biggest and add("Biggest files (lines; top-level definitions):"):
        for path in biggest[:30]:
            info = index.files[path]
            tops = [s.name for s in info.symbols if not s.container and s.kind in _TOP_KINDS]
            shown = ", ".join(tops[:6]) + (f", +{len(tops) - 6}" if len(tops) > 6 else "")
            n_lines = index.texts[path].count("\n") + 1
            if not add(f"  {path} ({n_lines:,}; {shown or '-'})"):
                break
    return lines

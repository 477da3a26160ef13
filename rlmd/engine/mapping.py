"""``llm_map``'s prompts and replies: the map step of map-reduce over items.

Each sub-call gets the instruction and its item (or a numbered group of items); the answers
come back one per item, in order. With several items per call the reply is split by the
numbers the prompt asked for; an item the reply does not answer gets an ``"Error: ..."``
slot rather than a neighbour's answer.
"""

from __future__ import annotations

import ast
import re

from rlmd.sandbox.base import CODEBASE_HELPERS, RESERVED_NAMES

ERROR_PREFIX = "Error: "

_NUMBERED = re.compile(r"^\s*(?:item\s*)?\[?(\d+)\]?\s*[:.)\]-]\s*(.*?)\s*$", re.IGNORECASE)


_NOT_CALLABLE = ("context", "history")
"""Reserved names that are values, not helpers: an instruction naming one is no call."""


def helper_in_instruction(instruction: str, *, codebase: bool = True) -> str | None:
    """The REPL helper that ``instruction`` names, when the whole instruction is one helper
    (``"outline"``) or one call of it (``"find_subclasses('Base')"``), else ``None``.
    Without ``codebase`` (the run's context is no codebase, its REPL has no codebase
    helpers) a codebase helper's bare name is words, not a helper: ``llm_map("outline",
    chapters)`` over a text was refused with a line to run that raised ``NameError``; a
    call of one (``"list_files()"``) is still named.

    The instruction reaches a sub-model as text, which cannot run REPL helpers: a small root
    model wrote ``llm_map("find_subclasses(X)", context)`` in three held-out runs (issue 15,
    bench/RESULTS.md), spending one sub-call per item on answers that could not be right.
    """
    try:
        body = ast.parse(instruction.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    called = isinstance(body, ast.Call)
    node = body.func if isinstance(body, ast.Call) else body
    if not isinstance(node, ast.Name) or node.id in _NOT_CALLABLE:
        return None
    if node.id in RESERVED_NAMES or (node.id in CODEBASE_HELPERS and (codebase or called)):
        return node.id
    return None


def helper_call_code(
    instruction: str, items: str | None = None, *, codebase: bool = True
) -> str | None:
    """``instruction`` as a cell line to run, when it is a REPL helper or one call of it
    (:func:`helper_in_instruction`), else ``None``. Bare names among a call's arguments
    become strings, as the helpers take names as strings (``find_subclasses(Base)`` gives
    ``print(find_subclasses('Base'))``); the REPL's own names (``context``) stay names. A
    bare helper is applied to each item: of ``items``, the source of the expression the
    cell passed as the items (:func:`items_source`), else of a name ``items``
    (``outline`` and ``find_subclasses('Vorim')`` give
    ``print([outline(item) for item in find_subclasses('Vorim')])``). ``None`` too for a
    codebase helper without ``codebase`` (the REPL has none to run).

    The refusal shows this line: told to "call find_subclasses(...) in your code", the 1.5B
    model re-sent the refused cell five times (issue 15, held-out codeintel-006/007).
    """
    helper = helper_in_instruction(instruction, codebase=codebase)
    if helper is None or (helper in CODEBASE_HELPERS and not codebase):
        return None  # no such helper in this REPL: no line to run
    try:
        node = ast.parse(instruction.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(node, ast.Call):
        return f"print([{helper}(item) for item in {items or 'items'}])"

    def quoted(arg: ast.expr) -> ast.expr:
        if isinstance(arg, ast.Name) and arg.id not in RESERVED_NAMES:
            return ast.Constant(arg.id)
        return arg

    node.args = [quoted(a) for a in node.args]
    for kw in node.keywords:
        kw.value = quoted(kw.value)
    return f"print({ast.unparse(node)})"


def applies_to_items(instruction: str) -> bool:
    """Whether ``instruction`` is a bare helper (``"outline"``), which the refusal's line
    applies to each item, rather than one call of it (``"find_subclasses('Base')"``), whose
    line takes no items."""
    try:
        body = ast.parse(instruction.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return False
    return isinstance(body, ast.Name)


MAX_REFUSAL = 386
"""Characters of a refusal message: with ``RuntimeError: `` before it, the 400 characters of
an exception line a fold's note keeps (:func:`rlmd.engine.feedback.exception_text`)."""


def empty_items_refusal(refused: str, source: str | None, next_step: str | None) -> str:
    """The refusal of a bare helper over **no** items: ``refused`` (why the instruction
    cannot run), then that the items (``source``, the expression the cell passed, quoted
    when it fits) are empty, then the line to run: ``print(next_step)`` when a helper's note
    in the same cell named a next step (``"outline('lib/help.js')"``), else a pointer to
    search another way. Never a line over the empty items: ``[outline(item) for item in
    find_subclasses('Vorim')]`` prints ``[]``, and the 1.5B, which runs a refusal's line as
    shown, ran it, then answered the system prompt's placeholder path (issue 15, held-out
    codeintel-007, session 11). At most :data:`MAX_REFUSAL` characters (the next step, the
    part the model acts on, is never cut: a longer one is left out)."""
    tails = [f" Run this instead: print({next_step})"] if next_step else []
    tails.append(" Find what the question asks another way first (not over an empty result).")
    heads = ["its items are"]
    if source and not _is_literal(source):  # "its items, [], are empty" says nothing
        heads.insert(0, f"its items, {source}, are")
    text = refused
    for tail in tails:
        for items in heads:
            text = f"{refused}; and {items} empty, so there is nothing to run it on.{tail}"
            if len(text) <= MAX_REFUSAL:
                return text
    return text


def _is_literal(source: str) -> bool:
    try:
        ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


MAX_ITEMS_SOURCE = 120
"""Characters of an items expression the refusal's line may quote (longer: ``items``): the
whole refusal then stays within the 400 characters of an exception line a fold's note
keeps (:func:`rlmd.engine.feedback.exception_text`), so the line is never cut."""


def items_source(code: str | None, instruction: str) -> str | None:
    """The source of the items argument of the ``llm_map`` call in cell ``code`` whose
    instruction is the string literal ``instruction`` (one line, as :func:`ast.unparse`
    writes it), when every such call passes the same expression; else ``None`` (no such
    call, calls that differ, an instruction that is not a literal, a cell that does not
    parse, an expression over :data:`MAX_ITEMS_SOURCE` characters).

    The refusal's line to run is built from it: ``llm_map("outline",
    find_subclasses('Vorim'))`` was answered with ``print([outline(item) for item in
    items])``, and ``items`` was bound in no cell of the 1.5B model's (issue 15, held-out
    codeintel-007).
    """
    if not code:
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "llm_map":
            continue
        args = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        given = node.args[0] if node.args else args.get("instruction")
        items = node.args[1] if len(node.args) > 1 else args.get("items")
        if isinstance(given, ast.Constant) and given.value == instruction and items is not None:
            found.add(ast.unparse(items))
    if len(found) != 1:
        return None
    source = found.pop()
    return source if len(source) <= MAX_ITEMS_SOURCE and "\n" not in source else None


def group(items: list[str], per_call: int) -> list[list[str]]:
    """``items`` cut into consecutive groups of ``per_call`` (the last may be shorter)."""
    return [items[i : i + per_call] for i in range(0, len(items), per_call)]


def prompt(instruction: str, items: list[str]) -> str:
    """The sub-call prompt for one group: the item itself, or numbered items with a request
    for one ``<number>: <answer>`` line each."""
    if len(items) == 1:
        return f"{instruction.strip()}\n\nItem:\n{items[0]}\n\nAnswer briefly."
    listed = "\n".join(f"{n}. {item}" for n, item in enumerate(items, 1))
    return (
        f"{instruction.strip()}\n\nDo this for each of the {len(items)} numbered items below. "
        f"Reply with exactly {len(items)} lines, one per item, in the form "
        f'"<number>: <answer>", and nothing else.\n\nItems:\n{listed}'
    )


def split_replies(groups: list[list[str]], replies: list[str]) -> list[str]:
    """One answer per item, in order, from each group's reply (an ``"Error: ..."`` reply
    fills all of its group's slots)."""
    out: list[str] = []
    for items, reply in zip(groups, replies, strict=True):
        if reply.startswith(ERROR_PREFIX) or len(items) == 1:
            out.extend([reply.strip()] * len(items))
            continue
        found: dict[int, str] = {}
        for line in reply.splitlines():
            m = _NUMBERED.match(line)
            if m and 1 <= int(m.group(1)) <= len(items):
                found.setdefault(int(m.group(1)), m.group(2))
        for n in range(1, len(items) + 1):
            out.append(
                found[n]
                if n in found
                else f"{ERROR_PREFIX}the sub-model's reply had no line for item {n} of its group"
            )
    return out

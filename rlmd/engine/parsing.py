"""Reading the root model's reply: code blocks, prose answers, and whether a cell looked at
anything before answering."""

from __future__ import annotations

import ast
import re

from rlmd.sandbox.base import CODEBASE_HELPERS, RESERVED_NAMES

CODE_LANGUAGES = ("repl", "python", "python3", "py")
"""Fence languages that run. Small models (Qwen2.5-Coder 0.5B and 1.5B, seen in recorded
runs) often write ```python when asked for ```repl, so both are accepted."""

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PROSE_FINAL = re.compile(r"^\s*FINAL\((.*)\)\s*$", re.MULTILINE | re.DOTALL)
_PROSE_FINAL_VAR = re.compile(
    r"^\s*FINAL_VAR\(\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*\)\s*$", re.MULTILINE
)

INSPECTING_NAMES = frozenset(RESERVED_NAMES + CODEBASE_HELPERS) - {"FINAL", "FINAL_VAR"}
"""Names whose use in a cell means the cell looked at something (see :func:`cell_inspects`)."""


def find_code_blocks(text: str) -> list[str]:
    """The runnable code blocks of a reply, in order.

    A block is a fenced block whose language is in :data:`CODE_LANGUAGES`; an unterminated
    last fence (the reply hit ``max_tokens``) still counts, so the model sees the resulting
    error instead of silence. Blocks that are empty after stripping are dropped.
    """
    blocks = []
    for match in _FENCE.finditer(text):
        lang, body = match.group(1).lower(), match.group(2)
        if lang in CODE_LANGUAGES and body.strip():
            blocks.append(body.rstrip() + "\n")
    return blocks


def has_repl_block(text: str) -> bool:
    """Whether ``text`` holds a non-empty ```` ```repl ```` block: code for the REPL, which
    is never an answer (a ```` ```python ```` snippet may be part of one)."""
    return any(m.group(1).lower() == "repl" and m.group(2).strip() for m in _FENCE.finditer(text))


def find_prose_final(text: str) -> tuple[str, str] | None:
    """A final answer written as text outside code (the tolerant fallback).

    Returns:
        ``("final_var", name)`` for ``FINAL_VAR(name)``, ``("final", value)`` for
        ``FINAL(value)`` (surrounding quotes stripped), or ``None``.
    """
    if m := _PROSE_FINAL_VAR.search(text):
        return "final_var", m.group(1)
    if m := _PROSE_FINAL.search(text):
        value = m.group(1).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        return "final", value
    return None


def cell_inspects(code: str) -> bool:
    """Whether a cell does more than hand over a literal answer.

    True when the cell reads ``context``, calls a REPL helper or a sub-model, or contains
    any statement besides a ``FINAL(...)``/``FINAL_VAR(...)`` call; False for a cell such as
    ``FINAL("42")``. Code that does not parse counts as inspecting (it ran and failed).
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in INSPECTING_NAMES:
            return True
    for stmt in tree.body:
        is_final_call = (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in ("FINAL", "FINAL_VAR")
        )
        if not is_final_call:
            return True
    return False


def cut_after_first_block(text: str) -> str:
    """``text`` up to the end of its first runnable code block (the closing fence included).

    The fallback for a provider that ignored the stop sequence: what the model wrote after
    its first block (often an invented output, ``bench/RESULTS.md``) is dropped. Text with no
    closed runnable block is returned unchanged.
    """
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in CODE_LANGUAGES and m.group(2).strip():
            return text[: m.end()] if m.group(0).endswith("```") else text
    return text


def close_open_fence(text: str) -> str:
    """``text`` with its last fence closed (a ````` line appended) if it ends inside one,
    as a reply cut by the stop sequence or by ``max_tokens`` does; else ``text``."""
    last = None
    for last in _FENCE.finditer(text):  # noqa: B007 (the last match is what counts)
        pass
    if last is not None and not last.group(0).endswith("```"):
        return text.rstrip("\n") + "\n```"
    return text


def _final_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("FINAL", "FINAL_VAR")
    ]


def final_is_literal(code: str) -> bool:
    """Whether every ``FINAL(...)`` call in ``code`` hands over a literal typed by the model
    (``FINAL("42")``, ``FINAL(-3)``, ``FINAL(["a", "b"])``) rather than a value code computed
    (``FINAL(total)``, ``FINAL(len(hits))``, ``FINAL_VAR("total")``). False when the cell
    has no FINAL call or does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    calls = _final_calls(tree)
    if not calls:
        return False
    for call in calls:
        name = call.func.id if isinstance(call.func, ast.Name) else ""
        if name == "FINAL_VAR" or not call.args:
            return False
        for node in ast.walk(call.args[0]):
            if isinstance(node, ast.Name | ast.Call | ast.Attribute | ast.Subscript):
                return False
    return True


def final_undefined_name(code: str, error: str | None) -> str | None:
    """The name a ``FINAL(...)`` argument used that the cell's ``NameError`` says is not
    defined (``FINAL(answer)`` copied from an example), else ``None``."""
    lines = (error or "").strip().splitlines()
    if not lines or not lines[-1].startswith("NameError"):
        return None
    m = re.search(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined", lines[-1])
    if not m:
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for call in _final_calls(tree):
        for arg in call.args:
            if any(isinstance(n, ast.Name) and n.id == m.group(1) for n in ast.walk(arg)):
                return m.group(1)
    return None


def calls_with_path(code: str, name: str) -> bool:
    """Whether ``code`` calls ``name(...)`` with more than one argument (for ``grep``: a
    path or glob that limits the search)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == name
        and (len(n.args) > 1 or any(k.arg == "path_glob" for k in n.keywords))
        for n in ast.walk(tree)
    )


def has_final_call(code: str) -> bool:
    """Whether ``code`` parses and calls ``FINAL(...)`` or ``FINAL_VAR(...)``."""
    try:
        return bool(_final_calls(ast.parse(code)))
    except SyntaxError:
        return False


def answer_in_outputs(answer: str, outputs: list[str]) -> bool:
    """Whether ``answer`` (stripped of quotes and spaces) occurs in any of ``outputs`` as a
    whole token: case-insensitive, not inside a longer word or number (``"3"`` does not
    occur in ``"1930s"``; ``"streams.py"`` occurs in ``"asyncio/streams.py:12"``)."""
    value = answer.strip().strip("'\"").strip()
    if not value:
        return False
    pattern = re.compile(
        r"(?<![A-Za-z0-9_])" + re.escape(value) + r"(?![A-Za-z0-9_])", re.IGNORECASE
    )
    return any(pattern.search(out) for out in outputs)


EMPTY_ANSWERS = frozenset({"", "[]", "{}", "()", "set()", "None", "''", '""'})
"""Answers that hold nothing: what ``FINAL(hits)`` gives after a search found nothing."""


def is_empty_answer(answer: str) -> bool:
    """Whether ``answer`` (stripped) is one of :data:`EMPTY_ANSWERS`."""
    return answer.strip() in EMPTY_ANSWERS


def is_short_answer(answer: str, max_chars: int = 100) -> bool:
    """A number, a single token or a path: no whitespace inside, 1..``max_chars`` characters
    after stripping quotes and spaces."""
    value = answer.strip().strip("'\"").strip()
    return 0 < len(value) <= max_chars and not any(c.isspace() for c in value)


_WHOLE_FENCE = re.compile(r"\A```[\w+-]*[ \t]*\n(.*?)\n?```\s*\Z", re.S)


def unfence(text: str) -> str:
    """``text`` without a code fence wrapped around all of it (an extracted answer came
    back as ```` ```\n42\n``` ```` in issue 15); any other text unchanged."""
    m = _WHOLE_FENCE.match(text.strip())
    return m.group(1).strip() if m and "```" not in m.group(1) else text


def cap_output(text: str, limit: int) -> str:
    """Keep the head (60 %) and tail (40 %) of ``text`` within ``limit`` characters and say
    how much was cut and where the rest is."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head
    cut = len(text) - head - tail
    return (
        text[:head]
        + f"\n[... {cut:,} characters cut: output is capped at {limit:,} characters per cell; "
        "the full output is in the trajectory. Print smaller slices, or keep results in "
        "variables and pass them to llm_query ...]\n" + text[-tail:]
    )

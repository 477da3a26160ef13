"""Reading the root model's reply: code blocks, prose answers, and whether a cell looked at
anything before answering."""

from __future__ import annotations

import ast
import re

from rlmd.sandbox.base import CODEBASE_HELPERS, RESERVED_NAMES

CODE_LANGUAGES = ("repl", "python", "python3", "py")
"""Fence languages that run. Small models write ```python when asked for ```repl
(shared/notes/local-models.md, "Lessons the engine must enforce" 1), so both are accepted."""

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

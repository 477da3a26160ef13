"""The budget flags of ``rlmd run``, ``ask``, ``mcp``, ``acp`` and ``train rollout``, checked by the
engine's one check (:class:`~rlmd.engine.budget.Budget`) and named as the user typed them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine is imported when a flag is checked, not to build the parser
    from rlmd.engine.budget import BudgetError

_SAME_NAME = ("max_usd", "max_seconds", "max_depth", "max_iterations", "max_tokens", "max_subcalls")

RUN_FLAGS = {**{name: name for name in _SAME_NAME}, "cell_timeout_s": "cell_timeout"}
"""The budget flags of ``rlmd run``, ``mcp`` and ``acp``: each :class:`Budget` field and the
``args`` attribute that holds it."""


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Add :data:`RUN_FLAGS` to ``parser`` as ``rlmd run`` and ``rlmd ask`` take them
    (``None`` when left out: the engine's defaults apply)."""
    parser.add_argument("--max-depth", type=int, help="RLM loops run at depths 0..N-1 (default 2)")
    parser.add_argument("--max-iterations", type=int, help="root turns per loop (default 10)")
    parser.add_argument("--max-tokens", type=int, help="token budget over the whole tree")
    parser.add_argument("--max-usd", type=float, help="USD budget over the whole tree")
    parser.add_argument("--max-seconds", type=float, help="wall-clock budget, seconds")
    parser.add_argument("--max-subcalls", type=int, help="sub-call + child-run budget")
    parser.add_argument("--cell-timeout", type=float, help="seconds per REPL cell (default 120)")


def named(exc: BudgetError, fields: dict[str, str]) -> str:
    """``exc``'s message with its field named as the flag (``--cell-timeout must be ...``)."""
    return f"--{fields[exc.field].replace('_', '-')} {exc.reason}"


def budget_flag_problem(args: argparse.Namespace, fields: dict[str, str]) -> str | None:
    """A message naming the flag whose value :class:`Budget` refuses (``--max-iterations
    must be >= 1, got 0``), else ``None``.

    Args:
        args: the parsed command line.
        fields: each :class:`Budget` field checked and the ``args`` attribute that holds it
            (``{"cell_timeout_s": "cell_timeout"}``); the flag is that attribute with
            dashes. An attribute that is ``None`` (the flag left out) is not checked.
    """
    limits = {field: getattr(args, name, None) for field, name in fields.items()}
    from rlmd.engine.budget import Budget, BudgetError

    try:
        Budget(**{field: value for field, value in limits.items() if value is not None})
    except BudgetError as exc:
        return named(exc, fields)
    return None

"""What a run's end means for its answer, in the words every surface uses (CLI, TUI; the VS
Code extension's ``model.ts`` says the same).

* :func:`budget_note` — which budget ended a run and by how much it was overshot.
* :func:`answer_note` — ``"partial answer: ..."`` for an answer extracted after a budget ran
  out, else ``None``.
* :func:`refused_finals` — the cells whose ``FINAL`` the engine did not accept.

Everything takes the run dicts of :meth:`Store.get_run` / :meth:`Store.tree` (``status``,
``budget`` and ``usage`` decoded from JSON) and never raises on missing keys.
"""

from __future__ import annotations

from typing import Any

BUDGETS: dict[str, tuple[str, str]] = {
    "max_iterations": ("iteration budget", "max_iterations"),
    "max_time": ("wall-clock budget", "max_seconds"),
    "max_tokens": ("token budget", "max_tokens"),
    "max_usd": ("spend budget", "max_usd"),
    "max_subcalls": ("sub-call budget", "max_subcalls"),
    "max_errors": ("error budget", "max_consecutive_errors"),
}
"""Run status → (the budget's name in words, its key in the run's ``budget``)."""


CELL_SOURCES = ("final", "final_var", "unverified")
"""Answer sources that can be a cell's ``FINAL`` (``unverified``: accepted while doubted)."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usd(x: float) -> str:
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def _spent(status: str, run: dict[str, Any]) -> float | None:
    """What the run tree spent of the budget behind ``status`` (``None``: not counted)."""
    usage = _dict(run.get("usage"))
    total = _dict(usage.get("total"))
    if status == "max_usd":
        return float(total.get("cost_usd") or 0.0)
    if status == "max_tokens":
        return float(
            total.get("total_tokens")
            or int(total.get("input_tokens") or 0) + int(total.get("output_tokens") or 0)
        )
    if status == "max_time":
        wall = usage.get("wall_time_s")
        return None if wall is None else float(wall)
    if status == "max_subcalls":
        tree = _dict(run.get("tree"))
        n = tree.get("subcalls", run.get("subcalls"))
        return None if n is None else float(n)
    return None


def _amount(status: str, x: float) -> str:
    if status == "max_usd":
        return _usd(x)
    if status == "max_time":
        return f"{x:.1f} s"
    return f"{int(x):,}" + (" tokens" if status == "max_tokens" else "")


def budget_note(run: dict[str, Any]) -> str | None:
    """``"the spend budget ($0.0100) ended the run; $0.0208 spent, $0.0108 (108%) over"`` for a
    run whose status names a budget, ``None`` for any other status. The overshoot part is
    there only when the run tree spent more than the limit (the extraction call and the call
    that crossed the limit are paid for after it)."""
    status = str(run.get("status") or "")
    if status not in BUDGETS:
        return None
    words, key = BUDGETS[status]
    budget = _dict(run.get("budget"))
    limit = budget.get(key)
    if limit is None:
        return f"the {words} ended the run"
    note = f"the {words} ({_amount(status, float(limit))}) ended the run"
    spent = _spent(status, run)
    if spent is not None and spent > float(limit):
        over = spent - float(limit)
        pct = f" ({over / float(limit):.0%})" if float(limit) > 0 else ""
        note += f"; {_amount(status, spent)} spent, {_amount(status, over)}{pct} over"
    return note


def answer_note(run: dict[str, Any]) -> str | None:
    """``"partial answer: extracted from the work so far after <budget_note>"`` when the
    answer was extracted after a budget ran out; ``None`` for a final answer or no answer."""
    if run.get("answer") is None or run.get("answer_source") != "extraction":
        return None
    why = budget_note(run) or f"the run ended ({run.get('status')})"
    return f"partial answer: extracted from the work so far after {why}"


def refused_finals(run: dict[str, Any]) -> set[str]:
    """Ids of the cell nodes in ``run`` (a :meth:`Store.tree` dict, its own nodes only) whose
    ``FINAL`` did not end the run: the engine questioned or refused it and asked for more
    work. Only the run's last ``FINAL`` can have been accepted, and only when the run
    completed with it as the answer (a prose answer after it means it was not)."""
    cells: list[dict[str, Any]] = []

    def walk(nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            if node.get("kind") == "cell" and (node.get("data") or {}).get("final") is not None:
                cells.append(node)
            walk(node.get("children") or [])

    walk(run.get("nodes") or [])
    accepted = (
        run.get("status") == "completed"
        and run.get("answer_source") in CELL_SOURCES
        and bool(cells)
        and str((cells[-1].get("data") or {}).get("final")) == str(run.get("answer"))
    )
    last = cells[-1]["id"] if accepted else None
    return {c["id"] for c in cells if c["id"] != last}

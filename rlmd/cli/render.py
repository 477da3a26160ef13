"""Rich renderables for stored runs (used by the CLI).

* :func:`runs_table` — a table of run dicts from :meth:`Store.list_runs`.
* :func:`run_tree` — a :class:`rich.tree.Tree` of :meth:`Store.tree`.
* :func:`run_summary` — a panel with answer, status and usage by model and by depth.

All text taken from the store (questions, code, output) is inserted as :class:`rich.text.Text`,
never parsed as markup, with its control characters made visible (:mod:`rlmd.cli.term`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from rlmd.cli.outcome import answer_note, budget_note, refused_finals
from rlmd.cli.term import visible, visible_all

STATUS_STYLES = {
    "running": "yellow",
    "completed": "green",
    "ok": "green",
    "interrupted": "magenta",
    "cancelled": "magenta",
    "failed": "bold red",
    "sandbox_failed": "bold red",
    "error": "bold red",
    "timeout": "red",
}
"""Style per status; any other status (the budget limits ``max_*``) is shown in orange."""


def status_text(status: str | None) -> Text:
    """The status, coloured."""
    status = status or "?"
    return Text(status, style=STATUS_STYLES.get(status, "dark_orange"))


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not one (a store edited by hand
    or damaged can hold text or infinity in a numeric column)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _not_a_number(value: Any) -> str:
    """How a stored value that should be a number but is not is shown: ``?`` and the value
    (at most 20 characters, control characters escaped), so the rest of the run still shows."""
    return "?" + visible(_one_line(repr(value), 20))


def fmt_tokens(n: Any) -> str:
    """``950``, ``12.3k``, ``4.1M``; ``?`` and the value when it is not a number."""
    number = finite_number(n or 0)
    if number is None:
        return _not_a_number(n)
    n = int(number)
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def fmt_cost(usd: Any) -> str:
    """``$0`` or dollars with enough digits to be non-zero (``$0.00042``); ``?`` and the
    value when it is not a number."""
    number = finite_number(usd or 0)
    if number is None:
        return _not_a_number(usd)
    usd = number
    if usd == 0:
        return "$0"
    if usd >= 1:
        return f"${usd:.2f}"
    return f"${usd:.4f}" if usd >= 0.001 else f"${usd:.6f}"


def fmt_duration(seconds: Any) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``1h02m``; ``-`` when unknown; ``?`` and the value when
    it is not a number."""
    if seconds is None:
        return "-"
    number = finite_number(seconds)
    if number is None:
        return _not_a_number(seconds)
    s = max(0.0, number)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def cell_name(data: dict[str, Any]) -> str:
    """``cell 1`` for a cell node's data: counted from 1, as the live progress counts."""
    index = data.get("index")
    return f"cell {int(index) + 1}" if isinstance(index, int) else "cell"


def fmt_time(ts: Any) -> str:
    """Local ``YYYY-MM-DD HH:MM`` of an epoch timestamp."""
    if ts is None:
        return "-"
    number = finite_number(ts)
    try:
        if number is not None:
            return datetime.fromtimestamp(number).strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):  # a year past 9999 or before 1
        pass
    return _not_a_number(ts)


def short_time(ts: Any, long: bool = False) -> str:
    """``MM-DD HH:MM`` of an epoch timestamp (``YYYY-MM-DD HH:MM`` when ``long``); ``-``
    when unknown, ``?`` and the value when it is not a time."""
    text = fmt_time(ts)
    return text if long or ts is None or text.startswith("?") else text[5:]


def run_duration(run: dict[str, Any]) -> float | None:
    """Seconds from start to finish (to now while running); ``None`` without a start."""
    start = finite_number(run.get("started_at"))
    if start is None:
        return None
    end = finite_number(run.get("finished_at"))
    if end is None:
        end = time.time() if run.get("status") == "running" else None
    return None if end is None else end - start


def short_ids(ids: Iterable[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefixes (at least ``minimum`` characters) that tell ``ids`` apart."""
    ids = list(dict.fromkeys(ids))
    length = minimum
    longest = max((len(i) for i in ids), default=0)
    while length < longest and len({i[:length] for i in ids}) < len(ids):
        length += 1
    return {i: i[:length] for i in ids}


def _one_line(text: Any, width: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


RUN_COLUMNS = (
    "id", "status", "question", "model", "depth", "iters", "subcalls",
    "tokens in/out", "cost", "duration", "started",
)  # fmt: skip
"""Columns of :func:`runs_table`, left to right."""

OPTIONAL_RUN_COLUMNS = ("duration", "subcalls", "iters", "depth", "model")
"""Dropped in this order when the terminal is too narrow for them and a readable question."""


def runs_table(runs: list[dict[str, Any]], *, title: str | None = None, width: int = 200) -> Table:
    """A table of runs (dicts from :meth:`Store.list_runs`) laid out for a terminal ``width``
    columns wide: every column keeps its full width and the question (one line, cut with
    ``…``) takes the rest; the columns of :data:`OPTIONAL_RUN_COLUMNS` are dropped, in that
    order, while the question would get fewer than 30 cells.

    Columns: id (shortest unique prefix), status, question, root model, depth reached,
    iterations, sub-calls, tokens in/out, cost, duration, started. Totals come from each
    run's ``"tree"`` (the run and its child runs) when present, else its own counters.
    """
    runs = visible_all(runs)
    short = short_ids(r["id"] for r in runs)
    rows: list[dict[str, Text]] = []
    for run in runs:
        totals = run.get("tree") or {}
        get = lambda k, run=run, totals=totals: totals.get(k, run.get(k))  # noqa: E731
        depth = totals.get("max_depth", run.get("depth"))
        cells: dict[str, str | Text] = {
            "id": Text(short[run["id"]], style="cyan"),
            "status": status_text(run.get("status")),
            "question": Text(_one_line(run.get("question"), 400)),
            "model": Text(str(run.get("root_model") or "-")),
            "depth": str(depth if depth is not None else "-"),
            "iters": str(get("iterations") or 0),
            "subcalls": str(get("subcalls") or 0),
            "tokens in/out": f"{fmt_tokens(get('input_tokens'))}/{fmt_tokens(get('output_tokens'))}",
            "cost": fmt_cost(get("cost_usd")),
            "duration": fmt_duration(run_duration(run)),
            "started": short_time(run.get("started_at"), width >= 120),
        }
        rows.append({k: v if isinstance(v, Text) else Text(v) for k, v in cells.items()})
    widths = {c: max([len(c)] + [r[c].cell_len for r in rows]) for c in RUN_COLUMNS}
    if width < 120:  # "tokens" over "3.2k/47": the header is the widest cell
        widths["tokens in/out"] = max([6] + [r["tokens in/out"].cell_len for r in rows])
    widths["model"] = min(widths["model"], 24)
    names = list(RUN_COLUMNS)

    def room() -> int:  # cells left for the question; 2 between columns (their padding)
        return width - sum(widths[c] for c in names if c != "question") - 2 * (len(names) - 1)

    for optional in OPTIONAL_RUN_COLUMNS:
        if room() >= min(30, widths["question"]):
            break
        names.remove(optional)
    table = Table(title=title, box=None, header_style="bold underline", pad_edge=False)
    for name in names:
        w = max(12, min(widths[name], room())) if name == "question" else widths[name]
        right = name not in ("id", "status", "question", "model", "started")
        header = "tokens" if name == "tokens in/out" and w < len(name) else name
        table.add_column(
            header, no_wrap=True, overflow="ellipsis", width=w, justify="right" if right else "left"
        )
    for row in rows:
        table.add_row(*(row[name] for name in names))
    return table


def _preview(text: Any, lines: int, width: int = 110) -> str:
    """The first ``lines`` lines of ``text`` (each cut at ``width``), with a count of the rest."""
    all_lines = str(text or "").rstrip("\n").splitlines()
    shown = [line if len(line) <= width else line[: width - 1] + "…" for line in all_lines[:lines]]
    if len(all_lines) > lines:
        shown.append(f"… {len(all_lines) - lines} more lines")
    return "\n".join(shown)


def _node_label(node: dict[str, Any]) -> Text:
    data = node.get("data") or {}
    kind = node.get("kind")
    status = node.get("status")
    label = Text()
    if kind == "iteration":
        label.append(f"iteration {int(data.get('index', 0)) + 1}", style="bold")
    elif kind == "model_call":
        label.append(f"{node.get('role') or 'model'} call", style="bold blue")
        label.append(f" {node.get('model') or ''}")
        if node.get("input_tokens") is not None or node.get("output_tokens") is not None:
            label.append(
                f"  {fmt_tokens(node.get('input_tokens'))}→{fmt_tokens(node.get('output_tokens'))} tok",
                style="dim",
            )
        if node.get("cost_usd"):
            label.append(f"  {fmt_cost(node.get('cost_usd'))}", style="dim")
    elif kind == "cell":
        label.append(cell_name(data), style="bold green")
    elif kind == "compaction":
        label.append("compaction", style="bold magenta")
        if data.get("reason") == "failed_turn":  # nothing summarised: a turn left the view
            label.append(": a failed turn folded out of the model's view", style="dim")
        else:
            n = data.get("summarised_messages", "?")
            label.append(f": summarised {n} messages", style="dim")
    else:
        label.append(str(kind), style="bold")
    if node.get("latency_s") is not None and kind != "compaction":
        label.append(f"  {fmt_duration(node['latency_s'])}", style="dim")
    if status and status != "ok":
        label.append("  ")
        label.append_text(status_text(status))
    return label


def _add_node(
    parent: Tree, node: dict[str, Any], code_lines: int, output_lines: int, refused: set[str]
) -> None:
    data = node.get("data") or {}
    branch = parent.add(_node_label(node))
    if node.get("kind") == "cell":
        if data.get("code"):
            branch.add(Text(_preview(data["code"], code_lines), style="cyan"))
        if data.get("stdout"):
            branch.add(Text(_preview(data["stdout"], output_lines)))
        if data.get("stderr"):
            branch.add(Text(_preview(data["stderr"], output_lines), style="yellow"))
        if data.get("error"):
            branch.add(Text(_preview(data["error"], output_lines), style="bold red"))
        if data.get("final") is not None and node.get("id") in refused:
            branch.add(
                Text(
                    f"FINAL not accepted (the engine asked for more work): "
                    f"{_one_line(data['final'], 80)}",
                    style="yellow",
                )
            )
        elif data.get("final") is not None:
            branch.add(Text(f"FINAL: {_one_line(data['final'], 100)}", style="bold green"))
    elif node.get("kind") == "model_call" and data.get("error"):
        branch.add(Text(_one_line(data["error"], 110), style="bold red"))
    for child in node.get("children") or []:
        _add_node(branch, child, code_lines, output_lines, refused)
    for run in node.get("runs") or []:
        _add_run(branch, run, code_lines, output_lines)


def _run_label(run: dict[str, Any], child: bool) -> Text:
    label = Text()
    label.append("↳ child run " if child else "run ", style="bold")
    label.append(str(run.get("id")), style="cyan")
    label.append(f"  depth {run.get('depth', 0)}  ", style="dim")
    label.append_text(status_text(run.get("status")))
    if run.get("root_model"):
        label.append(f"  {run['root_model']}", style="dim")
    if run.get("question"):
        label.append("\n")
        label.append(_one_line(run["question"], 100))
    return label


def _add_run(parent: Tree, run: dict[str, Any], code_lines: int, output_lines: int) -> None:
    branch = parent.add(_run_label(run, child=True))
    _fill_run(branch, run, code_lines, output_lines)


def _fill_run(branch: Tree, run: dict[str, Any], code_lines: int, output_lines: int) -> None:
    refused = refused_finals(run)
    for node in run.get("nodes") or []:
        _add_node(branch, node, code_lines, output_lines, refused)
    for child in run.get("runs") or []:
        _add_run(branch, child, code_lines, output_lines)
    if run.get("error"):
        branch.add(Text(f"error: {_one_line(run['error'], 110)}", style="bold red"))
    if run.get("answer") is not None:
        partial = run.get("answer_source") == "extraction"
        label = "partial answer (extracted)" if partial else "answer"
        style = "bold dark_orange" if partial else "bold green"
        branch.add(Text(f"{label}: {_one_line(run['answer'], 110)}", style=style))


def run_tree(tree: dict[str, Any], *, code_lines: int = 3, output_lines: int = 3) -> Tree:
    """The run tree (from :meth:`Store.tree`): iterations, model calls with tokens and
    latency, cells with a preview of their code and output (errors in red), child runs
    nested under the cell that started them with their status and answer."""
    tree = visible_all(tree)
    root = Tree(_run_label(tree, child=False), guide_style="dim")
    _fill_run(root, tree, code_lines, output_lines)
    return root


def _usage_table(title: str, rows: dict[str, Any], key_name: str) -> Table:
    table = Table(title=title, box=box.SIMPLE, title_justify="left", header_style="bold")
    table.add_column(key_name)
    for name in ("calls", "tokens in", "tokens out", "cost"):
        table.add_column(name, justify="right")
    for key, tally in rows.items():
        tally = tally if isinstance(tally, dict) else {}
        table.add_row(
            Text(str(key)),
            str(tally.get("calls", "-")),
            fmt_tokens(tally.get("input_tokens")),
            fmt_tokens(tally.get("output_tokens")),
            fmt_cost(tally.get("cost_usd")),
        )
    return table


MAX_SHOWN_ANSWER = 20_000
"""Characters of an answer :func:`run_summary` draws; the rest is counted (``rlmd export``
has it all)."""


def run_summary(run: dict[str, Any]) -> Panel:
    """A header for one run: status, question, answer (and its source), error, duration, and
    usage by model and by depth from the run's ``usage`` JSON (``{"total", "by_model",
    "by_depth", "wall_time_s"}``; missing while the run is still going)."""
    answer = run.get("answer")
    shown_answer = answer
    if isinstance(answer, str) and len(answer) > MAX_SHOWN_ANSWER:
        # A 50 MB FINAL (model code can write one) took `rlmd show` 23 s and 1 GB to draw.
        shown_answer = answer[:MAX_SHOWN_ANSWER]
    run = visible_all({**run, "answer": shown_answer})
    # A grid, so a long value wraps under its own column, not under the labels.
    lines = Table.grid(padding=(0, 1, 0, 0))
    lines.add_column(style="bold", no_wrap=True)
    lines.add_column()
    head = status_text(run.get("status"))
    head.append(
        f"   duration {fmt_duration(run_duration(run))}   started {fmt_time(run.get('started_at'))}",
        style="",
    )
    lines.add_row(Text("status", style=""), head)
    lines.add_row("question", _one_line(run.get("question"), 400))
    shown = Text(
        str(run["answer"]) if answer is not None else "-",
        style="green" if answer is not None else "dim",
        overflow="fold",  # a long path or URL folds onto the next line, never cut
    )
    if isinstance(answer, str) and shown_answer is not answer:
        shown.append(
            f"\n… {len(answer) - MAX_SHOWN_ANSWER:,} more characters "
            f"(rlmd export {run.get('id')} has the whole answer)",
            style="dim",
        )
    if run.get("answer_source"):
        shown.append(f"  ({run['answer_source']})", style="dim")
    lines.add_row("answer", shown)
    note = answer_note(run) or budget_note(run)
    if note:
        lines.add_row("budget", Text(note, style="dark_orange"))
    if run.get("error"):
        lines.add_row("error", Text(str(run["error"]), style="bold red"))
    parts: list[RenderableType] = [lines]
    usage = run.get("usage") if isinstance(run.get("usage"), dict) else None
    if usage:
        total = usage.get("total") or {}
        parts.append(
            Text(
                f"total: {total.get('calls', 0)} calls, {fmt_tokens(total.get('input_tokens'))} in / "
                f"{fmt_tokens(total.get('output_tokens'))} out, {fmt_cost(total.get('cost_usd'))}, "
                f"wall time {fmt_duration(usage.get('wall_time_s'))}",
                style="bold",
            )
        )
        if usage.get("by_model"):
            parts.append(_usage_table("by model", usage["by_model"], "model"))
        if usage.get("by_depth"):
            depths = dict(
                sorted(
                    usage["by_depth"].items(),
                    key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0,
                )
            )
            parts.append(_usage_table("by depth", depths, "depth"))
    else:
        parts.append(
            Text(
                f"own calls so far: {fmt_tokens(run.get('input_tokens'))} in / "
                f"{fmt_tokens(run.get('output_tokens'))} out, {fmt_cost(run.get('cost_usd'))}",
                style="dim",
            )
        )
    return Panel(Group(*parts), title=f"run {run.get('id')}", title_align="left")

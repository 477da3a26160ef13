"""Text for the screens: tree labels, the detail pane's lines, the summary header."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text

from rlmd.cli.outcome import answer_note, budget_note
from rlmd.cli.render import (
    cell_name,
    finite_number,
    fmt_cost,
    fmt_duration,
    fmt_tokens,
    run_duration,
    short_time,
    status_text,
)
from rlmd.cli.term import visible
from rlmd_tui.lineview import Para

ORANGE = Style(color="dark_orange", bold=True)
SOURCE_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.\w+):(\d+)\b")
"""``path/to/file.py:12`` in an answer or output."""

RED = Style(color="red", bold=True)
YELLOW = Style(color="yellow")
DIM = Style(dim=True)
HEAD = Style(bold=True, color="cyan")


def one_line(text: Any, width: int) -> str:
    text = " ".join(visible(text or "").split())
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def when(ts: Any) -> str:
    return short_time(ts)


def tokens_of(run: dict[str, Any]) -> int:
    """Tokens in and out of a run's tree (a value that is not a number counts 0)."""
    tree = run.get("tree") or {}
    return sum(
        int(finite_number(tree.get(key) or run.get(key) or 0) or 0)
        for key in ("input_tokens", "output_tokens")
    )


def run_label(run: dict[str, Any], child: bool) -> Text:
    label = Text()
    label.append("↳ " if child else "", style="bold")
    label.append_text(status_text(run.get("status")))
    label.append(f" d{run.get('depth', 0)} ", style="dim")
    label.append(one_line(run.get("question"), 50))
    return label


def node_label(node: dict[str, Any]) -> Text:
    data = node.get("data") or {}
    kind = node.get("kind")
    label = Text()
    if kind == "iteration":
        label.append(f"iteration {int(data.get('index', 0)) + 1}", style="bold")
    elif kind == "model_call":
        label.append(f"{node.get('role') or 'model'} call", style="bold blue")
        if node.get("input_tokens") is not None or node.get("output_tokens") is not None:
            label.append(
                f" {fmt_tokens(node.get('input_tokens'))}→{fmt_tokens(node.get('output_tokens'))}",
                style="dim",
            )
    elif kind == "cell":
        label.append(cell_name(data), style="bold green")
        code = one_line(data.get("code"), 30)
        if code:
            label.append(f" {code}", style="dim")
    elif kind == "compaction":
        label.append("compaction", style="bold magenta")
        if data.get("reason") == "failed_turn":  # as `rlmd show` says it
            label.append(" failed turn folded", style="dim")
    else:
        label.append(str(kind), style="bold")
    if node.get("latency_s") is not None and kind != "compaction":
        label.append(f" {fmt_duration(node['latency_s'])}", style="dim")
    status = node.get("status")
    if data.get("error") or (status and status not in ("ok", "running")):
        label.append(" ")
        label.append("✗ " + (status if status and status != "ok" else "error"), style="bold red")
    elif status == "running":
        label.append(" …", style="yellow")
    return label


def _block(title: str, text: Any, style: Style | None = None, *, prose: bool = False) -> list:
    """A titled block; ``prose`` lines (answers, questions) wrap at the pane's width."""
    lines: list = [Text(title, style=HEAD)]
    body = str(text)
    for line in body.splitlines() or [""]:
        if prose:
            line = Para(line)
        lines.append((line, style) if style is not None else line)
    lines.append("")
    return lines


def detail_text(kind: str, item: dict[str, Any]) -> str:
    """The text of an item where ``path:line`` citations are looked for: a run's answer, a
    cell's output and FINAL, a model call's response."""
    data = item.get("data") or {}
    if kind == "run":
        parts = [item.get("answer")]
    else:
        parts = [data.get(k) for k in ("final", "stdout", "response", "summary")]
    return "\n".join(str(p) for p in parts if p)


def source_refs(text: str, workspace: str | None) -> list[tuple[Path, int]]:
    """The ``path:line`` citations in ``text`` that name an existing file (relative paths
    against ``workspace``), in order, without repeats."""
    found: list[tuple[Path, int]] = []
    for match in SOURCE_REF.finditer(text or ""):
        path = Path(match.group(1))
        if not path.is_absolute() and workspace:
            path = Path(workspace) / path
        ref = (path, int(match.group(2)))
        if path.is_file() and ref not in found:
            found.append(ref)
    return found


def _code(title: str, code: str) -> list:
    highlighted = Syntax(code, "python", theme="monokai").highlight(code)
    highlighted.rstrip()
    return [Text(title, style=HEAD), *highlighted.split("\n"), ""]


def _metrics(item: dict[str, Any]) -> Text:
    t = Text()
    for name, value in (
        ("tokens in", fmt_tokens(item.get("input_tokens"))),
        ("out", fmt_tokens(item.get("output_tokens"))),
        ("latency", fmt_duration(item.get("latency_s"))),
        ("cost", fmt_cost(item.get("cost_usd"))),
    ):
        t.append(f"{name} ", style="dim")
        t.append(f"{value}  ")
    return t


def _messages(messages: Any) -> list:
    lines: list = []
    for m in messages or []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, indent=1)
        lines += _block(f"── {m.get('role', '?')} ──", content)
    return lines


def detail_lines(kind: str, item: dict[str, Any]) -> list:
    """The detail pane for a run (``kind == "run"``) or a node."""
    if kind == "run":
        return run_detail(item)
    data = item.get("data") or {}
    node_kind = item.get("kind")
    head = Text(f"{node_kind}", style="bold")
    if item.get("role"):
        head.append(f"  {item['role']}")
    if item.get("model"):
        head.append(f"  {item['model']}", style="blue")
    head.append("  ")
    head.append_text(status_text(item.get("status")))
    lines: list = [head, _metrics(item), ""]
    if data.get("error"):
        lines += _block("error", data["error"], RED)
    if node_kind == "cell":
        if data.get("code"):
            lines += _code("code", str(data["code"]))
        if data.get("stdout"):
            lines += _block("stdout", data["stdout"])
        if data.get("stderr"):
            lines += _block("stderr", data["stderr"], YELLOW)
        if data.get("final") is not None:
            lines += _block("FINAL", data["final"], Style(color="green", bold=True))
        for flag in ("timed_out", "kernel_restarted"):
            if data.get(flag):
                lines.append((f"{flag}: {data[flag]}", RED))
        if data.get("lost_variables"):
            lines.append((f"lost variables: {', '.join(map(str, data['lost_variables']))}", RED))
        if data.get("variables"):
            lines += _block("variables", json.dumps(data["variables"], indent=1, default=str))
    elif node_kind == "model_call":
        if data.get("messages"):
            lines += [Text("prompt", style=HEAD), *_messages(data["messages"])]
        elif data.get("messages_count"):
            lines.append((f"prompt: {data['messages_count']} new messages", DIM))
        if data.get("response") is not None:
            lines += _block("response", data["response"])
        if data.get("finish_reason"):
            lines.append((f"finish reason: {data['finish_reason']}", DIM))
    elif node_kind == "compaction":
        folded = data.get("reason") == "failed_turn"  # the note the model sees instead
        lines += _block("note" if folded else "summary", data.get("summary", ""))
    else:
        rest = {k: v for k, v in data.items() if k != "error"}
        if rest:
            lines += _block("data", json.dumps(rest, indent=1, default=str))
    return lines


def usage_lines(run: dict[str, Any]) -> list:
    usage = run.get("usage") if isinstance(run.get("usage"), dict) else None
    if not usage:
        return [
            (
                f"own calls so far: {fmt_tokens(run.get('input_tokens'))} in / "
                f"{fmt_tokens(run.get('output_tokens'))} out, {fmt_cost(run.get('cost_usd'))}",
                DIM,
            )
        ]
    lines: list = []
    for title, rows in (("by model", usage.get("by_model")), ("by depth", usage.get("by_depth"))):
        for key, tally in (rows or {}).items():
            tally = tally if isinstance(tally, dict) else {}
            lines.append(
                f"{title} {key}: {tally.get('calls', 0)} calls, "
                f"{fmt_tokens(tally.get('input_tokens'))} in / "
                f"{fmt_tokens(tally.get('output_tokens'))} out, {fmt_cost(tally.get('cost_usd'))}"
            )
    return lines


def run_detail(run: dict[str, Any]) -> list:
    head = Text("run ", style="bold")
    head.append_text(status_text(run.get("status")))
    head.append(f"  depth {run.get('depth', 0)}  {run.get('root_model') or ''}", style="dim")
    lines: list = [head, _metrics(run), ""]
    lines += _block("question", run.get("question") or "", prose=True)
    partial = answer_note(run)
    if partial:
        lines.append((Para(partial), ORANGE))
    elif budget_note(run):
        lines.append((Para(str(budget_note(run))), ORANGE))
    if run.get("answer") is not None:
        src = f" ({run['answer_source']})" if run.get("answer_source") else ""
        title = ("partial answer" if partial else "answer") + src
        lines += _block(title, run["answer"], Style(color="green"), prose=True)
    if run.get("error"):
        lines += _block("error", run["error"], RED, prose=True)
    lines += [Text("usage", style=HEAD), *usage_lines(run), ""]
    if run.get("budget"):
        lines += _block("budget", json.dumps(run["budget"], default=str))
    return lines


def tree_iterations(run: dict[str, Any]) -> int:
    """Iterations of a :meth:`Store.tree` run and all its child runs (as the runs table's
    ``iter`` column counts them)."""
    if isinstance(run.get("tree"), dict) and run["tree"].get("iterations") is not None:
        return int(run["tree"]["iterations"])

    def children(item: dict[str, Any]) -> list[dict[str, Any]]:
        found = list(item.get("runs") or [])
        for node in item.get("nodes") or item.get("children") or []:
            found += children(node)
        return found

    return int(run.get("iterations") or 0) + sum(tree_iterations(c) for c in children(run))


def summary_text(run: dict[str, Any], follow: bool) -> Text:
    """The trajectory screen's header (a few lines)."""
    t = Text()
    t.append_text(status_text(run.get("status")))
    note = budget_note(run)
    if note:
        t.append(f" ({note})", style="dark_orange")
    tree = run.get("tree") or {}
    usage = run.get("usage") if isinstance(run.get("usage"), dict) else {}
    total = usage.get("total") or {}
    tokens = (total.get("input_tokens") or 0) + (total.get("output_tokens") or 0)
    if not tokens:
        tokens = tokens_of(run)
    cost = total.get("cost_usd") if total else (tree.get("cost_usd") or run.get("cost_usd"))
    # Over the whole tree, as the runs table and `rlmd runs` count them.
    t.append(
        f"  {tree_iterations(run)} it  {fmt_tokens(tokens)} tok  {fmt_cost(cost)}"
        f"  {fmt_duration(run_duration(run))}",
        style="dim",
    )
    if follow:
        t.append("  [follow]", style="bold yellow")
    t.append("\nQ ", style="bold")
    t.append(one_line(run.get("question"), 200))
    t.append("\nA ", style="bold")
    if run.get("answer") is not None:
        if run.get("answer_source") == "extraction":
            t.append("(partial) ", style="bold dark_orange")
        t.append(one_line(run["answer"], 200), style="green")
    elif run.get("error"):
        t.append(one_line(run["error"], 200), style="bold red")
    else:
        t.append("-", style="dim")
    by_model = usage.get("by_model") or {}
    by_depth = usage.get("by_depth") or {}
    if by_model or by_depth:
        t.append("\n")
        parts = [
            f"{k}: {fmt_tokens((v or {}).get('input_tokens', 0) + (v or {}).get('output_tokens', 0))}"
            for k, v in by_model.items()
        ]
        parts += [
            f"d{k}: {(v or {}).get('calls', 0)} calls {fmt_cost((v or {}).get('cost_usd'))}"
            for k, v in by_depth.items()
        ]
        t.append("usage " + " · ".join(parts), style="dim")
    return t

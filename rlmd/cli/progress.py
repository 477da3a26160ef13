"""Live progress of a run on the terminal (stderr), as an event sink."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from rlmd.cli.outcome import CELL_SOURCES, answer_note, budget_note
from rlmd.cli.render import fmt_cost
from rlmd.cli.term import make_console, markup
from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    Compaction,
    Event,
    IterationStarted,
    ModelCallFinished,
    RunFinished,
    RunStarted,
)


class ProgressPrinter:
    """Prints one line per step: iterations, root calls, cells, sub-calls, child runs, the end.

    Lines are indented by depth so the recursion shows. Use as an event sink.
    """

    def __init__(self, console: Console | None = None, *, show_code: bool = True) -> None:
        self.console = console or make_console(stderr=True, highlight=False)
        self.show_code = show_code
        self.calls = 0
        self.tokens = 0
        self.usd = 0.0
        self.proposed: set[str] = set()  # runs whose last cell gave a FINAL not yet judged
        self.limits: dict[str, dict[str, Any]] = {}  # run id → its budget

    def __call__(self, event: Event) -> None:
        pad = "  " * event.depth
        c = self.console
        match event:
            case RunStarted(context=meta, models=models):
                ctx: dict[str, Any] = dict(meta or {})
                what = f"{ctx.get('kind')} · {ctx.get('chars', 0):,} chars · ~{ctx.get('tokens', 0):,} tokens"
                if ctx.get("files") is not None:
                    what += f" · {ctx['files']:,} files"
                    # a Latin-1 file counts as binary: say so, or a legacy codebase's files
                    # were left out without a word (review17); .gitignore'd ones are expected
                    left = {k: v for k, v in (ctx.get("skipped") or {}).items() if k != "ignored"}
                    if left and ctx["files"]:
                        named = {"binary": "binary or not UTF-8"}
                        what += (
                            " (skipped: "
                            + ", ".join(f"{n:,} {named.get(why, why)}" for why, n in left.items())
                            + ")"
                        )
                label = "run" if event.depth == 0 else "child run"
                self.limits[event.run_id] = dict(event.budget or {})
                root = (models or {}).get("root") or {}
                if not event.reached_engine:  # a daemon task cancelled in line: no model
                    what = "never reached the engine"  # nor context ("model None · ...")
                else:
                    what = f"model {markup(str(root.get('name')))} · context {what}"
                c.print(
                    f"{pad}[bold cyan]▶ {label}[/] {event.run_id} · depth {event.depth} · {what}"
                )
                if ctx.get("kind") == "codebase" and ctx.get("files") == 0:
                    # a binary-only or empty folder: every model call would read nothing
                    skipped = ", ".join(
                        f"{n:,} {why}" for why, n in (ctx.get("skipped") or {}).items()
                    )
                    c.print(
                        f"{pad}  [yellow]warning:[/] no file of {markup(str(ctx.get('source')))} "
                        f"was loaded as text ({markup(skipped or 'it holds no file')}): "
                        "the model sees an empty codebase"
                    )
            case IterationStarted(index=index):
                if event.run_id in self.proposed:
                    self.proposed.discard(event.run_id)
                    c.print(f"{pad}  [yellow]FINAL not accepted[/]: the engine asked for more work")
                c.print(f"{pad}[bold]iteration {index + 1}[/]")
            case ModelCallFinished(error=str(error)):
                c.print(
                    f"{pad}  [red]✗ {event.role} call to {markup(event.model)} failed:[/] {markup(error)}"
                )
            case ModelCallFinished():
                self.calls += 1
                self.tokens += event.input_tokens + event.output_tokens
                self.usd += event.cost_usd
                c.print(
                    f"{pad}  [magenta]{event.role} call[/] {markup(event.model)} "
                    f"{event.input_tokens:,}→{event.output_tokens:,} tok · {event.latency_s:.1f}s · "
                    f"total {self.tokens:,} tok · {fmt_cost(self.usd)}"
                )
            case CellStarted(index=index, code=code) if self.show_code:
                first = code.strip().splitlines()[0] if code.strip() else ""
                c.print(f"{pad}  [dim]cell {index + 1}: {markup(first[:90])}[/]")
            case CellFinished():
                self._cell(pad, event)
            case Compaction(reason="failed_turn"):
                c.print(f"{pad}  [blue]failed turn taken out of the model's view[/]")
            case Compaction(summarised_messages=n):
                c.print(f"{pad}  [blue]compacted {n} messages[/]")
            case RunFinished():
                self._run_finished(pad, event)

    def _cell(self, pad: str, event: CellFinished) -> None:
        c = self.console
        if event.error:
            last = event.error.strip().splitlines()[-1] if event.error.strip() else "error"
            c.print(f"{pad}  [yellow]cell {event.index + 1} raised[/] {markup(last[:120])}")
        else:
            out = (event.stdout or "").strip().splitlines()
            preview = markup(out[0][:100]) if out else "(no output)"
            c.print(
                f"{pad}  [green]cell {event.index + 1} ok[/] {event.duration_s * 1000:.0f} ms · {preview}"
            )
        if event.final is not None:
            self.proposed.add(event.run_id)  # judged by what comes next: the end or a new turn
            c.print(f"{pad}  [bold]FINAL proposed[/] {markup(str(event.final)[:200])}")

    def _run_finished(self, pad: str, event: RunFinished) -> None:
        usage = event.usage
        u: dict[str, Any] = dict(usage["total"]) if usage else {}
        wall = usage["wall_time_s"] if usage else 0
        style = "green" if event.status == "completed" else "yellow"
        accepted = event.run_id in self.proposed and event.answer_source in CELL_SOURCES
        self.proposed.discard(event.run_id)
        self.console.print(
            f"{pad}[{style}]■ {event.status}[/]"
            + (" (FINAL accepted)" if accepted else "")
            + f" · {event.iterations} iterations · "
            f"{u.get('calls', 0)} model calls · {u.get('total_tokens', 0):,} tokens · "
            f"{fmt_cost(u.get('cost_usd', 0))} · {wall:.1f}s"
            + (f" · {markup(event.error)}" if event.error else "")
        )
        run = {
            "status": event.status,
            "budget": self.limits.get(event.run_id),
            "usage": usage,
            "answer": event.answer,
            "answer_source": event.answer_source,
        }
        note = answer_note(run) or budget_note(run)
        if note and event.depth > 0:  # the root run's note comes with its answer
            self.console.print(f"{pad}[dark_orange]{markup(note)}[/]")

"""Live progress of a run on the terminal (stderr), as an event sink."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from rlmd.engine.events import Event


class ProgressPrinter:
    """Prints one line per step: iterations, root calls, cells, sub-calls, child runs, the end.

    Lines are indented by depth so the recursion shows. Use as an event sink.
    """

    def __init__(self, console: Console | None = None, *, show_code: bool = True) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.show_code = show_code
        self.calls = 0
        self.tokens = 0
        self.usd = 0.0

    def __call__(self, event: Event) -> None:
        pad = "  " * event.depth
        d = event.data
        c = self.console
        if event.kind == "run.started":
            ctx = d.get("context") or {}
            what = f"{ctx.get('kind')} · {ctx.get('chars', 0):,} chars · ~{ctx.get('tokens', 0):,} tokens"
            if ctx.get("files") is not None:
                what += f" · {ctx['files']:,} files"
            label = "run" if event.depth == 0 else "child run"
            c.print(
                f"{pad}[bold cyan]▶ {label}[/] {event.run_id} · depth {event.depth} · "
                f"model {escape(d['models']['root']['name'])} · context {what}"
            )
        elif event.kind == "iteration.started":
            c.print(f"{pad}[bold]iteration {d['index'] + 1}[/]")
        elif event.kind == "model_call.finished":
            if d.get("error"):
                c.print(
                    f"{pad}  [red]✗ {d['role']} call to {escape(d['model'])} failed:[/] {escape(d['error'])}"
                )
                return
            self.calls += 1
            self.tokens += d["input_tokens"] + d["output_tokens"]
            self.usd += d["cost_usd"]
            c.print(
                f"{pad}  [magenta]{d['role']} call[/] {escape(d['model'])} "
                f"{d['input_tokens']:,}→{d['output_tokens']:,} tok · {d['latency_s']:.1f}s · "
                f"total {self.tokens:,} tok · ${self.usd:.4f}"
            )
        elif event.kind == "cell.started" and self.show_code:
            first = d["code"].strip().splitlines()[0] if d["code"].strip() else ""
            c.print(f"{pad}  [dim]cell {d['index'] + 1}: {escape(first[:90])}[/]")
        elif event.kind == "cell.finished":
            if d.get("error"):
                last = d["error"].strip().splitlines()[-1] if d["error"].strip() else "error"
                c.print(f"{pad}  [yellow]cell {d['index'] + 1} raised[/] {escape(last[:120])}")
            else:
                out = (d.get("stdout") or "").strip().splitlines()
                preview = escape(out[0][:100]) if out else "(no output)"
                c.print(
                    f"{pad}  [green]cell {d['index'] + 1} ok[/] {d['duration_s'] * 1000:.0f} ms · {preview}"
                )
            if d.get("final") is not None:
                c.print(f"{pad}  [bold green]FINAL[/] {escape(str(d['final'])[:200])}")
        elif event.kind == "compaction":
            c.print(f"{pad}  [blue]compacted {d['summarised_messages']} messages[/]")
        elif event.kind == "run.finished":
            u = (d.get("usage") or {}).get("total", {})
            style = "green" if d["status"] == "completed" else "yellow"
            c.print(
                f"{pad}[{style}]■ {d['status']}[/] · {d.get('iterations', 0)} iterations · "
                f"{u.get('calls', 0)} model calls · {u.get('total_tokens', 0):,} tokens · "
                f"${u.get('cost_usd', 0):.4f} · {(d.get('usage') or {}).get('wall_time_s', 0):.1f}s"
                + (f" · {escape(d['error'])}" if d.get("error") else "")
            )

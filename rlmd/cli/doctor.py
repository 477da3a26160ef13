"""``rlmd doctor``: run the setup checks (:mod:`rlmd.server.doctor`) and print them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table

from rlmd.cli.term import make_console, markup
from rlmd.server.doctor import run_checks

COLOUR = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def main(*, as_json: bool = False, sandboxes: bool = True, cluster: str | None = None) -> int:
    """``rlmd doctor``: print the checks of the current folder's setup (as JSON with
    ``as_json``; the Ray cluster's too with ``cluster``, ``""`` for the configured one);
    returns the exit code, 1 if a check failed, else 0."""
    checks = run_checks(Path.cwd(), sandboxes=sandboxes, cluster=cluster)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=1))
        return 1 if failed else 0
    console = make_console(highlight=False)
    console.print(checks_table(checks))
    console.print("[red]some checks failed[/]" if failed else "[green]rlmd is ready[/]")
    return 1 if failed else 0


def checks_table(checks: list[Any]) -> Table:
    """The checks as a grid: a status column, then each check and its fix, whose wrapped
    lines stay in their own column (at 80 columns a fix's command broke back to the left
    edge: ``rlmd attach`` on one line, ``--stdio`` at the start of the next)."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    for c in checks:
        grid.add_row(
            f"[{COLOUR[c.status]}]{c.status}[/]", f"[bold]{markup(c.name)}[/]: {markup(c.detail)}"
        )
        if c.fix:
            fix = Table.grid(padding=(0, 1, 0, 1))
            fix.add_column(no_wrap=True)
            fix.add_column()
            fix.add_row("fix:", markup(c.fix))
            grid.add_row("", fix)
    return grid

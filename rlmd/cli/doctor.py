"""``rlmd doctor``: run the setup checks (:mod:`rlmd.server.doctor`) and print them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from rlmd.cli.term import markup
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
    console = Console(highlight=False)
    for c in checks:
        console.print(
            f"[{COLOUR[c.status]}]{c.status:>4}[/]  [bold]{c.name}[/]: {markup(c.detail)}"
        )
        if c.fix:
            console.print(f"       fix: {markup(c.fix)}")
    console.print("[red]some checks failed[/]" if failed else "[green]rlmd is ready[/]")
    return 1 if failed else 0

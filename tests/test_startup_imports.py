"""What ``rlmd run`` imports before its first model request (issue 16: start-up was most of
the time from ``rlmd run`` to the first request on a large codebase).

A real ``rlmd run`` process over a small codebase, with a scripted model that writes the
process's ``sys.modules`` when it is first called; a spy on ``threading.Thread.start``
writes them again at the moment the codebase read starts. No timing: only which modules
are loaded at those two points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MODEL = """
import json, os, sys

def first(messages):
    with open(os.environ["RLMD_TEST_MODULES"], "a") as fh:
        fh.write(json.dumps({"at": "first_request", "modules": sorted(sys.modules)}) + "\\n")
    return "```repl\\nFINAL(str(len(context)))\\n```"
"""

SPY = """
import json, os, sys, threading

_start = threading.Thread.start

def start(self):
    at = {"rlmd-context-load": "read_start", "rlmd-spare-kernel": "kernel_launch"}.get(self.name)
    if at:
        with open(os.environ["RLMD_TEST_MODULES"], "a") as fh:
            fh.write(json.dumps({"at": at, "modules": sorted(sys.modules)}) + "\\n")
    _start(self)

threading.Thread.start = start
from rlmd.cli.main import main

sys.exit(main(sys.argv[1:]))
"""

NEVER_ON_THE_RUN_PATH = (
    "rlmd.train",
    "rlmd.cluster",
    "rlmd.frontdoors",
    "rlmd.server",
    "torch",
    "transformers",
    "openai",
    "anthropic",
    "ray",
    "mcp",
    "opentelemetry",
    "pandas",
    "numpy",
)
"""Packages a scripted ``rlmd run`` never needs before its first request (training,
clusters, the MCP/ACP doors, tracing, the daemon, provider SDKs)."""

AFTER_THE_READ_STARTS = ("asyncio", "rich", "sqlite_utils", "rlmd.engine", "rlmd.config")
"""Imported (if at all) only once the codebase is being read, so the read overlaps them."""

AFTER_THE_KERNEL_LAUNCH = (
    "rlmd.runner",
    "rlmd.store",
    "rlmd.engine.loop",
    "rlmd.engine.events",
    "rlmd.engine.host",
    "rlmd.workspace.manager",
    "rlmd.codeintel",
)
"""The engine's loop, the store and the rest of the run: imported only after the run's kernel
is launched (while the codebase is still read), so its start-up overlaps them too."""


def _loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in packages or m.startswith(packages)]


def _run(codebase: Path, home: Path, tmp_path: Path) -> dict[str, list[str]]:
    model = tmp_path / "modules_model.py"
    model.write_text(MODEL)
    record = tmp_path / "modules.jsonl"
    record.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", SPY, "run", "How many files?", "--context", str(codebase)]
    cmd += ["--model", f"scripted:{model}:first", "--json", "--quiet"]
    env = {**os.environ, "RLMD_HOME": str(home), "RLMD_TEST_MODULES": str(record)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "5"  # the run itself is unchanged
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return {line["at"]: line["modules"] for line in lines}


def test_rlmd_run_reads_first_and_imports_only_what_the_run_needs(codebase, rlmd_home, tmp_path):
    first = _run(codebase, rlmd_home, tmp_path)  # creates the store (sqlite-utils migrates it)
    assert "sqlite_utils" in first["first_request"]
    seen = _run(codebase, rlmd_home, tmp_path)  # a current store, as on every later run

    assert _loaded(seen["read_start"], AFTER_THE_READ_STARTS) == []
    # the kernel is launched with only the config and the sandbox loaded
    assert "rlmd.config" in seen["kernel_launch"]
    assert _loaded(seen["kernel_launch"], AFTER_THE_KERNEL_LAUNCH) == []
    assert _loaded(seen["first_request"], NEVER_ON_THE_RUN_PATH) == []
    # the store is open (the run is recorded) without sqlite-utils; --quiet draws nothing
    assert "rlmd.store.db" in seen["first_request"]
    assert _loaded(seen["first_request"], ("sqlite_utils", "rich")) == []


def _pragmas(store) -> dict[str, object]:
    names = ("journal_mode", "recursive_triggers", "synchronous", "busy_timeout", "user_version")
    return {n: store._conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names}


def test_a_current_store_opens_without_sqlite_utils_and_the_same_settings(rlmd_home):
    """The first open sets the file up through sqlite-utils; a later one uses the connection
    alone (no ``db`` made) with the same connection settings, and queries still work."""
    from rlmd.store import Store

    path = rlmd_home / "s.db"
    with Store(path) as new:
        assert "db" in vars(new)  # set up (WAL, schema) through sqlite-utils
        expected = _pragmas(new)
    assert expected["journal_mode"] == "wal" and expected["recursive_triggers"] == 1
    with Store(path) as current:
        assert "db" not in vars(current)
        assert _pragmas(current) == expected
        assert current.list_runs() == []  # sqlite-utils from here on
        assert "db" in vars(current)

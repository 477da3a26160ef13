"""SVG snapshots of every TUI screen at 80×24, from fixed data (no clock, no random ids).

The SVGs live in ``tests/__snapshots__/test_tui_snapshots/``. After a deliberate UI change,
regenerate them with ``RLMD_SNAPSHOT_UPDATE=1 pytest tests/test_tui_snapshots.py`` and look
at them (open the .svg in a browser) before committing. A missing snapshot is written and
the test fails, so a new screen is never silently accepted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers.tui_memory import MemoryBackend
from helpers.tui_sample import demo_trees
from textual.widgets import TextArea, Tree

from rlmd_tui.app import RlmdApp
from rlmd_tui.lineview import LineView
from rlmd_tui.screens import LaunchScreen, RunsScreen, TrajectoryScreen, WorkspaceScreen

pytestmark = pytest.mark.timeout(60)

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_tui_snapshots"
SIZE = (80, 24)


class DemoBackend(MemoryBackend):
    """The demo runs plus a workspace that answers ``variables`` and ``exec``."""

    live = True
    label = "demo"

    async def variables(self, workspace, offset=0, match=""):
        return {
            "workspace": workspace,
            "source": "repl",
            "variables": [
                {"name": "context", "type": "Codebase", "size": 12, "preview": "<12 files>"},
                {"name": "hits", "type": "list", "size": 1, "preview": "['pkg/core.py:2']"},
                {"name": "x", "type": "int", "size": None, "preview": "41"},
            ],
            "total": 1203,
            "offset": 0,
            "next_offset": 3,
            "not_restored": {"fh": "open file: not JSON"},
        }

    async def exec(self, workspace, code):
        return {"stdout": "y is 42\n", "stderr": "", "error": None, "duration_s": 0.01}


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def settle(pilot) -> None:
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


async def wait_for(pilot, predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.02)
    await settle(pilot)


def check(name: str, svg: str) -> None:
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("RLMD_SNAPSHOT_UPDATE") or not path.exists():
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
        assert existed or os.environ.get("RLMD_SNAPSHOT_UPDATE"), f"new snapshot {path} written"
        return
    assert svg == path.read_text(), (
        f"{name} differs from {path} (RLMD_SNAPSHOT_UPDATE=1 regenerates it; compare visually)"
    )


async def test_snapshot_runs():
    app = RlmdApp(DemoBackend(demo_trees()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        check("runs", app.export_screenshot())


async def test_snapshot_trajectory():
    app = RlmdApp(DemoBackend(demo_trees()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        app.open_run("r0000000000000001")
        await wait_for(pilot, lambda: isinstance(app.screen, TrajectoryScreen) and app.screen.run)
        traj = app.screen
        tree = traj.query_one("#tree", Tree)
        tree.move_cursor(traj.items["node:n03"])  # the failed cell: code, output, error
        await wait_for(pilot, lambda: "code" in map(str, traj.query_one(LineView).lines))
        check("trajectory", app.export_screenshot())


async def test_snapshot_launch():
    app = RlmdApp(DemoBackend(demo_trees()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        app.push_screen(LaunchScreen(workspace="/home/dev/proj", root_model="qwen2.5-coder-1.5b"))
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen))
        check("launch", app.export_screenshot())


async def test_snapshot_workspace():
    app = RlmdApp(DemoBackend(demo_trees()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        app.push_screen(WorkspaceScreen("/home/dev/proj"))
        await wait_for(pilot, lambda: isinstance(app.screen, WorkspaceScreen))
        ws = app.screen
        ws.query_one("#cell", TextArea).text = "y = 6 * 7\nprint('y is', y)"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "y is 42" in ws.query_one("#cell-output", LineView).lines)
        check("workspace", app.export_screenshot())


async def test_snapshot_help():
    app = RlmdApp(DemoBackend(demo_trees()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.press("question_mark")
        await settle(pilot)
        check("help", app.export_screenshot())

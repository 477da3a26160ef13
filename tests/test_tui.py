"""The TUI driven by Textual's Pilot: against a real daemon with the scripted model, against
the store without a daemon, and on a 10,000-node trajectory with a 50 MB cell output."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers.server import CELLS, Daemon, finished, make_project, question
from helpers.tui_memory import MemoryBackend
from helpers.tui_pilot import record_notifications, until
from helpers.tui_sample import big_tree, demo_trees
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Input, TextArea, Tree

from rlmd.engine.events import RunStarted
from rlmd.store import Store
from rlmd_tui.app import RlmdApp
from rlmd_tui.backend import DaemonBackend, StoreBackend
from rlmd_tui.lineview import LineView
from rlmd_tui.screens import LaunchScreen, RunsScreen, TrajectoryScreen, WorkspaceScreen

pytestmark = pytest.mark.timeout(120)


def row_keys(app) -> list[str]:
    table = app.screen.query_one("#runs", DataTable)
    return [str(k.value) for k in table.rows]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One daemon for the module; ``test_store_without_daemon`` (last) stops it."""
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


async def test_against_a_real_daemon(daemon, tmp_path):
    project = make_project(tmp_path)
    app = RlmdApp(socket=daemon.socket, export_dir=tmp_path)
    notes = record_notifications(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs screen")
        assert isinstance(app.backend, DaemonBackend)
        assert row_keys(app) == []

        # A task started by someone else appears live, and finishes live.
        other = await daemon.client()
        try:
            st = await other.command(
                "rlmd.task.start",
                {
                    "workspace": str(project),
                    "question": question("x = 41", "print('seen', x)", "FINAL(x + 1)"),
                    "models": {"root": CELLS},
                },
            )
            await other.wait_for(finished(st["run_id"]), timeout=30)
        finally:
            await other.close()
        first = st["run_id"]
        await until(pilot, lambda: first in row_keys(app), what="the new run in the table")
        await until(
            pilot,
            lambda: "completed" in str(app.screen.query_one("#runs", DataTable).get_row(first)[0]),
            what="completed status",
        )

        # Launch a task with a child run from the form; it opens its live trajectory.
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch form")
        form = app.screen
        form.query_one("#f-question", Input).value = question(
            "r = rlm_query('count the files')", "FINAL(r)", sleep_s=0.5
        )
        form.query_one("#f-workspace", Input).value = str(project)
        form.query_one("#f-root", Input).value = CELLS
        form.query_one("#f-max_iterations", Input).value = "5"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, TrajectoryScreen), what="trajectory")
        traj = app.screen
        await until(
            pilot,
            lambda: traj.run and traj.run["status"] == "completed",
            timeout=30,
            what="the launched run to complete",
        )
        second = traj.run_id
        assert traj.run["answer"] == "done" and not traj.follow
        # It was followed to its end (however fast it ran): following says so when it stops.
        assert any("run finished: completed" in n.message for n in notes)
        tree = traj.query_one("#tree", Tree)
        cells = [
            node
            for key, node in traj.items.items()
            if key.startswith("node:") and node.data[1]["kind"] == "cell" and node.data[1]["runs"]
        ]
        assert len(cells) == 1
        tree.focus()
        tree.move_cursor(cells[0])
        if not cells[0].is_expanded:  # following may have opened it while it was busy
            await pilot.press("space")  # expand the cell: its child run appears
        child_id = cells[0].data[1]["runs"][0]["id"]
        await until(pilot, lambda: f"run:{child_id}" in traj.items, what="child run node")
        child = traj.items[f"run:{child_id}"]
        tree.move_cursor(child)
        if not child.is_expanded:
            await pilot.press("space")
        await until(pilot, lambda: len(child.children) >= 1, what="child run's nodes")
        assert child.data[1]["depth"] == 1
        detail = traj.query_one("#detail", LineView)
        assert any("count the files" in str(line) for line in detail.lines)

        # Copy the answer and export the run.
        await pilot.press("c")
        assert app.copied == "done"
        await pilot.press("e")
        exported = json.loads((tmp_path / f"rlmd-{second}.json").read_text())
        assert exported["id"] == second and exported["nodes"]

        # Back to the runs; full-text search over code finds only the launched run.
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs screen")
        await until(pilot, lambda: set(row_keys(app)) >= {first, second}, what="both runs")
        await pilot.press("slash")
        await pilot.press(*"rlm_query")
        await pilot.press("enter")
        await until(pilot, lambda: row_keys(app) == [second], what="search hit")
        filt = app.screen.query_one("#filter", Input)
        filt.value = "status:completed seen"
        filt.focus()
        await pilot.press("enter")
        await until(pilot, lambda: row_keys(app) == [first], what="search on output")
        filt.value = ""
        filt.focus()
        await pilot.press("enter")
        await until(pilot, lambda: len(row_keys(app)) == 2, what="all runs again")

        # The workspace: variables, and a cell run by hand.
        table = app.screen.query_one("#runs", DataTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(first))
        await pilot.press("w")
        await until(pilot, lambda: isinstance(app.screen, WorkspaceScreen), what="workspace")
        ws = app.screen
        variables = ws.query_one("#vars", DataTable)
        await until(pilot, lambda: "x" in [str(k.value) for k in variables.rows], what="vars")
        ws.query_one("#cell", TextArea).text = "y = 6 * 7\nprint('y is', y)"
        await pilot.press("ctrl+r")
        output = ws.query_one("#cell-output", LineView)
        await until(pilot, lambda: "y is 42" in output.lines, what="cell output")
        await until(pilot, lambda: "y" in [str(k.value) for k in variables.rows], what="y")
        await pilot.press("escape")

        # Cancel a running task from the runs screen.
        st = await app.backend.start(
            {
                "workspace": str(project),
                "question": question("z = 1", sleep_s=30),
                "models": {"root": CELLS},
            }
        )
        slow = st["run_id"]
        await until(pilot, lambda: slow in row_keys(app), what="slow run")
        table = app.screen.query_one("#runs", DataTable)
        table.move_cursor(row=table.get_row_index(slow))
        await pilot.press("x")
        await until(
            pilot,
            lambda: "cancelled" in str(table.get_row(slow)[0]),
            timeout=30,
            what="cancelled status",
        )


async def test_store_without_daemon(daemon, tmp_path):
    """Runs the previous test recorded, browsed and searched with the daemon gone."""
    daemon.stop()
    app = RlmdApp(socket=tmp_path / "nobody.sock", store_path=daemon.home / "rlmd.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(row_keys(app)) == 3, what="the stored runs")
        assert isinstance(app.backend, StoreBackend)
        app.screen.query_one("#filter", Input).value = "count the files"
        app.screen.query_one("#filter", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: len(row_keys(app)) == 1, what="search")
        await pilot.press("enter")
        await until(
            pilot,
            lambda: isinstance(app.screen, TrajectoryScreen) and app.screen.run,
            what="trajectory",
        )
        await pilot.press("x")  # read-only: a warning, no crash
        await pilot.pause()
        await pilot.press("escape", "n")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch")
        await pilot.press("escape")
        # Another process records a run: the read-only view picks it up (data_version poll).
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs screen")
        app.screen.query_one("#filter", Input).value = ""
        app.screen.query_one("#filter", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: len(row_keys(app)) == 3, what="all runs")
        writer = Store(daemon.home / "rlmd.db")
        try:
            writer.record(RunStarted(run_id="rwritten000000001", depth=0, question="new"))
        finally:
            writer.close()
        await until(pilot, lambda: "rwritten000000001" in row_keys(app), what="the new run")


async def test_big_trajectory_and_50mb_output_open_and_scroll_to_the_end():
    tree = big_tree(10_000, output_bytes=50_000_000)
    app = RlmdApp(MemoryBackend([tree]))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: row_keys(app) == [tree["id"]], what="run row")
        await pilot.press("enter")
        await until(
            pilot,
            lambda: isinstance(app.screen, TrajectoryScreen) and app.screen.run,
            what="trajectory",
        )
        traj = app.screen
        widget = traj.query_one("#tree", Tree)
        assert len(widget.root.children) == 3333
        await pilot.press("end")
        last = widget.root.children[-1]
        await until(pilot, lambda: widget.cursor_node is last, what="last iteration")
        await pilot.press("space")
        await until(pilot, lambda: len(last.children) == 2, what="lazy children")
        await pilot.press("down", "down")
        cell = last.children[-1]
        await until(pilot, lambda: widget.cursor_node is cell, what="last cell")
        detail = traj.query_one("#detail", LineView)
        await until(pilot, lambda: len(detail.lines) > 600_000, what="50 MB output")
        await pilot.press("o")
        assert detail.has_focus
        await pilot.press("end")
        await until(pilot, lambda: detail.scroll_y == detail.max_scroll_y > 600_000, what="end")
        await pilot.pause()
        # the last output line is on screen
        shown = [detail.render_line(y).text for y in range(detail.size.height)]
        assert any("x" * 10 in line and line.startswith("6") for line in shown), shown[-3:]
        await pilot.press("home")
        await until(pilot, lambda: detail.scroll_y == 0, what="home")


async def test_demo_runs_sort_filter_and_help():
    app = RlmdApp(MemoryBackend(demo_trees()))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(row_keys(app)) == 3, what="rows")
        assert row_keys(app)[0] == "r0000000000000004"  # newest first
        screen = app.screen
        await pilot.press("S")
        assert row_keys(app)[0] == "r0000000000000001"
        screen.sort_key = "cost"
        screen.sort_reverse = True
        screen.fill()
        assert row_keys(app)[0] == "r0000000000000001"
        filt = screen.query_one("#filter", Input)
        filt.value = "status:max_iterations"
        filt.focus()
        await pilot.press("enter")
        await until(pilot, lambda: row_keys(app) == ["r0000000000000003"], what="filter")
        filt.value = "ws:other model:qwen"
        filt.focus()
        await pilot.press("enter")
        await until(pilot, lambda: row_keys(app) == ["r0000000000000003"], what="ws filter")
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape")
        # The command palette has the launch entry (a warning: no daemon behind MemoryBackend).
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="palette")
        await pilot.press(*"new task")
        await until(
            pilot,
            lambda: app.screen.query_one(CommandList).option_count >= 1,
            what="palette hit",
        )
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="launch form")
        await pilot.press("escape")
        await asyncio.sleep(0)


def test_rlmd_tui_command_opens_the_app_of_the_rlmd_tui_package(tmp_path, monkeypatch):
    """``rlmd tui --no-daemon --store FILE`` reaches the installed ``rlmd_tui`` package and
    opens the app on that store (the app's own loop is replaced: no terminal here)."""
    from rlmd.cli.main import main

    opened: list[RlmdApp] = []
    monkeypatch.setattr(RlmdApp, "run", lambda self, *a, **k: opened.append(self))
    monkeypatch.setattr("rlmd_tui.app.on_a_terminal", lambda: True)
    store = tmp_path / "runs.db"
    assert main(["tui", "--no-daemon", "--store", str(store)]) == 0
    (app,) = opened
    assert isinstance(app.backend, StoreBackend) and app.backend.path == store
    assert type(app).__module__ == "rlmd_tui.app"


async def test_terminal_escape_injection_in_shown_text_is_made_visible():
    """A cell's output holding escape sequences (clear screen, OSC 52 clipboard write) is
    drawn as text, not passed to the terminal: rich Text keeps ESC as is."""
    from rich.text import Text
    from textual.app import App

    from rlmd_tui.format import one_line

    attack = "\x1b[2J\x1b]52;c;cHduZWQ=\x1b\\\x9b31m"

    class One(App):
        def compose(self):
            yield LineView(id="v")

    app = One()
    async with app.run_test(size=(80, 5)) as pilot:
        view = app.query_one("#v", LineView)
        view.set_lines([Text("out " + attack, style="green"), "plain " + attack])
        await pilot.pause()
        shown = [view.render_line(y).text for y in range(2)]
    assert shown[0].startswith("out \\x1b[2J\\x1b]52;c;cHduZWQ="), shown
    assert not any(ch in line for line in shown for ch in "\x1b\x9b")
    assert "\x1b" not in one_line(attack, 80) and "\x9b" not in one_line(attack, 80)


def test_rlmd_tui_without_a_terminal_says_so_and_exits(tmp_path):
    """A new user's walk (review16): ``rlmd tui`` with stdout not a terminal (a pipe, a
    file, a script) wrote the app's escape sequences into it and kept a core busy until it
    was killed."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "tui", "--no-daemon"],
        env={**os.environ, "RLMD_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "rlmd tui: needs a terminal" in done.stderr

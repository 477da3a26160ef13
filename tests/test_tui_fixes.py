"""The TUI as a user meets it (Pilot): the detail pane follows a run to its end, busy cells
open while following, only valid actions are offered, the daemon's loss is noticed and healed,
exports go to a known folder, Home/End jump, answers wrap, ``path:line`` opens in $EDITOR,
text from runs is never markup."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from helpers.server import Daemon
from helpers.tui_memory import MemoryBackend
from helpers.tui_pilot import record_notifications, until
from helpers.tui_sample import T0, _node, _run, demo_trees
from textual.widgets import DataTable, Tree

from rlmd_tui.app import RlmdApp
from rlmd_tui.backend import DaemonBackend
from rlmd_tui.lineview import LineView
from rlmd_tui.screens import RunsScreen, TrajectoryScreen

pytestmark = pytest.mark.timeout(120)


class LiveMemory(MemoryBackend):
    """A memory backend that says it is live (a daemon), whose trees the test changes."""

    live = True
    label = "daemon"

    def __init__(self, trees: list[dict[str, Any]]) -> None:
        super().__init__(trees)
        self.cancelled: list[str] = []

    async def cancel(self, run_id: str) -> dict[str, Any]:
        self.cancelled.append(run_id)
        return {"run_id": run_id}


def busy_tree(status: str = "running", **end: Any) -> dict[str, Any]:
    """A run whose second iteration's cell is waiting on a child run that is still working."""
    root = _run("r1", "Which file defines Engine?", status=status, finished_at=None, **end)
    child = _run("r2", "look in pkg/", depth=1, root_run_id="r1", parent_run_id="r1", status=status)
    child["nodes"] = [
        _node(
            "c1",
            "r2",
            1,
            "iteration",
            data={"index": 0},
            children=[_node("c2", "r2", 2, "model_call", role="root", status="running")],
        )
    ]
    cell = _node("n4", "r1", 4, "cell", status="running", data={"index": 0, "code": "rlm_query()"})
    cell["runs"] = [child]
    root["nodes"] = [
        _node("n1", "r1", 1, "iteration", data={"index": 0}),
        _node(
            "n2",
            "r1",
            2,
            "iteration",
            data={"index": 1},
            children=[_node("n3", "r1", 3, "model_call", role="root"), cell],
        ),
    ]
    return root


def shown(detail: LineView) -> str:
    return "\n".join(str(line[0] if isinstance(line, tuple) else line) for line in detail.lines)


async def test_following_opens_busy_cells_and_the_pane_shows_the_end():
    backend = LiveMemory([busy_tree()])
    app = RlmdApp(backend)
    notes = record_notifications(app)
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        app.open_run("r1", follow=True)
        await until(pilot, lambda: isinstance(app.screen, TrajectoryScreen), what="trajectory")
        traj = app.screen
        await until(pilot, lambda: traj.run is not None, what="the tree")
        # The busy cell and the child run it waits on are open while following.
        await until(pilot, lambda: "run:r2" in traj.items, what="the child run in view")
        assert traj.items["node:n4"].is_expanded and traj.items["run:r2"].is_expanded
        assert "node:c1" in traj.items
        # Follow and Cancel are offered while it runs.
        assert traj.check_action("cancel", ()) and traj.check_action("follow", ())
        traj.query_one("#tree", Tree).move_cursor(traj.query_one("#tree", Tree).root)
        await pilot.pause()
        assert "answer" not in shown(traj.query_one("#detail", LineView))

        # The run ends: the header and the pane (on the run) both say so, with the answer.
        backend.trees["r1"] = busy_tree(
            "completed", answer="pkg/core.py defines Engine", answer_source="final"
        )
        traj.schedule_reload()
        await until(pilot, lambda: traj.run["status"] == "completed", what="completed")
        detail = shown(traj.query_one("#detail", LineView))
        assert "run completed" in detail and "pkg/core.py defines Engine" in detail
        assert not traj.follow
        # Now Cancel and Follow are gone from the footer; pressing x sends nothing.
        assert not traj.check_action("cancel", ()) and not traj.check_action("follow", ())
        await pilot.press("x")
        await pilot.pause()
        assert backend.cancelled == []
        assert not any(n.severity == "error" for n in notes)
        keys = {b.binding.key for b in traj.active_bindings.values() if b.enabled}
        assert "x" not in keys and "f" not in keys and "c" in keys


async def test_a_cancelled_run_updates_the_pane_too():
    backend = LiveMemory([busy_tree()])
    app = RlmdApp(backend)
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        app.open_run("r1", follow=True)
        await until(pilot, lambda: getattr(app.screen, "run", None) is not None, what="tree")
        traj = app.screen
        backend.trees["r1"] = busy_tree("cancelled", error="the run was cancelled")
        traj.schedule_reload()
        await until(pilot, lambda: traj.run["status"] == "cancelled", what="cancelled")
        detail = shown(traj.query_one("#detail", LineView))
        assert "run cancelled" in detail and "the run was cancelled" in detail
        assert "running" not in detail


def budget_run(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text("a = 1\nclass Engine: ...\n")
    long_answer = "The Engine class lives in pkg/core.py:2 and " + "is used widely " * 20
    return _run(
        "r9",
        "[b]bold[/b]string[idx]",
        status="max_usd",
        answer=long_answer.strip(),
        answer_source="extraction",
        workspace=str(tmp_path),
        budget={"max_iterations": 10, "max_depth": 2, "max_usd": 0.01},
        usage={"total": {"calls": 3, "input_tokens": 900, "output_tokens": 50, "cost_usd": 0.0208}},
        started_at=T0 + 100,
    )


async def test_partial_answer_wraps_and_its_path_line_opens_in_the_editor(tmp_path, monkeypatch):
    record = tmp_path / "editor-args"
    editor = tmp_path / "fake-editor"
    editor.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    run = budget_run(tmp_path)
    app = RlmdApp(MemoryBackend([run]))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        app.open_run("r9")
        await until(pilot, lambda: getattr(app.screen, "run", None) is not None, what="tree")
        traj = app.screen
        detail = traj.query_one("#detail", LineView)
        width = detail.scrollable_content_region.width
        assert all(len(str(ln[0] if isinstance(ln, tuple) else ln)) <= width for ln in detail.lines)
        text = " ".join(shown(detail).split())
        assert run["answer"] in text  # every word is there, wrapped
        assert (
            "partial answer: extracted from the work so far after the spend budget ($0.0100) "
            "ended the run; $0.0208 spent, $0.0108 (108%) over" in text
        )
        summary = str(traj.query_one("#summary").render())
        assert "(partial)" in summary and "$0.0108 (108%) over" in summary
        await pilot.press("v")
        await until(pilot, lambda: record.exists(), what="the editor to run")
        assert record.read_text().split("\n")[:2] == ["+2", str(tmp_path / "pkg" / "core.py")]


async def test_runs_table_shows_markup_literally_and_home_end_jump(tmp_path):
    trees = [*demo_trees(), budget_run(tmp_path)]
    app = RlmdApp(MemoryBackend(trees))
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: table.row_count == len(trees), what="rows")
        assert "[b]bold[/b]string[idx]" in app.export_screenshot()
        table.move_cursor(row=2)
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        # Finished runs: no Cancel in the footer, even with a live backend.
        assert not app.screen.check_action("cancel", ())


async def test_export_goes_to_the_rlmd_home_and_says_where(rlmd_home, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    app = RlmdApp(MemoryBackend(demo_trees()))
    notes = record_notifications(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        app.open_run("r0000000000000001")
        await until(pilot, lambda: getattr(app.screen, "run", None) is not None, what="tree")
        await pilot.press("e")
        await until(pilot, lambda: app.exported is not None, what="export")
        assert app.exported == rlmd_home / "exports" / "rlmd-r0000000000000001.json"
        assert app.exported.is_file() and not list(tmp_path.glob("rlmd-*.json"))
        assert any(str(app.exported) in n.message for n in notes)


async def test_losing_the_daemon_is_noticed_once_and_healed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    daemon = Daemon(home, "--idle-timeout", "0").start()
    try:
        app = RlmdApp(socket=daemon.socket)
        notes = record_notifications(app)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
            assert isinstance(app.backend, DaemonBackend)
            title = app.screen.query_one("#runs-title")
            assert "[daemon]" in str(title.render())
            daemon.stop()
            await until(pilot, lambda: "daemon lost" in str(title.render()), what="lost label")
            errors = [n for n in notes if n.severity == "error"]
            assert len(errors) == 1 and "lost the daemon (" in errors[0].message
            assert "could not start" not in errors[0].message
            daemon.start()
            await until(
                pilot,
                lambda: isinstance(app.backend, DaemonBackend) and not app.backend.lost,
                what="reconnected",
            )
            await until(pilot, lambda: "[daemon]" in str(title.render()), what="label back")
            assert any("reconnected" in n.message for n in notes)
            # The new connection works: listing runs goes through it.
            assert await app.backend.list_runs() == []
    finally:
        daemon.stop()


async def test_the_workspace_screen_shows_a_page_of_many_variables_and_gets_more(tmp_path):
    """A workspace of 2,500 variables: the screen shows the first page and how many there
    are, ctrl+n adds the next page, the filter asks the daemon for matching names only."""
    from textual.widgets import Input, Label

    from rlmd.server.client import Client
    from rlmd_tui.screens import WorkspaceScreen

    home, project = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    daemon = Daemon(home, "--idle-timeout", "0").start()
    try:
        c = await Client.connect(daemon.socket)
        code = "for i in range(2500):\n    globals()[f'v{i:04d}'] = i\ndel i"
        await c.command("rlmd.workspace.exec", {"workspace": str(project), "code": code})
        await c.close()
        app = RlmdApp(socket=daemon.socket)
        notes = record_notifications(app)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
            app.push_screen(WorkspaceScreen(str(project)))
            await until(pilot, lambda: isinstance(app.screen, WorkspaceScreen), what="screen")
            ws = app.screen
            table = ws.query_one("#vars", DataTable)
            count = ws.query_one("#vars-count", Label)
            await until(pilot, lambda: table.row_count == 1000, what="first page")
            assert str(count.render()) == "1,000 of 2,500 · ctrl+n more"
            table.focus()
            await pilot.press("ctrl+n")
            await until(pilot, lambda: table.row_count == 2000, what="second page")
            await pilot.press("ctrl+n")
            await until(pilot, lambda: table.row_count == 2500, what="last page")
            assert str(count.render()) == "2,500 of 2,500"
            names = [str(k.value) for k in table.rows]
            assert names == [f"v{i:04d}" for i in range(2500)]
            await pilot.press("ctrl+n")
            await until(pilot, lambda: any("every variable" in n.message for n in notes))
            match = ws.query_one("#match", Input)
            match.value = "v01"
            match.focus()
            await pilot.press("enter")
            await until(pilot, lambda: table.row_count == 100, what="filtered")
            assert str(count.render()) == "100 of 100"
            assert [str(k.value) for k in table.rows][:2] == ["v0100", "v0101"]
    finally:
        daemon.stop()


def test_a_folded_turn_is_labelled_as_a_fold_not_a_summary():
    """A ``failed_turn`` compaction summarised nothing: its label and block say it was a
    folded turn and show the note the model saw; a window compaction keeps "summary"."""
    from rlmd_tui.format import detail_lines, node_label

    def texts(lines: list) -> list[str]:
        return [str(x[0] if isinstance(x, tuple) else x) for x in lines]

    fold = {"kind": "compaction", "data": {"reason": "failed_turn", "summary": "It raised X"}}
    window = {"kind": "compaction", "data": {"reason": "window", "summary": "older turns"}}
    assert node_label(fold).plain == "compaction failed turn folded"
    assert node_label(window).plain == "compaction"
    fold_lines, window_lines = (
        texts(detail_lines("compaction", fold)),
        texts(detail_lines("compaction", window)),
    )
    assert "note" in fold_lines and "summary" not in fold_lines
    assert any("It raised X" in line for line in fold_lines)
    assert "summary" in window_lines and "note" not in window_lines


async def test_a_missing_or_damaged_store_is_named_and_never_created(tmp_path: Path) -> None:
    """A new user's walk (review15): ``rlmd tui --no-daemon --store typo.db`` created the
    file (and its folders) and showed an empty table; a damaged file said only "file is not
    a database". Each now names the file; a store that appears later is shown at the next
    poll."""
    from rlmd.engine.events import RunStarted
    from rlmd.store import Store
    from rlmd_tui.backend import StoreBackend, StoreUnreadable

    missing = tmp_path / "not" / "there.db"
    app = RlmdApp(StoreBackend(missing))
    notes = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(
            pilot,
            lambda: any("no trajectory store at" in str(n.message) for n in notes),
            what="note",
        )
        assert not (tmp_path / "not").exists()
        (tmp_path / "not").mkdir()
        with Store(missing) as writer:
            writer.record(RunStarted(run_id="rlater0000000001", depth=0, question="later"))
        table = app.screen.query_one("#runs", DataTable)
        await until(
            pilot, lambda: [str(k.value) for k in table.rows] == ["rlater0000000001"], what="rows"
        )

    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not sqlite" * 100)
    backend = StoreBackend(damaged)
    with pytest.raises(StoreUnreadable, match=r"damaged.db: file is not a database \(damaged"):
        await backend.list_runs()
    with pytest.raises(StoreUnreadable):
        await backend.changed()


@pytest.mark.parametrize(
    ("editor", "said"),
    [
        ('vim "x', "$EDITOR 'vim \"x' is no command: No closing quotation"),
        ("   ", "$EDITOR is blank: set it to your editor"),
        ("/", "cannot run the editor '/' ($EDITOR): Permission denied"),
        ("/no/such/editor", "cannot run the editor '/no/such/editor' ($EDITOR): No such file"),
    ],
)
async def test_an_editor_that_cannot_run_is_said_and_the_app_stays(
    tmp_path, monkeypatch, editor, said
):
    """Review18: ``v`` with ``$EDITOR`` holding an unclosed quote or naming a folder ended the
    TUI in a traceback (headless: also a missing editor); a blank one ran ``+2`` as the
    editor. Each is now one notification, and the app goes on."""
    monkeypatch.setenv("EDITOR", editor)
    monkeypatch.delenv("VISUAL", raising=False)
    app = RlmdApp(MemoryBackend([budget_run(tmp_path)]))
    notes = record_notifications(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="runs")
        app.open_run("r9")
        await until(pilot, lambda: getattr(app.screen, "run", None) is not None, what="tree")
        await pilot.press("v")
        await until(pilot, lambda: any(said in str(n.message) for n in notes), what=said)
        assert app.is_running and isinstance(app.screen, TrajectoryScreen)

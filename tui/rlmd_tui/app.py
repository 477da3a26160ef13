"""The Textual app behind ``rlmd tui``."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SuspendNotSupported, SystemCommand
from textual.binding import Binding
from textual.message import Message

from rlmd.engine.events import RunFinished, RunStarted, type_of
from rlmd_tui.backend import Backend, DaemonBackend, StoreBackend, describe
from rlmd_tui.screens import (
    HelpScreen,
    LaunchScreen,
    RunsScreen,
    TrajectoryScreen,
    WorkspaceScreen,
    dump_tree,
)

CSS = """
#runs-title { height: 1; padding: 0 1; background: $panel; }
#filter { height: 1; border: none; padding: 0 1; }
#summary { height: auto; max-height: 5; padding: 0 1; background: $panel; }
#panes { height: 1fr; }
#tree { width: 42%; min-width: 28; border-right: solid $primary-darken-2; }
#detail { width: 1fr; }
Input.compact { height: 1; border: none; padding: 0 1; width: 1fr; background: $boost; }
#launch .field { margin: 0 0 0 0; }
Input.compact:focus { background: $primary 25%; }
.field { height: auto; margin: 0 0 1 0; }
.field .name { width: 16; padding: 0 1; color: $text-muted; }
.field Select { width: 1fr; }
#launch { width: 76; max-width: 100%; height: auto; max-height: 22; border: thick $primary;
          background: $surface; padding: 0 1; }
#launch VerticalScroll { height: auto; max-height: 16; }
#launch .title { text-style: bold; margin: 0 0 1 0; }
.buttons { height: 3; align-horizontal: right; }
LaunchScreen, HelpScreen { align: center middle; }
#help { width: 76; max-width: 100%; height: auto; max-height: 22; border: thick $primary;
        background: $surface; padding: 0 1; }
WorkspaceScreen .field { margin: 0; height: 1; }
#vars-count { width: auto; padding: 0 1; color: $text-muted; }
#vars { height: 1fr; }
#cell { height: 7; }
#cell-output { height: 1fr; border-top: solid $primary-darken-2; }
"""


class BackendNote(Message):
    """A daemon notification (``rlmd/event``, ``rlmd/taskStatus``, ``rlmd/workspace``)."""

    def __init__(self, note: dict[str, Any]) -> None:
        super().__init__()
        self.note = note


class RlmdApp(App):
    """``rlmd tui``. Pass a ``backend``, or let it connect to the daemon's socket and fall back
    to reading the store at ``store_path``."""

    TITLE = "rlmd"
    CSS = CSS
    COMMAND_PALETTE_BINDING = "ctrl+p"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", show=False)]

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        socket: str | Path | None = None,
        store_path: str | Path | None = None,
        export_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.backend: Backend = backend or Backend()
        self._given = backend is not None
        self.socket = socket
        self.store_path = store_path
        self._export_dir = Path(export_dir) if export_dir else None
        self.copied: str | None = None
        self.exported: Path | None = None
        self.edited: list[str] | None = None  # the last editor command run (for tests)
        self._reconnect_timer: Any = None

    @property
    def export_dir(self) -> Path:
        """Where ``e`` writes: the folder given, else ``$RLMD_HOME/exports``."""
        if self._export_dir is None:
            from rlmd import paths

            self._export_dir = paths.home() / "exports"
        return self._export_dir

    async def on_mount(self) -> None:
        if not self._given:
            self.backend = await self._connect()
        self.backend.on_note = lambda note: self.post_message(BackendNote(note))
        await self.push_screen(RunsScreen())
        if isinstance(self.backend, StoreBackend):
            self.set_interval(1.0, self.poll_store)

    @work(exclusive=True, group="poll")
    async def poll_store(self) -> None:
        """Without a daemon: reload what is shown when another process wrote the store."""
        try:
            changed = await self.backend.changed()
        except Exception:  # noqa: BLE001 - a locked or vanished store: try again later
            return
        if changed:
            for screen in self.screen_stack:
                if isinstance(screen, RunsScreen) or (
                    isinstance(screen, TrajectoryScreen) and screen.follow
                ):
                    screen.schedule_reload()

    def _socket(self) -> Path:
        from rlmd import paths

        return Path(self.socket) if self.socket is not None else paths.socket_path()

    async def _connect(self) -> Backend:
        from rlmd import paths

        try:
            return await DaemonBackend.connect(self._socket())
        except (OSError, TimeoutError):
            return StoreBackend(self.store_path or paths.store_path())

    def daemon_lost(self, reason: str) -> None:
        """The daemon's connection ended: say so once, then try to reconnect every 2 s."""
        self.notify(
            f"lost the daemon ({reason or 'connection closed'}); reconnecting every 2 s. "
            "Start it with `rlmd serve` if it stopped.",
            severity="error",
            timeout=8,
        )
        self._retitle()
        if self._reconnect_timer is None:
            self._reconnect_timer = self.set_interval(2.0, self.reconnect)

    @work(exclusive=True, group="reconnect")
    async def reconnect(self) -> None:
        try:
            backend = await DaemonBackend.connect(self._socket(), timeout=1.0)
        except (OSError, TimeoutError, ConnectionError):
            return
        if self._reconnect_timer is not None:
            self._reconnect_timer.stop()
            self._reconnect_timer = None
        old, self.backend = self.backend, backend
        backend.on_note = lambda note: self.post_message(BackendNote(note))
        await old.close()
        self.notify("reconnected to the daemon")
        for screen in self.screen_stack:
            if isinstance(screen, RunsScreen | TrajectoryScreen):
                screen.schedule_reload()
        self._retitle()

    def _retitle(self) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, RunsScreen) and screen.is_mounted:
                screen.show_title()

    async def on_unmount(self) -> None:
        await self.backend.close()

    def on_backend_note(self, message: BackendNote) -> None:
        params = message.note.get("params") or {}
        method = message.note.get("method")
        if method == "rlmd/lost":
            self.daemon_lost(str(params.get("reason") or ""))
            return
        for screen in self.screen_stack:
            if isinstance(screen, RunsScreen) and method in ("rlmd/taskStatus", "rlmd/event"):
                kind = type_of(params.get("kind"))
                if method == "rlmd/taskStatus" or kind in (RunStarted, RunFinished):
                    screen.schedule_reload()
            elif isinstance(screen, TrajectoryScreen) and screen.follow:
                if params.get("task_id") == screen.run_id or params.get("run_id") == screen.run_id:
                    screen.schedule_reload()

    def get_system_commands(self, screen):
        yield SystemCommand("New task", "Start a task in a workspace (n)", self.action_launch)
        yield SystemCommand(
            "Workspace", "A workspace's variables; run a cell (w)", self.action_workspace
        )
        yield SystemCommand("Help", "Key bindings (?)", self.action_help)
        yield from super().get_system_commands(screen)

    # -- actions shared by the screens ---------------------------------------------------------
    def open_run(self, run_id: str, follow: bool | None = None) -> None:
        """Show a run; ``follow`` defaults to whether it is still running."""
        if follow is None and isinstance(self.screen, RunsScreen):
            run = next((r for r in self.screen.runs if r["id"] == run_id), None)
            follow = (run or {}).get("status") == "running"
        self.push_screen(TrajectoryScreen(run_id, follow=bool(follow)))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_launch(self) -> None:
        if not self.backend.live:
            self.notify("starting a task needs the daemon (rlmd serve)", severity="warning")
        self.push_screen(LaunchScreen(), self._launched)

    def _launched(self, params: dict | None) -> None:
        if params:
            self.start_task(params)

    @work(group="rpc")
    async def start_task(self, params: dict[str, Any]) -> None:
        try:
            status = await self.backend.start(params)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.notify(f"could not start the task: {describe(exc)}", severity="error")
            return
        self.notify(f"started {status['run_id']}")
        self.open_run(status["run_id"], follow=True)

    @work(group="rpc")
    async def cancel_run(self, run_id: str) -> None:
        try:
            status = await self.backend.cancel(run_id)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.notify(f"could not cancel {run_id}: {describe(exc)}", severity="error")
            return
        self.notify(f"cancel requested: {status.get('run_id', run_id)}")

    def action_workspace(self, workspace: str | None = None) -> None:
        if workspace is None and isinstance(self.screen, RunsScreen):
            run_id = self.screen.selected_run()
            run = next((r for r in self.screen.runs if r["id"] == run_id), None)
            workspace = (run or {}).get("workspace")
        self.push_screen(WorkspaceScreen(workspace))

    def copy_text(self, text: str) -> None:
        self.copied = text
        self.copy_to_clipboard(text)
        self.notify("answer copied to the clipboard")

    def export_tree(self, tree: dict[str, Any]) -> None:
        path = self.export_dir / f"rlmd-{tree['id']}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dump_tree(tree), encoding="utf-8")
        except OSError as exc:
            self.notify(f"could not export to {path}: {exc.strerror or exc}", severity="error")
            return
        self.exported = path
        self.notify(f"exported the run (with its child runs) to {path}", timeout=8)

    def open_in_editor(self, path: Path, line: int) -> None:
        """Open ``path`` at ``line`` in ``$VISUAL`` / ``$EDITOR`` (``vi`` if neither is set),
        suspending the TUI while it runs. An editor that cannot run (missing, a folder, not
        executable, an unclosed quote, blank) is a notification, not the end of the app."""
        name = "$VISUAL" if os.environ.get("VISUAL") else "$EDITOR"
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            words = shlex.split(editor)
        except ValueError as exc:  # `vim "x`: the app ended in a traceback (review18)
            self.notify(f"{name} {editor!r} is no command: {exc}", severity="error", markup=False)
            return
        if not words:  # blank: "+12" was run as the editor
            self.notify(f"{name} is blank: set it to your editor", severity="error")
            return
        command = [*words, f"+{line}", str(path)]
        self.edited = command
        try:
            try:
                with self.suspend():
                    subprocess.run(command, check=False)
            except SuspendNotSupported:  # a headless app cannot suspend: run it detached
                subprocess.run(command, check=False, stdin=subprocess.DEVNULL, capture_output=True)
        except OSError as exc:  # missing, a folder, not executable: the app ended (review18)
            why = exc.strerror or str(exc)
            self.notify(
                f"cannot run the editor {command[0]!r} ({name}): {why}",
                severity="error",
                markup=False,
            )
        self.refresh()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlmd tui", description="the rlmd terminal UI")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--socket", help="daemon socket (default: the rlmd home's)")
    parser.add_argument("--store", help="trajectory store to browse without a daemon")
    parser.add_argument("--no-daemon", action="store_true", help="browse the store read-only")


def on_a_terminal() -> bool:
    """Whether stdin and stdout are both a terminal, which the app draws on and reads keys
    from."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run(args: argparse.Namespace) -> int:
    """Open the app; returns the exit code (2: no terminal to draw on).

    Without a terminal (``rlmd tui > out.txt``, from a script or a pipe) the app wrote its
    escape sequences into the file and kept one core busy until it was killed."""
    if not on_a_terminal():
        print(
            "rlmd tui: needs a terminal: stdin and stdout are not both one (rlmd runs and "
            "rlmd show print the same runs as text)",
            file=sys.stderr,
        )
        return 2
    backend = None
    if getattr(args, "no_daemon", False):
        from rlmd import paths

        backend = StoreBackend(args.store or paths.store_path())
    RlmdApp(backend, socket=args.socket, store_path=args.store).run()
    return 0

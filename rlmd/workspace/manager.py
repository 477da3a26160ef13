"""Per-project workspaces: a warm REPL with the codebase loaded as ``context``, shared by the
tasks and the people working on one project folder.

A :class:`Workspace` owns one sandbox. Whoever uses the REPL (a task, a human cell, a
checkpoint) first *holds* the workspace (:meth:`Workspace.hold`, a FIFO lock), so two runs
never interleave cells in one REPL; the others wait in line. Variables stay in the REPL from
one task to the next.

Life cycle::

    stopped --(first use: load the codebase, start the sandbox, restore the checkpoint)--> ready
    ready --(a task starts: files changed since the load are read again, see refresh)--> ready
    ready --(idle for idle_timeout_s: checkpoint, then stop the sandbox)--> stopped
    ready --(reset: stop without checkpoint, delete the checkpoint)--> stopped
    any --(close)--> closed (forgotten by the manager)

A checkpoint (see :mod:`rlmd.workspace.checkpoint`) is also taken after every task (unless
``checkpoint_after_task`` is off), so a daemon killed with SIGKILL restores from the state
after the last finished task. When the sandbox's kernel dies during a task (killed, crashed,
or stopped by a cancel), the sandbox restarts it; afterwards the workspace binds the
checkpoint's variables that the new kernel lacks, and the next task's model is told what was
restored and what was lost (:meth:`Workspace.model_note`).

Nothing here knows about the daemon's protocol: state changes are reported through the
``on_change(workspace, kind, data)`` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from rlmd import isolation
from rlmd.context import (
    Context,
    LoadStopped,
    codebase_delta,
    load_codebase,
    refresh_codebase,
)
from rlmd.kernel.protocol import VARS_PAGE
from rlmd.sandbox import create_sandbox
from rlmd.sandbox.base import CallError, CellResult, Sandbox, SandboxError, VarPage
from rlmd.workspace import checkpoint as ckpt_mod
from rlmd.workspace.settings import WorkspaceSettings
from rlmd.workspace.watch import FolderWatch, open_watch

log = logging.getLogger("rlmd.workspace")


class CheckpointNotWritten(OSError):
    """A workspace's checkpoint file could not be written (a full disk, an unwritable home);
    its REPL is unharmed."""


class CellNotRun(SandboxError):
    """A human cell (:meth:`Workspace.run_cell`) that did not run, or was stopped before it
    reached the kernel, because the daemon is stopping (:meth:`Workspace.stop_cells`)."""


ChangeCallback = Callable[["Workspace", str, dict[str, Any]], None]


async def _no_calls(fn: str, args: dict[str, Any]) -> Any:
    """Host-call handler while no task runs: model helpers are only live inside a task."""
    raise CallError(
        f"{fn}() is only available while a task runs in this workspace "
        "(start one with rlmd.task.start)"
    )


class StartInfo(TypedDict):
    """What starting a workspace's sandbox did (the ``"started"`` change)."""

    files: int
    chars: int
    sandbox: str
    restored: list[str]
    not_restored: dict[str, str]
    checkpoint_taken_at: float | None
    checkpoint_error: str | None


CheckpointInfo = ckpt_mod.CheckpointInfo  # the last checkpoint written, as the protocol shows it


class RestoreInfo(TypedDict):
    """The last restore from a checkpoint: when, what came back, what did not and why."""

    at: float
    restored: list[str]
    not_restored: dict[str, str]
    files: NotRequired[int]
    chars: NotRequired[int]
    sandbox: NotRequired[str]
    checkpoint_taken_at: NotRequired[float | None]
    checkpoint_error: NotRequired[str | None]


class WorkspaceInfo(TypedDict):
    """A workspace as the protocol shows it (``docs/protocol.md``, WorkspaceInfo)."""

    workspace: str
    state: str
    busy: bool
    holder: str | None
    queued: list[str]
    sandbox: str
    pid: int | None
    files: int | None
    idle_timeout_s: float | None
    idle_s: float
    kernel_restarts: int
    last_checkpoint: CheckpointInfo | None
    last_restore: RestoreInfo | None
    checkpoint_file: str
    watched_folders: int | None


class WorkspaceState(enum.StrEnum):
    """Where a workspace is in its life cycle (see the module docstring); the value is the
    wire's ``state`` string."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    CLOSED = "closed"


class Workspace:
    """One project folder's warm REPL (see the module docstring).

    Args:
        folder: the project folder (absolute, resolved).
        settings: backend, timeouts.
        on_change: ``(workspace, kind, data)`` for ``"started"``, ``"checkpointed"``,
            ``"stopped"``, ``"checkpoint_failed"``, ``"reset"``, ``"restored"``, ``"cell"``,
            ``"closed"``.
    """

    def __init__(
        self, folder: Path, settings: WorkspaceSettings, on_change: ChangeCallback | None = None
    ) -> None:
        self.folder = str(folder)
        self.settings = settings
        self._on_change = on_change
        self.state = WorkspaceState.STOPPED
        self.sandbox: Sandbox | None = None
        self.context: Context | None = None
        self._lock = asyncio.Lock()
        self.holder: str | None = None
        self.waiting: list[str] = []
        self.last_used = time.monotonic()
        self.created_at = time.time()
        self.pending_notes: list[str] = []
        self.last_checkpoint: CheckpointInfo | None = None
        self.last_restore: RestoreInfo | None = None
        self.kernel_restarts = 0
        self._restarts_seen = 0
        # a checkpoint whose values could not be put back in the sandbox (its folder full):
        # restored before the next checkpoint, which must not replace it meanwhile
        self._unrestored: ckpt_mod.Checkpoint | None = None
        self._loading: threading.Event | None = None  # set: the codebase load stops
        # what the kernel tells of changes in the folder since the codebase was read (None:
        # the folder is walked before every task; see rlmd.workspace.watch)
        self._watch: FolderWatch | None = None
        self._stop_loads = False  # a close is coming: a load that starts now stops at once
        self._cell: asyncio.Task[Any] | None = None  # the task in run_cell's execute
        self._no_cells = False  # the daemon is stopping: no human cell starts any more

    def stop_loading(self) -> None:
        """Stop the codebase load :meth:`ensure_started` is waiting for, if any (within one
        file): its caller gets a ``SandboxError``. A close or the daemon's shutdown would
        otherwise wait for a load of a huge folder (``/``, a home) to end."""
        self._stop_loads = True
        if self._loading is not None:
            self._loading.set()

    # -- holding ------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Someone holds the workspace (a task, a cell, a checkpoint)."""
        return self._lock.locked()

    def queue_position(self, holder: str) -> int | None:
        """1 for the next in line, ... ; ``None`` when ``holder`` is not waiting."""
        try:
            return self.waiting.index(holder) + 1
        except ValueError:
            return None

    @contextlib.asynccontextmanager
    async def hold(self, holder: str) -> AsyncIterator[None]:
        """Hold the workspace for ``holder`` (waiting in FIFO order behind the others).

        Raises:
            asyncio.CancelledError: cancelled while waiting (the place in line is given up).
        """
        self.waiting.append(holder)
        try:
            await self._lock.acquire()
        finally:
            self.waiting.remove(holder)
        self.holder = holder
        try:
            yield
        finally:
            self.holder = None
            self.last_used = time.monotonic()
            self._lock.release()

    def _emit(self, kind: str, **data: Any) -> None:
        if self._on_change is not None:
            try:
                self._on_change(self, kind, data)
            except Exception:  # a broken listener must not break the workspace
                log.exception("workspace listener failed")

    # -- the sandbox (callers hold the workspace) ----------------------------------------------

    def _new_sandbox(self) -> tuple[Sandbox, str | None]:
        """A new sandbox of the workspace's backend and what its isolation lacks (``None``:
        nothing). Blocking (isolation detection on first use).

        Raises:
            SandboxError: the backend or its options are wrong, or the isolation the
                settings require is not there.
        """
        try:
            sandbox = create_sandbox(self.settings.sandbox, **self.settings.sandbox_options)
        except (ValueError, TypeError) as exc:
            raise SandboxError(
                f"cannot create the {self.settings.sandbox!r} sandbox: {exc}"
            ) from None
        try:
            return sandbox, isolation.check(sandbox, required=self.settings.require_isolation)
        except isolation.NotIsolated as exc:
            raise SandboxError(str(exc)) from None

    async def ensure_started(self) -> StartInfo | None:
        """Start the sandbox if it is stopped: load the codebase from disk, bind it as
        ``context``, restore the checkpoint. Returns what happened (``None`` if it was
        running already).

        Raises:
            SandboxError: the sandbox could not start (unknown backend included), or the
                codebase load was stopped (:meth:`stop_loading`).
            NotADirectoryError: the project folder is gone.
        """
        if self.sandbox is not None:
            return None
        if self.state is WorkspaceState.CLOSED:  # a command that waited in line behind close
            raise SandboxError(
                f"the workspace {self.folder} was closed while this waited in line (send it "
                "again to open it anew)"
            )
        self.state = WorkspaceState.STARTING
        try:
            # In a thread: the first sandbox of a kind detects the isolation the host
            # allows (~0.1 s of probes), which would stall every other client. Its kernel
            # process then starts up while the codebase loads.
            sandbox, gap = await asyncio.to_thread(self._new_sandbox)
            if gap:
                log.warning("workspace %s: %s", self.folder, gap)
            sandbox.warm()
            restoring = False
            watch: FolderWatch | None = None
            try:
                ctx, watch = await self._load()
                await sandbox.start(_no_calls)
                await sandbox.load_context(ctx.value, codebase=True)
                path = ckpt_mod.checkpoint_path(self.folder)
                problems: list[str] = []
                saved = await asyncio.to_thread(ckpt_mod.load, path, problems)
                # here: a restore that fails with the sandbox (its kernel killed while it
                # decodes the values) or is cancelled left the workspace "starting" with a
                # running REPL whose next checkpoint replaced the one not restored
                blocked: str | None = None
                if saved is not None:
                    restoring = True
                    restored, missing, blocked = await ckpt_mod.restore(sandbox, saved)
            except SandboxError as exc:
                await asyncio.shield(sandbox.close())
                if watch is not None:
                    watch.close()
                if restoring:
                    raise SandboxError(
                        f"the checkpoint's variables could not be restored: {exc} (it is "
                        "kept; reset the workspace to start without it)"
                    ) from exc
                raise
            except BaseException:
                await asyncio.shield(sandbox.close())
                if watch is not None:
                    watch.close()
                raise
        except BaseException:
            self.state = WorkspaceState.STOPPED
            raise
        self.sandbox, self.context, self._watch = sandbox, ctx, watch
        self._restarts_seen = _restarts(sandbox)
        info: StartInfo = {
            "files": len(ctx.value),
            "chars": ctx.chars(),
            "sandbox": self.settings.sandbox,
            "restored": [],
            "not_restored": {},
            "checkpoint_taken_at": None,
            "checkpoint_error": problems[0] if problems else None,
        }
        if problems:  # the model and the user are told, not just the log
            self.pending_notes.append(
                f"No variables were restored: {problems[0]}. The REPL starts with only `context`."
            )
        if saved is not None:
            self._unrestored = saved if blocked else None
            info["restored"], info["not_restored"] = restored, missing
            info["checkpoint_taken_at"] = saved.taken_at
            self.last_restore = {"at": time.time(), **info}
            if restored or missing:
                self.pending_notes.append(_restore_note(saved.taken_at, restored, missing))
        self.state = WorkspaceState.READY
        self._emit("started", **info)
        return info

    async def _load(self) -> tuple[Context, FolderWatch | None]:
        """The codebase of the folder, loaded in a worker thread that stops (within one file)
        when the caller is cancelled or :meth:`stop_loading` is called, and the watch on its
        folders that the load filled (``None``: none could be kept, see
        :mod:`rlmd.workspace.watch`).

        Raises:
            SandboxError: the load was stopped.
            NotADirectoryError: the folder is gone.
        """
        stop = self._loading = threading.Event()
        if self._stop_loads:
            stop.set()
        try:
            return await asyncio.to_thread(_watched_load, Path(self.folder), stop)
        except asyncio.CancelledError:
            stop.set()  # the thread would go on reading the folder after nobody waits
            raise
        except LoadStopped:
            raise SandboxError(
                f"the workspace {self.folder} was closed while its codebase was loading"
            ) from None
        finally:
            self._loading = None

    async def ensure_current(self) -> StartInfo | None:
        """:meth:`ensure_started`, and for a workspace that was running already, bring its
        ``context`` up to date with the folder (:meth:`refresh`): what a task sees first.

        Raises:
            SandboxError / NotADirectoryError: as :meth:`ensure_started`.
        """
        started = await self.ensure_started()
        if started is None:
            await self.refresh()
        return started

    async def refresh(self) -> dict[str, int] | None:
        """Re-read the files of the folder that changed since the codebase was loaded (size
        or modification time, or named by the folder's watch), add new ones, drop removed
        ones, and bind the result as ``context`` again (the sandbox is sent only the files
        changed, where it can take that: :meth:`Sandbox.update_codebase`); the symbol index
        is updated for the changed files only. Returns ``{"files", "read"}`` (files now, files read) or ``None``
        when nothing changed or the sandbox is stopped. Variables in the REPL are kept.

        With a watch on the folder (:mod:`rlmd.workspace.watch`) that saw no change, the
        folder is not walked at all (a few system calls, whatever its size); one that saw
        changes has only the folders it named listed again (and new folders walked);
        otherwise (no watch, lost events) the whole folder is walked, stating every file,
        and a new watch is filled by that walk.

        Raises:
            SandboxError: the sandbox failed while taking the new codebase.
            NotADirectoryError: the folder is gone.
        """
        if self.sandbox is None or self.context is None:
            return None
        old = self.context
        fresh, watch = await asyncio.to_thread(_watched_refresh, old, self._watch)
        if fresh is not None:
            try:
                changed, removed = fresh.changes or codebase_delta(old.value, fresh.value)
                await self.sandbox.update_codebase(fresh.value, changed, removed)
            except BaseException:  # the old watch, which saw the change, stays: walked again
                if watch is not None and watch is not self._watch:
                    watch.close()
                raise
            self.context = fresh
        if watch is not self._watch:  # the walk's watch replaces the one that saw the change
            if self._watch is not None:
                self._watch.close()
            self._watch = watch
        elif watch is not None:
            watch.clear()  # what it saw is in the context now
        if fresh is None:
            return None
        info = {"files": len(fresh.value), "read": fresh.files_read}
        self._emit("refreshed", **info)
        return info

    async def checkpoint(self) -> CheckpointInfo | None:
        """Write the REPL's saveable variables to disk. ``None`` if the sandbox is stopped.

        Raises:
            SandboxError: the sandbox failed while being read.
            CheckpointNotWritten: the checkpoint file cannot be written (a full disk...).
        """
        if self.sandbox is None:
            return None
        await self._restore_unrestored()
        try:
            saved = await ckpt_mod.take(
                self.sandbox, self.folder, max_var_bytes=self.settings.max_var_bytes
            )
        except ckpt_mod.NotTaken as exc:
            raise CheckpointNotWritten(
                f"the checkpoint was not written: {exc}; the previous checkpoint is kept"
            ) from exc
        path = ckpt_mod.checkpoint_path(self.folder)
        try:
            size = await asyncio.to_thread(ckpt_mod.save, saved, path)
            # bounded (the first names and the counts), made in a thread: every name of
            # 200,000 went into the notification, the close reply and each WorkspaceInfo
            info = await asyncio.to_thread(ckpt_mod.summary, saved, size)
        except OSError as exc:
            raise CheckpointNotWritten(
                f"the checkpoint was not written: {exc}; the previous checkpoint is kept"
            ) from exc
        # in a thread, in steps: freed here, 200,000 descriptions held the loop 0.1 s (not
        # when cancelled above: the save's thread may still be reading them)
        await asyncio.to_thread(ckpt_mod.release, saved)
        self.last_checkpoint = info
        self._emit("checkpointed", **info)
        return info

    async def _restore_unrestored(self) -> None:
        """Put back the variables of a checkpoint whose values could not reach the sandbox
        (only those the REPL lacks), so the checkpoint about to be written holds them.

        Raises:
            CheckpointNotWritten: still blocked; the previous checkpoint must stay.
            SandboxError: the sandbox failed.
        """
        saved = self._unrestored
        if saved is None or self.sandbox is None:
            return
        restored, missing, blocked = await ckpt_mod.restore(self.sandbox, saved, only_missing=True)
        if blocked:
            raise CheckpointNotWritten(
                "the checkpoint was not written: the previous checkpoint's variables are not "
                f"back in the REPL ({blocked}); the previous checkpoint is kept (reset the "
                "workspace to discard it)"
            )
        self._unrestored = None
        self.last_restore = {"at": time.time(), "restored": restored, "not_restored": missing}
        self._emit("restored", restored=restored, not_restored=missing, after="a blocked restore")
        if restored:
            self.pending_notes.append(_restore_note(saved.taken_at, restored, missing))

    async def stop(self, *, checkpoint: bool, reason: str, keep_unsaved: bool = False) -> None:
        """Stop the sandbox (after a checkpoint if ``checkpoint``).

        A checkpoint that fails is logged and reported in the ``"stopped"`` change, and the
        sandbox is stopped anyway, except when ``keep_unsaved`` and the file could not be
        written (a full disk): then the REPL keeps running with its variables and a
        ``"checkpoint_failed"`` change says why.

        Raises:
            CheckpointNotWritten: only with ``keep_unsaved``; nothing was stopped.
        """
        if self.sandbox is None:
            return
        problem = None
        if checkpoint:
            try:
                await self.checkpoint()
            except CheckpointNotWritten as exc:
                if keep_unsaved:
                    log.warning("workspace %s: %s; kept running", self.folder, exc)
                    self._emit("checkpoint_failed", reason=reason, error=str(exc))
                    raise
                problem = f"checkpoint failed: {exc}"
            except (SandboxError, OSError, KeyError, ValueError, TypeError) as exc:
                problem = f"checkpoint failed: {exc}"
            if problem:
                log.warning("workspace %s: %s", self.folder, problem)
        sandbox, self.sandbox, self.context = self.sandbox, None, None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._unrestored = None  # the next start restores from the file again
        await asyncio.shield(sandbox.close())
        self.state = WorkspaceState.STOPPED
        self._emit("stopped", reason=reason, checkpoint_error=problem)

    async def reset(self) -> None:
        """Stop without a checkpoint and delete the saved one: the next use starts a fresh
        REPL with only ``context``."""
        await self.stop(checkpoint=False, reason="reset")
        await asyncio.to_thread(ckpt_mod.remove, self.folder)
        self.pending_notes.clear()
        self.last_checkpoint = None
        self._emit("reset")

    async def variables(self, offset: int = 0, limit: int = VARS_PAGE, match: str = "") -> VarPage:
        """One page of the REPL's user variables, sorted by name: ``limit`` of those whose
        names contain ``match``, from ``offset`` (see :meth:`Sandbox.list_variables_page`).

        Raises:
            ValueError: ``offset`` or ``limit`` is out of range.
            SandboxError: the sandbox is stopped or failed.
        """
        if self.sandbox is None:
            raise SandboxError("the workspace's sandbox is stopped")
        return await self.sandbox.list_variables_page(offset, limit, match)

    async def run_cell(self, code: str, timeout_s: float | None) -> CellResult:
        """Run a human-written cell in the REPL (starting it first if needed); model helpers
        such as ``llm_query`` raise inside it. Restarts are tracked like a task's.

        Raises:
            SandboxError: the sandbox could not start or failed.
        """
        await self.ensure_started()
        assert self.sandbox is not None
        if self._no_cells:
            raise CellNotRun("the daemon is stopping: the cell was not run")
        self._cell = task = asyncio.current_task()
        try:
            result = await self.sandbox.execute(code, timeout_s=timeout_s)
        except asyncio.CancelledError:
            if not self._no_cells or task is None or task.cancelling() > 1:
                raise
            task.uncancel()  # stop_cells' cancel, and only it: the cell never ran
            raise CellNotRun("the daemon is stopping: the cell was stopped before it ran") from None
        finally:
            self._cell = None
        if result.kernel_restarted:
            await self._after_restart("a cell run by hand")
        self._emit(
            "cell",
            code=code,
            error=result.error,
            variables=[v.name for v in result.variables],
            kernel_restarted=result.kernel_restarted,
        )
        return result

    def refuse_cells(self) -> None:
        """No human cell starts from now on (:class:`CellNotRun`): the daemon is stopping.
        Set before its tasks are cancelled, so a cell queued behind a task does not run in
        the gap before :meth:`stop_cells`."""
        self._no_cells = True

    async def stop_cells(self) -> None:
        """The daemon is stopping: no human cell starts from now on (:class:`CellNotRun`),
        and one that runs is interrupted (``KeyboardInterrupt`` in it, variables kept; one
        that will not stop gets the kernel restarted and the checkpoint's variables bound
        again), so the shutdown's checkpoint can follow at once. It waited for the cell
        instead, up to its 30 s, then stopped the sandbox without a checkpoint: every
        variable since the last one was lost (review22)."""
        self._no_cells = True
        cell, sandbox = self._cell, self.sandbox
        if cell is None or sandbox is None:
            return
        if not await sandbox.interrupt() and not cell.done():
            cell.cancel()  # still on its way to the kernel: it never runs

    async def model_note(self) -> str:
        """What the next task's model is told about the REPL: restores and restarts since the
        last task, and the variables left by earlier work. Clears the pending notes."""
        assert self.sandbox is not None
        lines = list(self.pending_notes)
        self.pending_notes.clear()
        # the first 40 only: the whole list of 200,000 variables held the loop ~0.4 s
        page = await self.sandbox.list_variables_page(0, 40, by_name=False)
        if page.variables:
            shown = ", ".join(
                f"{v.name} ({v.type}{'' if v.size is None else f', len {v.size:,}'})"
                for v in page.variables
            )
            left = page.total - len(page.variables)
            more = f" and {left} more" if left > 0 else ""
            lines.append(
                "This REPL is a persistent workspace: variables made by earlier tasks are still "
                f"defined and you may reuse them: {shown}{more}."
            )
        return "\n".join(lines)

    async def finish_task(self) -> list[str]:
        """After a task: give the REPL back to the idle handler, notice a kernel that died
        (or was killed by a cancel) and restore the checkpoint's variables it lost, then
        checkpoint. Returns notes for the task's status. Never raises for sandbox failures:
        a broken sandbox is stopped and the note says so."""
        notes: list[str] = []
        sandbox = self.sandbox
        if sandbox is None:
            return notes
        try:
            await sandbox.start(_no_calls)
            # a dead kernel is restarted here; a count, not the list (the list of 200,000
            # variables held the event loop ~0.4 s after every task)
            await sandbox.list_variables_page(0, 0)
            note = await self._after_restart("the task")
            if note:
                notes.append(note)
            if self.settings.checkpoint_after_task:
                await self.checkpoint()
        except CheckpointNotWritten as exc:  # the REPL is fine: it keeps the variables
            log.warning("workspace %s: %s", self.folder, exc)
            notes.append(f"{exc}; the REPL keeps its variables")
        except (SandboxError, OSError, KeyError, ValueError, TypeError) as exc:
            notes.append(f"the workspace sandbox failed after the task and was stopped: {exc}")
            await self.stop(checkpoint=False, reason=f"sandbox failed: {exc}")
        return notes

    async def _after_restart(self, during: str) -> str | None:
        """If the kernel restarted since we last looked, bind the checkpoint's variables it
        lacks and queue a note for the next model. Returns the note (or ``None``)."""
        assert self.sandbox is not None
        now = _restarts(self.sandbox)
        if now == self._restarts_seen:
            return None
        self.kernel_restarts += now - self._restarts_seen
        self._restarts_seen = now
        saved = await asyncio.to_thread(ckpt_mod.load, ckpt_mod.checkpoint_path(self.folder))
        if saved is None:
            note = (
                f"The REPL process died during {during} and was restarted with only `context`; "
                "there was no checkpoint to restore variables from."
            )
        else:
            restored, missing, blocked = await ckpt_mod.restore(
                self.sandbox, saved, only_missing=True
            )
            self._unrestored = saved if blocked else None
            self.last_restore = {"at": time.time(), "restored": restored, "not_restored": missing}
            self._emit("restored", restored=restored, not_restored=missing, after=during)
            note = f"The REPL process died during {during} and was restarted. " + _restore_note(
                saved.taken_at, restored, missing
            )
        self.pending_notes.append(note)
        return note

    def describe(self) -> WorkspaceInfo:
        """The workspace as a JSON-able dict (see ``docs/protocol.md``, WorkspaceInfo)."""
        return {
            "workspace": self.folder,
            "state": self.state,
            "busy": self.busy,
            "holder": self.holder,
            "queued": list(self.waiting),
            "sandbox": self.settings.sandbox,
            "pid": getattr(self.sandbox, "pid", None) if self.sandbox else None,
            "files": len(self.context.value) if self.context is not None else None,
            "idle_timeout_s": self.settings.idle_timeout_s,
            "idle_s": round(time.monotonic() - self.last_used, 3),
            "kernel_restarts": self.kernel_restarts,
            "last_checkpoint": self.last_checkpoint,
            "last_restore": self.last_restore,
            "checkpoint_file": str(ckpt_mod.checkpoint_path(self.folder)),
            "watched_folders": self._watch.folders if self._watch is not None else None,
        }


def _watched_load(folder: Path, stop: threading.Event) -> tuple[Context, FolderWatch | None]:
    """:func:`load_codebase` of ``folder`` with a :class:`FolderWatch` on its folders, or
    without one where none can be kept. Blocking: run it in a worker thread.

    Raises:
        LoadStopped, NotADirectoryError, ValueError: as :func:`load_codebase`.
    """
    watch = open_watch()
    try:
        ctx = load_codebase(folder, stop=stop, on_folder=watch.add if watch else None)
    except BaseException:
        if watch is not None:
            watch.close()
        raise
    return ctx, _kept(watch, folder)


def _watched_refresh(
    context: Context, watch: FolderWatch | None
) -> tuple[Context | None, FolderWatch | None]:
    """``(fresh, watch)``: :func:`refresh_codebase` of ``context`` when ``watch`` saw a
    change (or there is none); ``(None, watch)`` at once when ``watch`` saw nothing.

    When ``watch`` names every change (:attr:`FolderWatch.complete`), only the folders it
    names are listed again (``refresh_codebase``'s ``named``), new folders are added to it,
    and it is returned: the caller clears it (:meth:`FolderWatch.clear`) once the refresh
    is brought in. Else the whole folder is walked and a new watch filled by that walk
    is returned (``None``: none could be kept). Blocking: run it in a worker thread.

    Raises:
        NotADirectoryError: the folder is gone (``watch`` keeps what it saw: the next call
            walks again).
    """
    reread = watch.changed() if watch is not None else set()
    if reread is None:
        return None, watch
    if watch is not None and watch.complete:
        fresh = refresh_codebase(context, on_folder=watch.add, named=reread)
        if watch.broken is None:
            return fresh, watch
        # the walk is right, but the watch missed folders (its limit): walk anew next time
        return fresh, _kept(watch, Path(str(context.source)), level=logging.DEBUG)
    fresh_watch = open_watch()
    try:
        fresh = refresh_codebase(
            context, on_folder=fresh_watch.add if fresh_watch else None, reread=reread
        )
    except BaseException:
        if fresh_watch is not None:
            fresh_watch.close()
        raise
    return fresh, _kept(fresh_watch, Path(str(context.source)), level=logging.DEBUG)


def _kept(watch: FolderWatch | None, folder: Path, level: int = logging.INFO) -> FolderWatch | None:
    """``watch`` if it saw the whole walk, else ``None`` (closed; the reason logged at
    ``level``: each walk tries again, so only a workspace's first load says it at info)."""
    if watch is not None and watch.broken is not None:
        log.log(
            level, "workspace %s: walked before each task, not watched: %s", folder, watch.broken
        )
        watch.close()
        return None
    return watch


def _restarts(sandbox: Sandbox) -> int:
    """How many times the sandbox restarted its kernel (0 for backends that do not count)."""
    return int(getattr(sandbox, "restarts", 0) or 0)


def _restore_note(taken_at: float, restored: list[str], missing: dict[str, str]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(taken_at))
    parts = [f"Variables were restored from the workspace checkpoint of {when}:"]
    # at most 40 names, as the list of the REPL's variables: all 200,000 of a checkpoint
    # went into the next task's system prompt (review22)
    more = f" and {len(restored) - 40} more" if len(restored) > 40 else ""
    parts.append((", ".join(restored[:40]) + more) if restored else "none")
    parts[-1] += "."
    if missing:
        lost = ", ".join(f"{n} ({why})" for n, why in list(missing.items())[:20])
        parts.append(f"Not restored (re-create them if you need them): {lost}.")
    parts.append("Imports are not restored: import modules again before using them.")
    return " ".join(parts)


class WorkspaceManager:
    """The open workspaces, by resolved project folder.

    Args:
        settings_for: project folder → :class:`WorkspaceSettings` (reads its config).
        on_change: passed to every :class:`Workspace`.
    """

    def __init__(
        self,
        settings_for: Callable[[Path], WorkspaceSettings],
        on_change: ChangeCallback | None = None,
    ) -> None:
        self._settings_for = settings_for
        self._on_change = on_change
        self.workspaces: dict[str, Workspace] = {}

    @staticmethod
    def resolve(folder: str | Path) -> Path:
        """The absolute, resolved project folder.

        Raises:
            NotADirectoryError: it does not exist or is not a folder.
        """
        path = Path(folder).expanduser()
        try:
            path = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise NotADirectoryError(f"no such project folder: {folder}") from None
        if not path.is_dir():
            raise NotADirectoryError(f"not a folder: {folder}")
        return path

    def get(self, folder: str | Path, *, create: bool = True) -> Workspace | None:
        """The workspace of ``folder``, created (stopped) on first use if ``create``.

        Raises:
            NotADirectoryError: ``folder`` is not an existing folder.
            ValueError: the project's config is invalid.
        """
        path = self.resolve(folder)
        ws = self.workspaces.get(str(path))
        if ws is None and create:
            ws = Workspace(path, self._settings_for(path), self._on_change)
            self.workspaces[str(path)] = ws
        return ws

    def find(self, folder: str | Path) -> Workspace | None:
        """The open workspace of ``folder`` or ``None`` (no error for a missing folder)."""
        try:
            return self.get(folder, create=False)
        except NotADirectoryError:
            return self.workspaces.get(str(folder))

    async def close(self, ws: Workspace, *, checkpoint: bool = True) -> None:
        """Stop ``ws`` (checkpointing first if asked) and forget it. The caller makes sure
        no task holds or waits for it.

        A codebase load that is starting ``ws`` is stopped first (the open waiting for it
        fails with ``SandboxError``).

        Raises:
            CheckpointNotWritten: ``checkpoint`` was asked and the file could not be written;
                ``ws`` stays open and running with its variables (close with
                ``checkpoint=False`` to discard them).
        """
        ws.stop_loading()
        async with ws.hold("close"):
            try:
                await ws.stop(checkpoint=checkpoint, reason="closed", keep_unsaved=True)
            except CheckpointNotWritten as exc:
                ws._stop_loads = False  # it stays open: it may be started again
                raise CheckpointNotWritten(
                    f"{exc}; the workspace stays open with its variables "
                    "(close it with checkpoint false to discard them)"
                ) from exc
        ws.state = WorkspaceState.CLOSED
        self.workspaces.pop(ws.folder, None)
        ws._emit("closed")

    async def sweep_idle(self) -> list[str]:
        """Checkpoint and stop every running workspace idle for longer than its timeout.
        Returns the folders stopped."""
        stopped = []
        now = time.monotonic()
        for ws in list(self.workspaces.values()):
            limit = ws.settings.idle_timeout_s
            if ws.sandbox is None or ws.busy or ws.waiting or limit is None:
                continue
            if now - ws.last_used < limit:
                continue
            async with ws.hold("idle"):
                if ws.sandbox is None or ws.waiting:
                    continue
                try:
                    await ws.stop(checkpoint=True, reason="idle", keep_unsaved=True)
                except CheckpointNotWritten:  # kept with its variables; try again later
                    ws.last_used = time.monotonic()
                    continue
                stopped.append(ws.folder)
        return stopped

    async def run_sweeper(self, interval_s: float) -> None:
        """Call :meth:`sweep_idle` every ``interval_s`` seconds, forever (cancel to stop)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sweep_idle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("idle sweep failed")

    def refuse_cells(self) -> None:
        """No human cell starts in any workspace from now on (the daemon is stopping)."""
        for ws in self.workspaces.values():
            ws.refuse_cells()

    async def shutdown(self) -> None:
        """Checkpoint and stop every workspace (tasks must be stopped first; human cells
        are stopped here: :meth:`Workspace.stop_cells`)."""
        for ws in list(self.workspaces.values()):
            ws.stop_loading()
        await asyncio.gather(
            *(ws.stop_cells() for ws in self.workspaces.values()), return_exceptions=True
        )
        for ws in list(self.workspaces.values()):
            try:
                await asyncio.wait_for(self.close(ws, checkpoint=True), 30)
            except Exception:
                log.exception("could not close workspace %s cleanly", ws.folder)
                if ws.sandbox is not None:
                    await asyncio.shield(ws.sandbox.close())

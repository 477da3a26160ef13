"""Tasks: one question run by the engine in one workspace, from "queued" to "finished".

A task gets its run id up front (the engine records the root run under it), waits in its
workspace's line, runs with the workspace's warm sandbox, and ends with the run's status. Every
engine event goes first to the store (so what a client is told is already readable) and then
to the hub. Tasks in different workspaces run in parallel (one asyncio task each).

Cancelling a task cancels its asyncio task: while queued it leaves the line; while running,
the engine stops the whole run tree and records it as ``"cancelled"`` with the spend so far.
A task that never reached the engine (cancelled in line, or its sandbox could not start) is
still recorded as a run (the engine's :func:`~rlmd.engine.events.never_ran` events) so it
shows in the run list.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from rlmd.engine import Executor, RunConfig, RunResult, run_task
from rlmd.engine import prompts as engine_prompts
from rlmd.engine.budget import BudgetLimits
from rlmd.engine.events import (
    CellFinished,
    Event,
    IterationStarted,
    ModelCallFinished,
    RunFinished,
    never_ran,
)
from rlmd.engine.usage import LiveTotals, LiveUsage, UsageSummary
from rlmd.models.registry import Registry
from rlmd.sandbox.base import SandboxError
from rlmd.server.errors import not_found
from rlmd.server.hub import Hub
from rlmd.workspace.manager import WorkspaceManager

log = logging.getLogger("rlmd.server")

MAX_FINISHED_KEPT = 1000
"""Finished tasks kept in memory for ``rlmd.task.status`` (older ones come from the store)."""


class TaskStatus(TypedDict):
    """A task as the protocol shows it (``docs/protocol.md``, TaskStatus); ``update`` is
    added on ``rlmd/taskStatus`` notifications."""

    run_id: str
    workspace: str
    question: str
    state: str
    status: str | None
    queue_position: int | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    iterations: int
    usage: LiveTotals
    final_usage: UsageSummary | None
    answer: str | None
    answer_source: str | None
    error: str | None
    sandbox_restarts: int
    notes: list[str]
    cancel_requested: bool
    models: dict[str, str]
    sandbox: str
    budget: BudgetLimits
    origin: str | None
    update: NotRequired[str]


class TaskState(enum.StrEnum):
    """Where a task is; the value is the wire's ``state`` string."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


class TaskPhase(enum.StrEnum):
    """Where a task is inside its state (internal: cancellation depends on it). ``waiting``
    in line, ``starting`` its workspace's sandbox, in the ``engine``, ``finishing`` (the
    workspace's after-task checkpoint), ``done``."""

    WAITING = "waiting"
    STARTING = "starting"
    ENGINE = "engine"
    FINISHING = "finishing"
    DONE = "done"


@dataclass
class Task:
    """One task (see ``docs/protocol.md``, TaskStatus, for the dict form)."""

    run_id: str
    workspace: str
    question: str
    config: RunConfig
    registry: Registry
    origin: str | None = None
    state: TaskState = TaskState.QUEUED
    phase: TaskPhase = TaskPhase.WAITING
    status: str | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    answer: str | None = None
    answer_source: str | None = None
    error: str | None = None
    iterations: int = 0
    usage: LiveUsage = field(default_factory=LiveUsage)
    final_usage: UsageSummary | None = None
    sandbox_restarts: int = 0
    notes: list[str] = field(default_factory=list)
    cancel_requested: bool = False
    handle: asyncio.Task[None] | None = None

    def to_dict(self, queue_position: int | None = None) -> TaskStatus:
        return {
            "run_id": self.run_id,
            "workspace": self.workspace,
            "question": self.question,
            "state": self.state,
            "status": self.status,
            "queue_position": queue_position,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "iterations": self.iterations,
            "usage": self.usage.to_dict(),
            "final_usage": self.final_usage,
            "answer": self.answer,
            "answer_source": self.answer_source,
            "error": self.error,
            "sandbox_restarts": self.sandbox_restarts,
            "notes": list(self.notes),
            "cancel_requested": self.cancel_requested,
            "models": {
                "root": self.config.root_model,
                "sub": self.config.model_for_depth(1),
            },
            "sandbox": self.config.sandbox,
            "budget": self.config.budget.to_dict(),
            "origin": self.origin,
        }


def with_note(template: str | None, note: str) -> str:
    """A system-prompt template with ``note`` appended (braces escaped for ``format``)."""
    base = template or engine_prompts.SYSTEM_PROMPT
    safe = note.replace("{", "{{").replace("}", "}}")
    return f"{base}\nAbout this workspace:\n{safe}\n"


class TaskManager:
    """Starts, tracks and cancels tasks.

    Args:
        record: the store's event sink.
        hub: where notifications go.
        workspaces: the workspace manager.
        executor: where tasks' child runs and batches run (default: here).
    """

    def __init__(
        self,
        record: Callable[[Event], None],
        hub: Hub,
        workspaces: WorkspaceManager,
        *,
        executor: Executor | None = None,
    ) -> None:
        self.record = record
        self.executor = executor
        self.hub = hub
        self.workspaces = workspaces
        self.tasks: OrderedDict[str, Task] = OrderedDict()
        self.listeners: list[Callable[[Task, Event | None], None]] = []
        self.started = 0
        self.finished = 0

    # -- queries --------------------------------------------------------------------------

    def get(self, run_id: str) -> Task | None:
        return self.tasks.get(run_id)

    def live(self) -> list[Task]:
        """Tasks queued or running, oldest first."""
        return [t for t in self.tasks.values() if t.state is not TaskState.FINISHED]

    def status(self, task: Task) -> TaskStatus:
        ws = self.workspaces.workspaces.get(task.workspace)
        pos = (
            ws.queue_position(task.run_id)
            if ws is not None and task.state is TaskState.QUEUED
            else None
        )
        return task.to_dict(pos)

    # -- commands -------------------------------------------------------------------------

    def start(self, task: Task) -> TaskStatus:
        """Register ``task`` and start it in the background; returns its status at once."""
        self.tasks[task.run_id] = task
        self.started += 1
        status = self.status(task)
        ahead = [
            t
            for t in self.live()
            if t.workspace == task.workspace and t.state is TaskState.QUEUED and t is not task
        ]
        status["queue_position"] = len(ahead) + 1
        # The response to rlmd.task.start goes out from the done-callback of the command's
        # coroutine, scheduled when it returns. Launching two loop turns from now puts the
        # first taskStatus (and every event) after that response on the wire.
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self._launch, task)
        return status

    def _launch(self, task: Task) -> None:
        if task.cancel_requested:  # cancelled before it was launched
            self._never_ran(task, "cancelled", "the task was cancelled before it started")
            task.state, task.phase, task.finished_at = (
                TaskState.FINISHED,
                TaskPhase.DONE,
                time.time(),
            )
            self.finished += 1
            self._publish(task)
            self._prune()
            return
        self._publish(task)
        task.handle = asyncio.get_running_loop().create_task(
            self._run(task), name=f"task-{task.run_id}"
        )

    def cancel(self, run_id: str) -> TaskStatus:
        """Ask task ``run_id`` to stop; returns its status (``cancel_requested`` is true
        unless it had finished already).

        Raises:
            CommandError: no live or recent task has this id.
        """
        task = self.tasks.get(run_id)
        if task is None:
            raise not_found(f"no task {run_id!r} in this daemon (finished long ago, or never)")
        if (
            task.state is not TaskState.FINISHED
            and task.phase is not TaskPhase.FINISHING
            and not task.cancel_requested
        ):
            task.cancel_requested = True
            if task.handle is not None:
                task.handle.cancel()
        return self.status(task)

    async def shutdown(self, timeout_s: float = 20.0) -> None:
        """Cancel every live task and wait (up to ``timeout_s``) for them to end."""
        handles = []
        for task in self.live():
            task.cancel_requested = True
            # said to whoever follows it (rlmd ask, VS Code...), not "the task was cancelled"
            task.error = task.error or "the rlmd daemon was stopped while the task ran"
            if task.handle is not None:
                task.handle.cancel()
                handles.append(task.handle)
        if handles:
            await asyncio.wait(handles, timeout=timeout_s)

    # -- running --------------------------------------------------------------------------

    async def _run(self, task: Task) -> None:
        try:
            try:
                ws = self.workspaces.get(task.workspace)
            except NotADirectoryError as exc:  # renamed or removed since it was accepted
                self._never_ran(task, "failed", f"the workspace folder is gone: {exc}")
                return
            assert ws is not None
            async with ws.hold(task.run_id):
                task.state, task.phase, task.started_at = (
                    TaskState.RUNNING,
                    TaskPhase.STARTING,
                    time.time(),
                )
                self._publish(task)
                try:
                    await ws.ensure_current()  # a running workspace sees the files as they are now
                    note = await ws.model_note()
                except (SandboxError, OSError, KeyError, ValueError, TypeError) as exc:
                    what = (  # renamed or removed since the task was accepted
                        "the workspace folder is gone"
                        if isinstance(exc, NotADirectoryError)
                        else "the workspace sandbox could not start"
                    )
                    self._never_ran(task, "failed", f"{what}: {exc}")
                    return
                if note:
                    task.config.system_prompt = with_note(task.config.system_prompt, note)
                task.phase = TaskPhase.ENGINE
                try:
                    result = await run_task(
                        task.question,
                        ws.context,
                        task.config,
                        get_model=task.registry.for_run(),
                        sinks=(self.record, lambda ev: self._on_event(task, ev)),
                        sandbox=ws.sandbox,
                        run_id=task.run_id,
                        executor=self.executor,
                    )
                    self._apply(task, result)
                except asyncio.CancelledError:
                    _uncancel()
                    task.status = task.status or "cancelled"
                    task.error = task.error or "the task was cancelled"
                except Exception as exc:  # bad config caught by the engine before it started
                    log.exception("task %s failed to start", task.run_id)
                    if task.status is None:
                        self._never_ran(task, "failed", f"{type(exc).__name__}: {exc}")
                task.phase = TaskPhase.FINISHING
                task.notes.extend(await ws.finish_task())
        except asyncio.CancelledError:
            if task.phase in (TaskPhase.WAITING, TaskPhase.STARTING):
                self._never_ran(task, "cancelled", "the task was cancelled before it started")
        except Exception as exc:  # never let a task take the daemon down
            log.exception("task %s crashed", task.run_id)
            if task.status is None:
                self._never_ran(task, "failed", f"internal error: {type(exc).__name__}: {exc}")
        finally:
            task.state, task.phase = TaskState.FINISHED, TaskPhase.DONE
            task.finished_at = time.time()
            self.finished += 1
            self._publish(task)
            task.handle = None  # a finished task keeps only its status
            self._prune()

    def _apply(self, task: Task, result: RunResult) -> None:
        task.status = result.status
        task.answer, task.answer_source = result.answer, result.answer_source
        task.error = result.error
        task.iterations = result.iterations
        task.final_usage = result.usage

    def _never_ran(self, task: Task, status: str, error: str) -> None:
        """Record a run for a task that never reached the engine, and tell the clients."""
        task.status, task.error = status, error
        for ev in never_ran(
            task.run_id,
            question=task.question,
            sandbox=task.config.sandbox,
            budget=task.config.budget.to_dict(),
            workspace=task.workspace,
            status=status,
            error=error,
        ):
            self.record(ev)
            self._on_event(task, ev)

    def _on_event(self, task: Task, ev: Event) -> None:
        """Engine sink: keep the task's live numbers, then publish the event."""
        own = ev.run_id == task.run_id
        task.usage.observe(ev)
        match ev:
            case IterationStarted(index=index) if own:
                task.iterations = index + 1
            case CellFinished(kernel_restarted=True):
                task.sandbox_restarts += 1
                where = "the workspace sandbox" if own else "a child run's sandbox"
                lost = ", ".join(ev.lost_variables) or "none"
                why = "a cell timed out" if ev.timed_out else "its kernel died"
                task.notes.append(
                    f"{where} was restarted during the run ({why}); variables lost: {lost}"
                )
            case RunFinished(status=status) if own:
                task.status = status
        self.hub.publish(
            "rlmd/event",
            {"task_id": task.run_id, "workspace": task.workspace, **ev.to_dict()},
            event=True,
        )
        for listener in list(self.listeners):
            try:
                listener(task, ev)
            except Exception:
                log.exception("task listener failed")
        if isinstance(ev, ModelCallFinished | RunFinished | IterationStarted):
            self._publish(task, quiet=True)

    def _publish(self, task: Task, *, quiet: bool = False) -> None:
        """Send ``rlmd/taskStatus`` (``quiet``: a usage/iteration update, not a state change)."""
        status = self.status(task)
        status["update"] = "progress" if quiet else "state"
        self.hub.publish("rlmd/taskStatus", status)
        if not quiet:
            for listener in list(self.listeners):
                try:
                    listener(task, None)
                except Exception:
                    log.exception("task listener failed")

    def _prune(self) -> None:
        finished = [k for k, t in self.tasks.items() if t.state is TaskState.FINISHED]
        for key in finished[: max(0, len(finished) - MAX_FINISHED_KEPT)]:
            self.tasks.pop(key, None)


def _uncancel() -> None:
    """Consume one cancellation of the current task so it can finish its clean-up."""
    current = asyncio.current_task()
    if current is not None:
        current.uncancel()

"""The front doors' connection to the user's daemon, and following one task through it.

A front door (``rlmd mcp``, ``rlmd acp``) is a long-lived process speaking another protocol
on stdio; every question it gets becomes an ``rlmd.task.start`` on the user's daemon, so the
workspace stays warm between calls and the run lands in the same trajectory store as
everything else. ``rlmd ask`` (:mod:`rlmd.cli.ask`) is the one-question door from the shell
over the same link. The daemon is found (or started) the way ``rlmd attach`` does it.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmd import paths
from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    IterationStarted,
    ModelCallFinished,
    RunStarted,
    type_of,
)
from rlmd.server import auth
from rlmd.server.client import Client
from rlmd.server.launch import START_TIMEOUT_S, connect_or_start

#: notifications of tasks nobody follows (yet) are kept for this many tasks: a task's first
#: notifications can arrive in the same read as the answer to its ``rlmd.task.start``. Other
#: clients' tasks pass through here too, hence the small bounds (a finished status is always
#: kept, so a follower never waits for an end it missed).
EARLY_TASKS_KEPT = 32
EARLY_NOTES_PER_TASK = 64


def is_finished(note: dict[str, Any]) -> bool:
    """Whether ``note`` is the ``rlmd/taskStatus`` saying its task finished."""
    return note["method"] == "rlmd/taskStatus" and note["params"].get("state") == "finished"


class DaemonLink:
    """One connection to the daemon, shared by every request of a front door.

    Subscribes to run events in ``"summary"`` detail (strings cut to 500 characters) and no
    ``$/progress``; notifications are routed to whoever follows their task and never piled
    up.
    """

    def __init__(self) -> None:
        self.client: Client | None = None
        self._followers: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._early: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    @classmethod
    async def open(
        cls, *, autostart: bool = True, timeout_s: float = START_TIMEOUT_S
    ) -> DaemonLink:
        """Connect to the daemon of this rlmd home, starting one when none runs and
        ``autostart`` (and waiting up to ``timeout_s`` seconds for it to listen).

        Raises:
            ConnectionError: no daemon could be reached or started, or the one there did not
                answer (stopped or stuck); the message says where its log is.
            PermissionError: the socket's folder is not safe to use (another user's).
        """
        sock = await asyncio.to_thread(connect_or_start, autostart=autostart, timeout_s=timeout_s)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=2**26)
        token = auth.token_for(paths.socket_path())
        if token:
            writer.write(auth.handshake(token))
        link = cls()
        link.client = Client(reader, writer, on_notification=link._route)
        try:
            await link.command("rlmd.subscribe", {"events": "summary", "progress": "none"})
        except TimeoutError:  # an OSError with no message: "cannot reach the daemon: " alone
            await link.close()
            raise ConnectionError(
                f"the rlmd daemon on {paths.socket_path()} took the connection but did not "
                f"answer (stopped or stuck? its log: {paths.log_path()})"
            ) from None
        return link

    async def command(
        self, name: str, params: dict[str, Any] | None = None, *, timeout: float = 60.0
    ) -> Any:
        """One daemon command (see ``docs/protocol.md``); returns its result.

        Raises:
            rlmd.server.client.RpcError: the daemon refused it (``code``, ``message``).
            ConnectionError: the daemon went away.
        """
        assert self.client is not None, "call DaemonLink.open()"
        if self.client.closed:
            raise ConnectionError("the connection to the rlmd daemon is closed")
        return await self.client.command(name, params, timeout=timeout)

    async def follow(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Start a task (``rlmd.task.start`` params) and yield every notification about it
        (``{"method", "params"}``: its ``rlmd/event`` and ``rlmd/taskStatus``), first the
        status ``rlmd.task.start`` returned, last the finished status.

        Raises:
            rlmd.server.client.RpcError: the daemon refused the task.
            ConnectionError: the daemon went away before the task finished.
        """
        status = await self.command("rlmd.task.start", params)
        run_id = status["run_id"]
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._followers[run_id] = queue
        for note in self._early.pop(run_id, []):
            queue.put_nowait(note)
        try:
            yield {"method": "rlmd/taskStatus", "params": status}
            while True:
                try:
                    note = await asyncio.wait_for(queue.get(), 2.0)
                except TimeoutError:
                    if self.client is None or self.client.closed:
                        raise ConnectionError(
                            f"lost the rlmd daemon while run {run_id} was going; "
                            f"`rlmd show {run_id}` has what was recorded"
                        ) from None
                    continue
                yield note
                if is_finished(note):
                    return
        finally:
            self._followers.pop(run_id, None)

    def _route(self, note: dict[str, Any]) -> None:
        params = note.get("params") or {}
        if note["method"] == "rlmd/event":
            task = params.get("task_id")
        elif note["method"] == "rlmd/taskStatus":
            task = params.get("run_id")
        else:
            return
        queue = self._followers.get(task) if task else None
        if queue is not None:
            queue.put_nowait(note)
        elif task:
            early = self._early.setdefault(task, [])
            if len(early) < EARLY_NOTES_PER_TASK or is_finished(note):
                early.append(note)
            while len(self._early) > EARLY_TASKS_KEPT:
                self._early.popitem(last=False)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


class LazyLink:
    """A front door's daemon connection, opened on first use (so the front door's own
    handshake never waits for a daemon to start) and again after the daemon went away."""

    def __init__(self, *, autostart: bool = True) -> None:
        self.autostart = autostart
        self._link: DaemonLink | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> DaemonLink:
        """The open link.

        Raises:
            ConnectionError: no daemon could be reached or started.
        """
        async with self._lock:
            if self._link is None or self._link.client is None or self._link.client.closed:
                try:
                    self._link = await DaemonLink.open(autostart=self.autostart)
                except OSError as exc:  # ConnectionError is one; PermissionError: unsafe folder
                    raise ConnectionError(f"cannot reach the rlmd daemon: {exc}") from exc
            return self._link


@dataclass
class TaskProgress:
    """What a followed task is doing, folded from its notifications (for a one-line
    progress message)."""

    iterations: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    subcalls: int = 0
    child_runs: int = 0
    doing: str = "queued"
    #: cells (node ids) started and not finished yet
    open_cells: set[str] = field(default_factory=set)

    def update(self, note: dict[str, Any]) -> None:
        """Fold one notification of the task in."""
        p = note["params"]
        if note["method"] == "rlmd/taskStatus":
            self.iterations = p.get("iterations") or self.iterations
            usage = p.get("usage") or {}
            self.tokens = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
            self.cost_usd = usage.get("cost_usd") or 0.0
            if p.get("state") == "running" and self.doing == "queued":
                self.doing = "starting the workspace"
            if p.get("state") == "finished":
                self.doing = p.get("status") or "finished"
            return
        kind, depth = type_of(p.get("kind")), p.get("depth") or 0
        where = f" (depth {depth})" if depth else ""
        if kind is IterationStarted:
            self.doing = f"iteration {(p.get('data') or {}).get('index', 0) + 1}{where}: model"
        elif kind is CellStarted:
            self.open_cells.add(p.get("node_id") or "")
            self.doing = f"running a cell{where}"
        elif kind is CellFinished:
            self.open_cells.discard(p.get("node_id") or "")
        elif kind is ModelCallFinished and (p.get("data") or {}).get("role") == "sub":
            self.subcalls += 1
            self.doing = f"sub-call {self.subcalls}{where}"
        elif kind is RunStarted and depth:
            self.child_runs += 1
            self.doing = f"child run {self.child_runs} (depth {depth})"

    def line(self) -> str:
        """``"iteration 2: running a cell · 3 sub-calls · 4,221 tokens · $0.0012"``."""
        parts = [self.doing]
        if self.subcalls:
            parts.append(f"{self.subcalls} sub-call{'s' * (self.subcalls != 1)}")
        if self.child_runs:
            parts.append(f"{self.child_runs} child run{'s' * (self.child_runs != 1)}")
        parts.append(f"{self.tokens:,} tokens")
        parts.append(f"${self.cost_usd:.4f}")
        return " · ".join(parts)


_CITATION = re.compile(r"(?<![\w/.-])([\w.-]+(?:/[\w.-]+)*\.\w+):(\d+)(?:-(\d+))?")


def citations(answer: str | None, workspace: str | Path) -> list[dict[str, Any]]:
    """The ``path:line`` (or ``path:line-line``) references in ``answer`` that name a file
    inside ``workspace``, in order, each once: ``{"path" (as written, relative),
    "line" (1-based), "end_line" (or None), "uri" ("file:///abs/path#L12")}``. References
    to files that do not exist (or outside the workspace) are left out."""
    if not answer:
        return []
    root = Path(workspace).resolve()
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for match in _CITATION.finditer(answer):
        rel, line = match.group(1), int(match.group(2))
        target = (root / rel).resolve()
        if (rel, line) in seen or not target.is_relative_to(root) or not target.is_file():
            continue
        seen.add((rel, line))
        end = int(match.group(3)) if match.group(3) else None
        found.append(
            {"path": rel, "line": line, "end_line": end, "uri": f"{target.as_uri()}#L{line}"}
        )
    return found


def ending(status: dict[str, Any]) -> str:
    """How a finished task ended, for a person: ``"completed"``, or for a run a budget
    stopped, ``"partial answer: the max_iterations budget ended the run"``; a failure's
    error."""
    state = status.get("status") or "finished"
    if state == "completed":
        return "completed"
    if state.startswith("max_"):
        label = "partial answer" if status.get("answer") else "no answer"
        return f"{label}: the {state} budget ended the run"
    error = status.get("error")
    return f"{state}: {error}" if error else state

"""``$/progress`` for clients that support it: one work-done progress per task.

A client gets progress when it announced ``window.workDoneProgress`` in ``initialize`` (for
the tasks its ``progress`` mode selects: ``"all"`` tasks, only its ``"own"``, or ``"none"``),
or when it put a ``workDoneToken`` on its ``rlmd.task.start`` request (that task only, with
the client's token). Server-created tokens are ``"rlmd-<run id>"`` and need the client to
answer ``window/workDoneProgress/create``; a client that does not answer within
:data:`CREATE_TIMEOUT_S` gets no progress for that task. Progress is cancellable: the
client's ``window/workDoneProgress/cancel`` cancels the task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lsprotocol import types

log = logging.getLogger("rlmd.server")

CREATE_TIMEOUT_S = 10.0
REPORT_EVERY_S = 0.25
"""At most one report per task per this many seconds."""


def _title(status: dict[str, Any]) -> str:
    q = " ".join(str(status.get("question") or "").split())
    return f"rlmd: {q[:60]}{'…' if len(q) > 60 else ''}"


def _message(status: dict[str, Any]) -> str:
    if status.get("state") == "queued":
        pos = status.get("queue_position")
        return f"queued{f' (position {pos})' if pos else ''}"
    u = status.get("usage") or {}
    tokens = int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0))
    return (
        f"iteration {status.get('iterations') or 0} · {u.get('model_calls', 0)} model calls · "
        f"{tokens:,} tokens · ${float(u.get('cost_usd', 0.0)):.4f}"
    )


class ProgressTracker:
    """The work-done progress of one connection's tasks.

    Args:
        server: the connection's pygls ``LanguageServer`` (for ``work_done_progress``).
        connection: the connection (``id``, ``progress_mode``, ``progress_capable``).
    """

    def __init__(self, server: Any, connection: Any) -> None:
        self.server = server
        self.conn = connection
        self.tokens: dict[str, str | int] = {}
        self.by_token: dict[str | int, str] = {}
        self.state: dict[str, str] = {}
        self.claimed: dict[str, str | int] = {}
        self.last_report: dict[str, float] = {}
        self.final: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def claim(self, run_id: str, token: str | int) -> None:
        """Use the client's own ``token`` for task ``run_id``."""
        self.claimed[run_id] = token

    def run_for(self, token: str | int) -> str | None:
        """The task a progress token belongs to."""
        return self.by_token.get(token)

    def _wanted(self, status: dict[str, Any]) -> bool:
        if status["run_id"] in self.claimed:
            return True
        mode = self.conn.progress_mode
        if not self.conn.progress_capable or mode == "none":
            return False
        return mode == "all" or status.get("origin") == self.conn.id

    def on_status(self, status: dict[str, Any]) -> None:
        """Feed one ``rlmd/taskStatus`` payload."""
        run_id = status.get("run_id")
        if not isinstance(run_id, str):
            return
        st = self.state.get(run_id)
        finished = status.get("state") == "finished"
        if st is None:
            if finished or not self._wanted(status):
                return
            self._begin(run_id, status)
        elif finished:
            if st == "active":
                self._end(run_id, status)
            elif st == "creating":
                self.final[run_id] = status  # ended once the client answers the create
            else:
                self.state.pop(run_id, None)
        elif st == "active":
            now = time.monotonic()
            if now - self.last_report.get(run_id, 0.0) >= REPORT_EVERY_S:
                self.last_report[run_id] = now
                self._send(
                    run_id,
                    types.WorkDoneProgressReport(message=_message(status), cancellable=True),
                )

    def _begin(self, run_id: str, status: dict[str, Any]) -> None:
        token = self.claimed.get(run_id)
        begin = types.WorkDoneProgressBegin(
            title=_title(status), cancellable=True, message=_message(status)
        )
        if token is not None:
            self._activate(run_id, token, begin)
            return
        self.state[run_id] = "creating"
        task = asyncio.get_running_loop().create_task(self._create(run_id, begin))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, run_id: str, begin: types.WorkDoneProgressBegin) -> None:
        token = f"rlmd-{run_id}"
        try:
            await asyncio.wait_for(
                self.server.work_done_progress.create_async(token), CREATE_TIMEOUT_S
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("client %s refused progress token %s: %r", self.conn.id, token, exc)
            self.state[run_id] = "failed"
            return
        self._activate(run_id, token, begin)
        final = self.final.pop(run_id, None)
        if final is not None:
            self._end(run_id, final)

    def _activate(self, run_id: str, token: str | int, begin: types.WorkDoneProgressBegin) -> None:
        self.tokens[run_id] = token
        self.by_token[token] = run_id
        self.state[run_id] = "active"
        self.server.work_done_progress.begin(token, begin)

    def _send(self, run_id: str, value: Any) -> None:
        token = self.tokens.get(run_id)
        if token is not None:
            self.server.work_done_progress.report(token, value)

    def _end(self, run_id: str, status: dict[str, Any]) -> None:
        token = self.tokens.pop(run_id, None)
        self.state[run_id] = "ended"
        self.claimed.pop(run_id, None)
        self.last_report.pop(run_id, None)
        if token is None:
            return
        self.by_token.pop(token, None)
        answer = " ".join(str(status.get("answer") or "").split())[:100]
        message = f"{status.get('status')}" + (f": {answer}" if answer else "")
        self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
        self.server.work_done_progress.tokens.pop(token, None)
        # forget finished tasks so the maps stay small
        self.state.pop(run_id, None)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

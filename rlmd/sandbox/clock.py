"""The cell's clock: which host calls a cell is blocked on, and the rule for its time limit.

The rule (issue 11 #16): a cell's own time limit (``timeout_s``, the ``wall_s`` limit and
the run's ``cell_timeout_s``) counts the time the cell's code runs and the time it waits on
the user's host tools, **not** the time it is blocked on sub-calls (``llm_query``, ``llm_map``,
``rlm_query`` and their batched forms): those are bounded by the models' own timeouts and
the run's budget, and a cell that only waits on slow sub-calls must not lose their results.
CPU time the kernel uses while a sub-call is in flight
counts again where the backend can read it (``CallClock.cpu_s``: the subprocess backend).
The run's wall-clock budget still bounds the whole cell, sub-calls included
(``wall_limit_s``). The system prompt tells the model both limits.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

SUB_CALLS = frozenset(
    {"llm_query", "llm_query_batched", "llm_map", "rlm_query", "rlm_query_batched"}
)
"""Host functions whose waiting time does not count toward the cell's own limit."""


class CallClock:
    """Host calls in flight for one kernel: seconds blocked on sub-calls, and the user tools
    being waited on (named in a timeout message).

    Args:
        cpu_s: the kernel's CPU seconds so far (``None`` when unknown), where the backend can
            read them. CPU the kernel uses while a sub-call is in flight is not "blocked":
            a thread keeping one ``llm_query`` in flight let the main thread compute 12 s
            past a 2 s cell limit (review14). A kernel that only waits uses next to none.
    """

    def __init__(self, cpu_s: Callable[[], float | None] | None = None) -> None:
        self._ids = itertools.count()
        self._subcalls = 0
        self._since = 0.0
        self._blocked = 0.0
        self._tools: dict[int, str] = {}
        self.cpu_s = cpu_s
        self._cpu_since: float | None = None

    def _cpu(self) -> float | None:
        if self.cpu_s is None:
            return None
        try:
            return self.cpu_s()
        except (OSError, ValueError):  # the kernel is gone, or /proc said something odd
            return None

    def _busy(self, wall_s: float) -> float:
        """Kernel CPU seconds since the open blocked interval began, at most ``wall_s``
        (threads spinning at once count as one)."""
        now = self._cpu()
        if now is None or self._cpu_since is None:
            return 0.0
        return min(max(0.0, now - self._cpu_since), wall_s)

    def started(self, fn: str, args: dict[str, Any]) -> int:
        """Note one host call starting; returns the token for :meth:`ended`."""
        token = next(self._ids)
        if fn in SUB_CALLS:
            if self._subcalls == 0:
                self._since = time.monotonic()
                self._cpu_since = self._cpu()
            self._subcalls += 1
        elif fn == "tool":
            self._tools[token] = str(args.get("name"))
        return token if fn not in SUB_CALLS else -1 - token

    def ended(self, token: int) -> None:
        """Note the call of ``token`` ending (however it ended)."""
        if token < 0:
            self._subcalls -= 1
            if self._subcalls == 0:
                wall = time.monotonic() - self._since
                self._blocked += wall - self._busy(wall)
        else:
            self._tools.pop(token, None)

    def blocked_s(self) -> float:
        """Seconds spent with at least one sub-call in flight and the kernel not computing,
        so far."""
        if not self._subcalls:
            return self._blocked
        wall = time.monotonic() - self._since
        return self._blocked + wall - self._busy(wall)

    def waiting_tools(self) -> list[str]:
        """Names of the user tools in flight (oldest first)."""
        return list(dict.fromkeys(self._tools.values()))


class CellTimeout(TimeoutError):
    """A cell ran past a limit: ``limit_s``, the cell's own (``wall`` false) or the run's
    wall clock (``wall`` true)."""

    def __init__(self, limit_s: float, *, wall: bool) -> None:
        super().__init__(f"cell ran past {limit_s:g} s")
        self.limit_s, self.wall = limit_s, wall


async def wait_cell(
    done: Awaitable[Any],
    clock: CallClock,
    timeout_s: float | None,
    wall_limit_s: float | None = None,
) -> Any:
    """Wait for ``done`` under the rule above and return its result (a timeout does not
    cancel it: the caller stops the cell).

    Raises:
        CellTimeout: the cell used ``timeout_s`` of its own time (sub-calls not counted), or
            ``wall_limit_s`` of elapsed time (everything counted).
    """
    fut = asyncio.ensure_future(done)
    if timeout_s is None and wall_limit_s is None:
        return await asyncio.shield(fut)  # cancelling the caller leaves the cell to stop
    t0, blocked0 = time.monotonic(), clock.blocked_s()
    while True:
        elapsed = time.monotonic() - t0
        left = []
        if timeout_s is not None:
            left.append(timeout_s - (elapsed - (clock.blocked_s() - blocked0)))
        if wall_limit_s is not None:
            left.append(wall_limit_s - elapsed)
        if min(left) <= 0:
            if wall_limit_s is not None and elapsed >= wall_limit_s:
                raise CellTimeout(wall_limit_s, wall=True)
            assert timeout_s is not None
            raise CellTimeout(timeout_s, wall=False)
        # Never cancels ``fut`` (no shield needed); time blocked on sub-calls meanwhile moves
        # the deadline, so look again when it passes.
        await _until_done(fut, min(left))
        if fut.done():
            return fut.result()


async def _until_done(fut: asyncio.Future[Any], timeout: float) -> None:
    """Wait until ``fut`` is done or ``timeout`` seconds passed, whichever comes first,
    without cancelling ``fut``: ``asyncio.wait((fut,), timeout=...)`` minus its per-call
    set, task and callback bookkeeping (this runs once per cell)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    handle = loop.call_later(timeout, wake)
    fut.add_done_callback(wake)
    try:
        await waiter
    finally:
        handle.cancel()
        fut.remove_done_callback(wake)


def timeout_cause(clock: CallClock, exc: BaseException | None = None) -> str:
    """Why a cell timed out, for the model: the run's wall clock (``exc`` a wall
    :class:`CellTimeout`) and the host tools it was waiting on (empty: its own code)."""
    why = "the run's wall-clock budget ran out" if getattr(exc, "wall", False) else ""
    tools = clock.waiting_tools()
    if not tools:
        return why
    names = ", ".join(repr(t) for t in tools)
    return (why + "; " if why else "") + (
        f"it was waiting on the host tool {names}, which did not return in time "
        "(the tool is abandoned; do not call it again with the same arguments)"
    )

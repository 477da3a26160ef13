"""Where a tree's work runs: the executor seam. A run starts every child run (``rlm_query``)
and every batch of sub-calls (``llm_query_batched``, ``rlm_query_batched``) through its tree's
:class:`Executor`. This module's :class:`LocalExecutor` is the default and today's behaviour:
everything in this event loop. A cluster executor (:mod:`rlmd.cluster`) places child runs on
other machines; the engine itself knows nothing of any cluster engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from rlmd.engine.config import RunResult
from rlmd.sandbox.base import CallError

if TYPE_CHECKING:
    from rlmd.engine.host import ChildRequest
    from rlmd.engine.metered import Runtime

ChildStarter = Callable[["ChildRequest"], Awaitable[RunResult]]
"""Runs a child run (``rlm_query``) to its end (the simple form of the seam; wrap it in
:class:`StarterExecutor`)."""


class Executor(Protocol):
    """Runs a tree's child runs and batches. One executor may serve many trees at once (the
    daemon's); what belongs to one tree comes in ``rt``."""

    kind: str
    """``"local"``, ``"ray"``...: recorded nowhere, shown by ``rlmd doctor`` and benchmarks."""

    async def start_child(self, rt: Runtime, request: ChildRequest) -> RunResult:
        """Run ``request``'s child run to its end, its events on ``rt.bus``, its usage added
        into ``request.parent_usage`` and spent from ``rt.ledger``; returns its result.
        Raises ``asyncio.CancelledError`` when cancelled (the child is cancelled too)."""
        ...

    async def run_batch(self, calls: list[Awaitable[str]], limit: int) -> list[str]:
        """Run the calls of one batched call (at most ``limit`` at a time); a failed slot
        holds ``"Error: ..."`` (a :class:`CallError`'s message), never failing the batch."""
        ...


async def gather_bounded(calls: list[Awaitable[str]], limit: int) -> list[str]:
    """Await ``calls`` concurrently, at most ``limit`` at a time, in order; a
    :class:`CallError` becomes its slot's ``"Error: ..."`` text."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(call: Awaitable[str]) -> str:
        async with gate:
            try:
                return await call
            except CallError as exc:
                return f"Error: {exc}"

    return list(await asyncio.gather(*(one(c) for c in calls)))


class LocalExecutor:
    """Everything in this event loop: a child run in a fresh REPL of the tree's sandbox
    factory (:func:`rlmd.engine.loop.run_child_here`), batches gathered here."""

    kind = "local"

    async def start_child(self, rt: Runtime, request: ChildRequest) -> RunResult:
        from rlmd.engine.loop import run_child_here

        return await run_child_here(rt, request)

    async def run_batch(self, calls: list[Awaitable[str]], limit: int) -> list[str]:
        return await gather_bounded(calls, limit)


class StarterExecutor(LocalExecutor):
    """The local executor with child runs started by ``start_child`` (a plain function)."""

    def __init__(self, start_child: ChildStarter) -> None:
        self._start = start_child
        self.kind = "custom"

    async def start_child(self, rt: Runtime, request: ChildRequest) -> RunResult:
        return await self._start(request)

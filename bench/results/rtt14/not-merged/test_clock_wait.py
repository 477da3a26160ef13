"""``wait_cell`` on a kernel channel's ``ran`` future (a :class:`LinkedFuture`): woken in
the loop turn the frame arrives in, and the same results as on a plain future."""

from __future__ import annotations

import asyncio

import pytest

from rlmd.sandbox.channel import KernelDied, LinkedFuture
from rlmd.sandbox.clock import CallClock, CellTimeout, wait_cell


async def _turns_until_woken(fut: asyncio.Future[None]) -> int:
    """Loop turns between ``fut``'s result and the return of a ``wait_cell`` on it."""
    turns = 0
    waiting = asyncio.ensure_future(wait_cell(fut, CallClock(), 30.0))
    await asyncio.sleep(0)  # the wait has started
    fut.set_result(None)
    while not waiting.done():
        turns += 1
        await asyncio.sleep(0)
    await waiting
    return turns


async def test_a_linked_future_wakes_the_wait_a_loop_turn_sooner() -> None:
    loop = asyncio.get_running_loop()
    plain = await _turns_until_woken(loop.create_future())
    linked = await _turns_until_woken(LinkedFuture(loop=loop))
    assert linked == plain - 1


@pytest.mark.parametrize("kind", ["plain", "linked"])
async def test_the_same_outcomes_either_way(kind: str) -> None:
    loop = asyncio.get_running_loop()

    def make() -> asyncio.Future[None]:
        return loop.create_future() if kind == "plain" else LinkedFuture(loop=loop)

    done = make()
    done.set_result(None)
    assert await wait_cell(done, CallClock(), 30.0) is None  # done before the wait

    failed = make()
    loop.call_soon(failed.set_exception, KernelDied())
    with pytest.raises(KernelDied):
        await wait_cell(failed, CallClock(), 30.0)

    slow = make()
    with pytest.raises(CellTimeout):
        await wait_cell(slow, CallClock(), 0.05)
    assert not slow.done()  # a timeout does not cancel it
    slow.set_result(None)  # and nothing waits on it any more

    waited = make()
    waiter = asyncio.ensure_future(wait_cell(waited, CallClock(), 30.0))
    await asyncio.sleep(0)
    waiter.cancel()  # the caller gives up: the future is left as it was
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not waited.done()
    waited.set_result(None)

"""A cell's time (issue 11 #15, #16): a hung synchronous tool ends the cell, not the run; time
blocked on sub-calls is not counted in the cell's limit; the model is told the limit."""

from __future__ import annotations

import asyncio
import threading

import pytest
from helpers.scripted import last_user, repl, scripted_registry, turn_of

from rlmd.engine import Budget, RunConfig, run_task

pytestmark = pytest.mark.timeout(120)


def config(**kw) -> RunConfig:
    return RunConfig(
        root_model="root", sub_model="sub", budget=Budget(**kw.pop("budget", {})), **kw
    )


async def go(registry, cfg):
    try:
        return await run_task("q", "ctx", cfg, get_model=registry.get)
    finally:
        await registry.aclose()


async def test_a_hung_synchronous_tool_ends_the_cell_naming_the_tool_not_the_run():
    release = threading.Event()
    returned = []

    def fetch_ticket(key):  # a user's tool that never answers (a dead server, a lock)
        release.wait(60)
        returned.append(key)
        return "late"

    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("t = fetch_ticket('T-1')\nprint(t)")
        return repl("FINAL('gave up on the tool')")

    cfg = config(tools={"fetch_ticket": fetch_ticket}, budget={"cell_timeout_s": 1.5})
    try:
        result = await asyncio.wait_for(go(scripted_registry(root=root, sub=root), cfg), 60)
        assert not returned  # the run went on while the tool still hung
        assert result.status == "completed" and result.answer == "gave up on the tool"
        fed_back = last_user(seen[1])
        assert "timed out" in fed_back and "'fetch_ticket'" in fed_back
    finally:
        release.set()


async def test_a_synchronous_tool_does_not_block_the_event_loop():
    ticks = []

    async def ticker():
        while True:
            ticks.append(1)
            await asyncio.sleep(0.05)

    during = []

    def slow_sum(a, b):
        before = len(ticks)
        threading.Event().wait(1.0)  # blocking, as real tools are (I/O, locks)
        during.append(len(ticks) - before)
        return a + b

    def root(messages):
        if turn_of(messages) == 0:
            return repl("print(slow_sum(2, 3))")
        return repl("FINAL('ok')")

    task = asyncio.ensure_future(ticker())
    try:
        result = await go(
            scripted_registry(root=root, sub=root), config(tools={"slow_sum": slow_sum})
        )
    finally:
        task.cancel()
    assert result.status == "completed"
    assert during and during[0] > 3  # the loop ran while the tool blocked for a second


async def test_a_cell_waiting_on_slow_sub_calls_keeps_their_results():
    async def sub(messages):
        await asyncio.sleep(4.0)  # twice the cell's limit
        return "SLOW-ANSWER"

    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("a = llm_query('one')\nb = llm_query_batched(['x', 'y'])\nprint(a, b)")
        return repl("FINAL(a)")

    # 2 s leaves a loaded machine ample time for the cell's own few milliseconds
    cfg = config(budget={"cell_timeout_s": 2.0})
    result = await go(scripted_registry(root=root, sub=sub), cfg)
    assert result.status == "completed" and result.answer == "SLOW-ANSWER"
    assert "SLOW-ANSWER ['SLOW-ANSWER', 'SLOW-ANSWER']" in last_user(seen[1])
    # the system prompt states the rule and the limit
    system = seen[0][0]["content"]
    assert "A block may run 2 seconds of its own time" in system
    assert "waiting on llm_query, llm_map or rlm_query is not counted" in system


async def test_the_run_wall_clock_still_cuts_a_cell_waiting_on_sub_calls():
    async def sub(messages):
        await asyncio.sleep(30)
        return "never"

    def root(messages):
        return repl("a = llm_query('one')\nFINAL(a)")

    cfg = config(budget={"cell_timeout_s": 1.0, "max_seconds": 2.0})
    result = await asyncio.wait_for(go(scripted_registry(root=root, sub=sub), cfg), 60)
    assert result.status != "completed" or result.answer != "never"


async def test_a_cell_computing_while_a_thread_keeps_a_sub_call_in_flight_times_out():
    """Review14: time with any sub-call in flight was not counted, so a thread calling
    ``llm_query`` in a loop let the main thread compute 12 s past a 2 s cell limit (and
    forever with ``while True``). CPU the kernel (subprocess sandbox) uses meanwhile now
    counts; a cell that only waits on its sub-calls keeps them as before."""
    spin = (
        "import threading, time\n"
        "def keep():\n"
        "    while True:\n"
        "        llm_query('tick')\n"
        "threading.Thread(target=keep, daemon=True).start()\n"
        "t0 = time.time()\n"
        "while time.time() - t0 < 30:\n"
        "    pass\n"
        "print('ran on')"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        return repl(spin) if turn_of(messages) == 0 else repl("FINAL('stopped')")

    async def sub(messages):
        await asyncio.sleep(0.2)
        return "tock"

    cfg = config(sandbox="subprocess", budget={"cell_timeout_s": 2, "max_iterations": 3})
    result = await go(scripted_registry(root=root, sub=sub), cfg)
    assert result.answer == "stopped", result.error
    feedback = last_user(seen[1])
    assert "ran on" not in feedback and "KeyboardInterrupt" in feedback, feedback[-600:]

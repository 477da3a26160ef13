"""Session 20, issue 16 item 2: does ``asyncio.to_thread`` free the event loop while CPython's
json module works on a large value? A ticker sleeps 5 ms in a loop; the longest gap between its
wake-ups, minus 5 ms, is how long the loop was held while the thread ran the call.
usage: python bench/s20/gil_stall.py   (~2 GB of memory, ~20 s)"""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any


async def stall(fn: Callable[[Any], Any], arg: Any) -> tuple[float, float]:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last - 0.005)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    await asyncio.to_thread(fn, arg)
    took = time.perf_counter() - t0
    done.set()
    await ticker
    return took, max(gaps)


async def main() -> None:
    text = json.dumps("x" * 100_000_000)
    many = json.dumps({str(i): [i, "v"] for i in range(1_000_000)})
    for name, fn, arg in (
        ("json.loads, a 100 MB string", json.loads, text),
        ("json.loads, a 1M-item dict", json.loads, many),
        ("json.dumps, a 1M-item dict", json.dumps, json.loads(many)),
    ):
        took, held = await stall(fn, arg)
        print(f"{name}: call {took * 1000:.0f} ms, longest loop stall {held * 1000:.0f} ms")


asyncio.run(main())

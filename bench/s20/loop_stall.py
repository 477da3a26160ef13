"""Session 20, issue 16 item 2: how long a subprocess sandbox's ``get_variable`` of a large
string holds the host's event loop, with big frames decoded on a worker thread (now) and on
the loop (BIG_FRAME raised past the frame, as before). A ticker sleeps 5 ms in a loop; the
longest gap between its wake-ups, minus 5 ms, is the stall. Alternating, N rounds.
Needs commit 01d6ea9 (``rlmd.sandbox.channel.BIG_FRAME``), reverted in 665ea62: on later code
both rows run the same path.
usage: python bench/s20/loop_stall.py [MB] [ROUNDS]"""

import asyncio
import statistics
import sys
import time

from rlmd.sandbox import channel, create_sandbox

MB = int(sys.argv[1]) if len(sys.argv) > 1 else 100
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


async def stall_of(sb, big_frame: int) -> tuple[float, float]:
    channel.BIG_FRAME = big_frame
    gaps: list[float] = []
    stop = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last - 0.005)
            last = now

    t = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    value = await sb.get_variable("big")
    took = time.perf_counter() - t0
    stop = True
    await t
    assert len(value) == MB * 1_000_000
    return max(gaps), took


async def main() -> None:
    sb = create_sandbox("subprocess")

    async def no_calls(fn: str, args: dict) -> None:
        raise RuntimeError("no host calls here")

    await sb.start(no_calls)
    try:
        await sb.execute(f"big = 'x' * {MB * 1_000_000}")
        rows: dict[str, list[tuple[float, float]]] = {"thread": [], "loop": []}
        for _ in range(ROUNDS):
            rows["thread"].append(await stall_of(sb, 1024 * 1024))
            rows["loop"].append(await stall_of(sb, 1 << 62))
        for name, got in rows.items():
            stalls = [s * 1000 for s, _ in got]
            calls = [c * 1000 for _, c in got]
            print(
                f"{name:6} longest stall ms: {' '.join(f'{s:.0f}' for s in stalls)} "
                f"(median {statistics.median(stalls):.0f}); get_variable ms: "
                f"{' '.join(f'{c:.0f}' for c in calls)}"
            )
    finally:
        await sb.close()


asyncio.run(main())

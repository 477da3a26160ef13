"""Spare-ready hardened starts (create + start + ``x = 1``), one child process per rlmd
checkout, alternating: ``python spare_ab.py N REPS ROOT...`` (N starts per child)."""

import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import asyncio, json, sys, time
from rlmd.sandbox import create_sandbox
async def host(fn, args): return None
async def main(n):
    out = []
    for i in range(n + 2):  # the first start makes no spare, the second makes one
        t0 = time.perf_counter()
        box = create_sandbox("subprocess")
        await box.start(host)
        r = await box.execute("x = 1")
        out.append(time.perf_counter() - t0)
        assert r.error is None
        await box.close()
        await asyncio.sleep(0.4)
    print(json.dumps(out[2:]))
asyncio.run(main(int(sys.argv[1])))
"""


def main() -> None:
    n, reps, roots = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    res: dict[str, list[float]] = {r: [] for r in roots}
    for rep in range(reps):
        for r in roots if rep % 2 == 0 else roots[::-1]:
            env = dict(os.environ, PYTHONPATH=r)
            cmd = [sys.executable, "-c", CHILD, str(n)]
            out = subprocess.run(cmd, env=env, cwd="/tmp", capture_output=True, text=True)
            res[r].append(statistics.median(json.loads(out.stdout)))
    for r in roots:
        each = " ".join(f"{x * 1000:.1f}" for x in res[r])
        print(
            f"{r:30s} per-child medians ms: {each}  median {statistics.median(res[r]) * 1000:.2f}"
        )
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()

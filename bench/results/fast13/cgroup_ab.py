"""Is the cgroup join on the no-spare start's critical path? Hardened starts with the default
limits (memory + pids cgroups) against the same bwrap sandbox without limits (no cgroup),
alternating, for the checkout on PYTHONPATH: create + start + ``x = 1``, medians of N."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

from rlmd.sandbox import create_sandbox
from rlmd.sandbox.limits import Limits

NO_LIMITS = Limits(
    wall_s=None, cpu_s=None, memory_bytes=None, processes=None, open_files=None,
    file_size_bytes=None,
)  # fmt: skip


async def host(fn, args):
    return "ok"


async def once(**options) -> float:
    t0 = time.perf_counter()
    box = create_sandbox("subprocess", spare_kernel=False, **options)
    await box.start(host)
    r = await box.execute("x = 1")
    dt = time.perf_counter() - t0
    assert r.error is None, r.error
    await box.close()
    await asyncio.sleep(0.05)
    return dt


async def main(n: int) -> None:
    await once()
    await once(limits=NO_LIMITS)
    got: dict[str, list[float]] = {"cgroups": [], "no limits": []}
    for i in range(n):
        for label in ("cgroups", "no limits") if i % 2 == 0 else ("no limits", "cgroups"):
            opts = {} if label == "cgroups" else {"limits": NO_LIMITS}
            got[label].append(await once(**opts))
    print(f"{sys.path[0] or os.environ.get('PYTHONPATH')}: load {os.getloadavg()[0]:.1f}, n={n}")
    for label, s in got.items():
        print(
            f"  {label:10s} median {statistics.median(s) * 1e3:6.1f} ms  min {min(s) * 1e3:6.1f} ms"
        )


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 16))

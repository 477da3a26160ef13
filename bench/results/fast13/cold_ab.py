"""(fast12's script; fast13 added the host process's own CPU per start.)
Paired A/B of the hardened no-spare cold start (create + start + ``x = 1``).

    python cold_ab.py BEFORE_ROOT AFTER_ROOT [REPS] [N]

Each repetition runs one child per checkout (order flipped every repetition), each child
times N cold starts after one unmeasured start; a ``python -I -S -c pass`` floor is timed
between repetitions. Prints medians, the paired after/before ratio per repetition, and the
load at each start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import asyncio, json, resource, sys, time
from rlmd.sandbox import create_sandbox

def own():
    a = resource.getrusage(resource.RUSAGE_SELF)
    return a.ru_utime + a.ru_stime

def cpu():
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

async def host(fn, args):
    return "ok"

async def main(n):
    out, kcpu = [], []
    for i in range(n + 1):
        if i == 1:
            await asyncio.sleep(0.3)
            c0, h0 = cpu(), own()
        t0 = time.perf_counter()
        box = create_sandbox("subprocess", spare_kernel=False)
        await box.start(host)
        r = await box.execute("x = 1")
        dt = time.perf_counter() - t0
        assert r.error is None, r.error
        pid = box.kernel.kernel_pid()
        with open(f"/proc/{pid}/schedstat") as f:  # ns on a CPU: wrapper set-up + setpriv + python
            run_ns = int(f.read().split()[0])
        await box.close()
        await asyncio.sleep(0.05)
        if i:
            out.append(dt)
            kcpu.append(run_ns / 1e9)
    await asyncio.sleep(0.5)  # the last kernel reaped: its CPU counted
    print(json.dumps({"wall": out, "cpu": (cpu() - c0) / n, "host": (own() - h0) / n, "kernel": kcpu}))

asyncio.run(main(int(sys.argv[1])))
"""


def child(root: str, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{root}:{root}/tui"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(n)], env=env, cwd=root, check=True, capture_output=True
    )
    return json.loads(out.stdout)


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    got: dict[str, list[float]] = {"before": [], "after": []}
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    kern: dict[str, list[float]] = {"before": [], "after": []}
    host: dict[str, list[float]] = {"before": [], "after": []}
    floor: list[float] = []
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} load {os.getloadavg()}")
    for rep in range(reps):
        pair = [("before", before), ("after", after)]
        meds = {}
        for label, root in pair if rep % 2 == 0 else pair[::-1]:
            load = os.getloadavg()[0]
            res = child(root, n)
            s = res["wall"]
            got[label] += s
            cpus[label].append(res["cpu"])
            kern[label] += res["kernel"]
            host[label].append(res["host"])
            meds[label] = statistics.median(s)
            print(
                f"rep {rep} {label:6s} load {load:4.1f} median {meds[label] * 1e3:6.1f} ms "
                f"min {min(s) * 1e3:6.1f} ms"
            )
        print(
            f"rep {rep} after/before wall {meds['after'] / meds['before']:.2f} "
            f"CPU {cpus['after'][-1] / cpus['before'][-1]:.2f}"
        )
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
            floor.append(time.perf_counter() - t0)
    b, a, f = (statistics.median(x) for x in (got["before"], got["after"], floor))
    print(
        f"ALL before {b * 1e3:.1f} ms ({b / f:.1f}x floor) after {a * 1e3:.1f} ms "
        f"({a / f:.1f}x floor) after/before {a / b:.2f}; floor {f * 1e3:.1f} ms; "
        f"min before {min(got['before']) * 1e3:.1f} after {min(got['after']) * 1e3:.1f}"
    )
    cb, ca = statistics.median(cpus["before"]), statistics.median(cpus["after"])
    print(
        f"CPU per start: before {cb * 1e3:.1f} ms after {ca * 1e3:.1f} ms after/before {ca / cb:.2f}"
    )
    kb, ka = statistics.median(kern["before"]), statistics.median(kern["after"])
    print(
        f"kernel process on CPU to the first cell's end: before {kb * 1e3:.1f} ms after "
        f"{ka * 1e3:.1f} ms after/before {ka / kb:.2f}"
    )
    hb, ha = statistics.median(host["before"]), statistics.median(host["after"])
    print(
        f"host process CPU per start (its own threads only): before {hb * 1e3:.1f} ms after "
        f"{ha * 1e3:.1f} ms after/before {ha / hb:.2f}"
    )
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} load {os.getloadavg()}")


if __name__ == "__main__":
    main()

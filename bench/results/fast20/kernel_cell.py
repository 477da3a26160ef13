"""The kernel's CPU per cell in a warm subprocess sandbox (schedstat of its threads, ns) and
the host's (thread CPU of the loop), for a bare cell, a cell with one llm_query and bench 3's
cell (a slice, three llm_query, a print), answered by an instant handler.
    PYTHONPATH=<checkout> python kernel_cell.py N"""
import asyncio, os, statistics, sys, time
from rlmd.sandbox import create_sandbox

N = int(sys.argv[1])
CELLS = {
    "bare": "x = 1",
    "print": "print('iteration', 1)",
    "one llm_query": "a = llm_query('hi')",
    "bench 3 cell": 'part = context[0:100]\na0 = llm_query("Q 0.0 about: " + part)\n'
                    'a1 = llm_query("Q 0.1 about: " + part)\na2 = llm_query("Q 0.2 about: " + part)\n'
                    'print("iteration 0", len(part), a0, a1, a2)',
}

def kns(pid):
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            t += int(fh.read().split()[0])
    return t

async def handler(fn, args):
    return "ok"

async def main():
    sb = create_sandbox("subprocess")
    await sb.start(handler)
    await sb.load_context("The quick brown fox jumps over the lazy dog. " * 200)
    pid = (await sb.health())["host_pid"]
    res = {name: ([], []) for name in CELLS}
    for i in range(N + 20):
        for name, code in CELLS.items():
            k0, h0 = kns(pid), time.thread_time_ns()
            r = await sb.execute(code)
            if i >= 20:
                res[name][0].append(kns(pid) - k0); res[name][1].append(time.thread_time_ns() - h0)
            assert r.error is None, r.error
    for name, (k, hst) in res.items():
        print(f"{name:15s} kernel {statistics.median(k) / 1e3:7.1f} us  host {statistics.median(hst) / 1e3:7.1f} us")
    await sb.close()
    print("load", open("/proc/loadavg").read().split()[0])
asyncio.run(main())

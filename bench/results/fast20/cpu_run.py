"""Bench 3's subprocess + store run, N runs in this process: per run, the host's CPU
(process_time, every thread of this process) and the kernel's (its /proc/<pid>/stat user+sys
at the run's first and last cell, and RUSAGE_CHILDREN growth: whole kernel lifetimes reaped,
its start-up as a spare included); medians. Optional cProfile of the host over the runs.
    PYTHONPATH=<checkout>:<checkout>/bench python cpu_run.py N [subprocess|inprocess] [--prof OUT]"""
import asyncio, os, resource, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
from rlmd.engine.events import CellFinished, CellStarted

N = int(sys.argv[1]); SANDBOX = sys.argv[2] if len(sys.argv) > 2 else "subprocess"
PROF = sys.argv[sys.argv.index("--prof") + 1] if "--prof" in sys.argv else None
TICK = os.sysconf("SC_CLK_TCK")

def kcpu(pid):
    with open(f"/proc/{pid}/stat", "rb") as fh:
        f = fh.read().rpartition(b")")[2].split()
    return sum(int(x) for x in f[11:13]) / TICK

def kns(pid):
    """CPU ns of every thread of pid so far (schedstat: ns resolution)."""
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            t += int(fh.read().split()[0])
    return t / 1e9

def kernel_pids():
    """python kernel processes that are our descendants (wrapper's child)."""
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit(): continue
        try:
            st = open(f"/proc/{d}/stat").read()
            cmd = open(f"/proc/{d}/cmdline", "rb").read()
        except OSError: continue
        if b"kernel/main.py" in cmd or b"_rlmd_kernel" in cmd:
            out.append(int(d))
    return out

from rlmd.sandbox.session import SandboxSession
KSEEN = {}
_close, _exec = SandboxSession.close, SandboxSession.execute
async def close(self):
    k = self._kernel
    if k is not None and hasattr(k, "cpu_s"):
        try:
            KSEEN["end"] = kns(k.kernel_pid()); KSEEN["wrap"] = kns(k.pid)
        except OSError: pass
    return await _close(self)
async def execute(self, code, **kw):
    k = self._kernel
    if "start" not in KSEEN and k is not None and hasattr(k, "cpu_s"):
        KSEEN["start"] = kns(k.kernel_pid())
    return await _exec(self, code, **kw)
SandboxSession.close, SandboxSession.execute = close, execute

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    rows = []
    prof = None
    if PROF:
        import cProfile; prof = cProfile.Profile(time.thread_time)
    for i in range(N + 3):
        if prof and i == 3: prof.enable()
        KSEEN.clear()
        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c, w = time.process_time(), time.perf_counter()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=db)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        await asyncio.sleep(0.3)  # let the closed kernel be reaped
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        kid = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
        rows.append((r.to_answer_s, wall, cpu, kid, KSEEN.get("start", 0), KSEEN.get("end", 0) - KSEEN.get("start", 0), KSEEN.get("wrap", 0)))
        assert not r.store_errors and r.result.status == "completed"
    if prof:
        prof.disable(); prof.dump_stats(PROF)
    rows = rows[3:]
    m = lambda j: statistics.median(x[j] for x in rows) * 1000
    print(f"{SANDBOX} n={N} answer {m(0):.2f} ms | call {m(1):.2f} | host cpu {m(2):.2f} ms "
          f"| reaped {m(3):.2f} ms | kernel before 1st cell {m(4):.1f} ms, in run {m(5):.1f} ms, wrapper {m(6):.1f} ms | load {open('/proc/loadavg').read().split()[0]}", flush=True)
asyncio.run(main())

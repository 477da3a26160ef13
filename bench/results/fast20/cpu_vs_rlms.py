"""CPU per run of bench 3's workload, alternating in one process: rlms local
(``RLM(...).completion()``, process CPU of every thread) vs rlmd in-process + store and rlmd
subprocess + store (host process CPU; for subprocess also the kernel's threads during the
run, and its whole life's CPU at close, its start-up as a spare included).
    PYTHONPATH=<checkout>:<checkout>/bench python cpu_vs_rlms.py N"""
import asyncio, os, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
from rlmd.sandbox.session import SandboxSession

N = int(sys.argv[1])

def kns(pid):
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            t += int(fh.read().split()[0])
    return t / 1e9

KSEEN = {}
_close, _exec = SandboxSession.close, SandboxSession.execute
async def close(self):
    k = self._kernel
    if k is not None and hasattr(k, "kernel_pid"):
        try: KSEEN["end"] = kns(k.kernel_pid()); KSEEN["wrap"] = kns(k.pid)
        except (OSError, TypeError): pass
    return await _close(self)
async def execute(self, code, **kw):
    k = self._kernel
    if "start" not in KSEEN and k is not None and hasattr(k, "kernel_pid"):
        try: KSEEN["start"] = kns(k.kernel_pid())
        except (OSError, TypeError): pass
    return await _exec(self, code, **kw)
SandboxSession.close, SandboxSession.execute = close, execute

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    rscript, _ = h.make_script([3] * 10 + [2] * 10, "rlms")
    db = Path(tempfile.mkdtemp()) / "w.db"
    rows = {"rlms": [], "inprocess": [], "subprocess": []}
    load0 = open('/proc/loadavg').read().split()[0]
    for i in range(N + 2):
        for name in (("rlms", "inprocess", "subprocess") if i % 2 else ("subprocess", "inprocess", "rlms")):
            KSEEN.clear()
            c, w = time.process_time(), time.perf_counter()
            if name == "rlms":
                res = h.rlms_whole_run(rscript, h.SMALL_CONTEXT)
                ans = res[0].execution_time
            else:
                r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=name, store_path=db)
                assert r.result.status == "completed" and not r.store_errors
                ans = r.to_answer_s
            cpu = time.process_time() - c
            if i >= 2:
                rows[name].append((cpu, KSEEN.get("end", 0) - KSEEN.get("start", 0), KSEEN.get("end", 0) + KSEEN.get("wrap", 0), ans))
    print(f"n={N} load {load0}->{open('/proc/loadavg').read().split()[0]} {time.strftime('%H:%M:%S', time.gmtime())}")
    m = lambda name, j: statistics.median(x[j] for x in rows[name]) * 1000
    base = m("rlms", 0)
    for name in rows:
        tot = m(name, 0) + (m(name, 2) if name == "subprocess" else 0)
        print(f"  {name:10s} host cpu {m(name, 0):6.1f} ms | kernel in run {m(name, 1):5.1f} | kernel+wrapper whole life {m(name, 2):5.1f} "
              f"| all {tot:6.1f} ms = {tot / base:4.2f}x rlms | to answer {m(name, 3):6.1f} ms")
asyncio.run(main())

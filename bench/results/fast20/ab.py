"""Paired A/B of two code paths inside one process, alternating run by run (ABBA), on bench
3's workload (20 iterations, 50 sub-calls, instant scripted model, store on): per run the
host's process CPU, the kernel's CPU during the run (schedstat of its threads, ns), time to
answer and the whole call. Prints medians per side and the median of paired B/A ratios.
    PYTHONPATH=<checkout>:<checkout>/bench python ab.py TOGGLE N [subprocess|inprocess]
TOGGLE names a function in toggles.py: toggle(on: bool) switches to the new path (B) or the
old one (A)."""
import asyncio, os, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
import toggles
from rlmd.sandbox.session import SandboxSession

NAME, N = sys.argv[1], int(sys.argv[2]); SANDBOX = sys.argv[3] if len(sys.argv) > 3 else "subprocess"
toggle = getattr(toggles, NAME)

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
        try: KSEEN["end"] = kns(k.kernel_pid())
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
    db = Path(tempfile.mkdtemp()) / "w.db"
    rows = {False: [], True: []}
    loads = [float(open('/proc/loadavg').read().split()[0])]
    order = [False, True, True, False]
    for i in range(2 * N + 4):
        side = order[i % 4]
        toggle(side)
        KSEEN.clear()
        c, w = time.process_time(), time.perf_counter()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=db)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        assert not r.store_errors and r.result.status == "completed", (r.store_errors, r.result)
        if i >= 4:
            rows[side].append((cpu, KSEEN.get("end", 0) - KSEEN.get("start", 0), r.to_answer_s, wall))
    loads.append(float(open('/proc/loadavg').read().split()[0]))
    toggle(True)
    names = ("host cpu", "kernel cpu", "to answer", "call")
    out = [f"{NAME} {SANDBOX} n={N}/side load {loads[0]:.2f}->{loads[1]:.2f} {time.strftime('%H:%M:%S', time.gmtime())}"]
    for j, nm in enumerate(names):
        a = statistics.median(x[j] for x in rows[False]) * 1000
        b = statistics.median(x[j] for x in rows[True]) * 1000
        pr = statistics.median(y[j] / x[j] for x, y in zip(rows[False], rows[True]) if x[j] > 0) if a > 0 else float('nan')
        out.append(f"  {nm:10s} A {a:8.2f} ms  B {b:8.2f} ms  B/A medians {b / a if a else float('nan'):.3f}  paired {pr:.3f}")
    print("\n".join(out), flush=True)
asyncio.run(main())

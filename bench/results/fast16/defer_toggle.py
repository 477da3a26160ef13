"""This checkout's store with and without the deferred step-start commit (DEFERRED_STEPS
emptied: every step start committed at once, as before), alternating run by run in one
process, bench 3's script; optional root-model wait DELAY_MS (a thread sleeps, then wakes
the loop, as a socket would). Prints medians and paired ratios (deferred / at once).
    PYTHONPATH=<checkout>:<checkout>/bench python defer_toggle.py N SANDBOX [DELAY_MS]"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
import rlmd.store.db as dbm
from rlmd.models import scripted

N, SANDBOX = int(sys.argv[1]), sys.argv[2]
DELAY = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
if DELAY:
    real = scripted.ScriptedModel._complete
    async def slow(self, *a, **k):
        if self.name == "root":
            await asyncio.get_running_loop().run_in_executor(None, time.sleep, DELAY)
        return await real(self, *a, **k)
    scripted.ScriptedModel._complete = slow
DEFERRED = dbm.DEFERRED_STEPS

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    d = Path(tempfile.mkdtemp())
    res = {k: ([], []) for k in ("now", "deferred")}
    for i in range(2 * N + 4):
        side = ("now", "deferred")[i % 2] if (i // 2) % 2 == 0 else ("deferred", "now")[i % 2]
        dbm.DEFERRED_STEPS = DEFERRED if side == "deferred" else ()
        c = time.process_time()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=d / f"{side}.db")
        assert not r.store_errors and r.result.status == "completed"
        if i >= 4:
            res[side][0].append(r.to_answer_s * 1000); res[side][1].append((time.process_time() - c) * 1000)
    m = statistics.median
    b, a = res["now"], res["deferred"]
    pa = m([y / x for x, y in zip(b[0], a[0])]); pc = m([y / x for x, y in zip(b[1], a[1])])
    print(f"{SANDBOX} delay {DELAY*1000:g} ms n={N} at once: answer {m(b[0]):.2f} cpu {m(b[1]):.2f} ms | "
          f"deferred: answer {m(a[0]):.2f} cpu {m(a[1]):.2f} ms | paired deferred/at once answer {pa:.3f} cpu {pc:.3f} "
          f"| load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main())

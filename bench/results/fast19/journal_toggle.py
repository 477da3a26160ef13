"""This checkout's store with and without its step journal (``_journal_off``: every step
written to SQLite at once, as before the journal), alternating run by run (ABBA) in one
process, bench 3's script. Prints medians and paired ratios (journal / at once) of time to
answer, the whole call (store opened and closed) and process CPU.
    PYTHONPATH=<checkout>:<checkout>/bench python journal_toggle.py N [inprocess|subprocess]"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
from rlmd.store import Store

N, SANDBOX = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "inprocess")
OFF = {"on": False}

class Toggled(Store):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        if OFF["on"]:
            self._journal_off = True
h.Store = Toggled

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    d = Path(tempfile.mkdtemp())
    res = {k: [] for k in ("at once", "journal")}
    for i in range(2 * N + 4):
        side = ("at once", "journal")[i % 2] if (i // 2) % 2 == 0 else ("journal", "at once")[i % 2]
        OFF["on"] = side == "at once"
        c, w = time.process_time(), time.perf_counter()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=d / "w.db")
        call, cpu = time.perf_counter() - w, time.process_time() - c
        assert not r.store_errors and r.result.status == "completed", r.store_errors
        if i >= 4:
            res[side].append((r.to_answer_s * 1000, call * 1000, cpu * 1000))
    m = statistics.median
    b, a = res["at once"], res["journal"]
    def col(rows, j): return [x[j] for x in rows]
    ratio = lambda j: m([y[j] / x[j] for x, y in zip(b, a)])
    print(f"{SANDBOX} n={N} at once: answer {m(col(b,0)):.2f} call {m(col(b,1)):.2f} cpu {m(col(b,2)):.2f} ms | "
          f"journal: answer {m(col(a,0)):.2f} call {m(col(a,1)):.2f} cpu {m(col(a,2)):.2f} ms | "
          f"paired journal/at once: answer {ratio(0):.3f} call {ratio(1):.3f} cpu {ratio(2):.3f} "
          f"| load {open('/proc/loadavg').read().split()[0]}", flush=True)
asyncio.run(main())

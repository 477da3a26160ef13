"""Where an in-process + store bench-3 run's time to answer goes: wall and thread CPU inside
the store (open, record_batched incl. its commits) against the whole run, N runs, one process.
    PYTHONPATH=<checkout>:<checkout>/bench python storeshare.py N [inprocess|subprocess]"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
import rlmd.store.db as dbm

acc = {"rec_w": 0.0, "rec_c": 0.0, "open_w": 0.0, "n_rec": 0, "flush_w": 0.0, "n_flush": 0}
orig_rb, orig_init, orig_flush = dbm.Store.record_batched, dbm.Store.__init__, dbm.Store.flush
def rb(self, e):
    w, c = time.perf_counter(), time.thread_time()
    orig_rb(self, e)
    acc["rec_w"] += time.perf_counter() - w; acc["rec_c"] += time.thread_time() - c; acc["n_rec"] += 1
def fl(self):
    w = time.perf_counter(); orig_flush(self); acc["flush_w"] += time.perf_counter() - w; acc["n_flush"] += 1
def init(self, *a, **k):
    w = time.perf_counter(); orig_init(self, *a, **k); acc["open_w"] += time.perf_counter() - w
dbm.Store.record_batched, dbm.Store.__init__, dbm.Store.flush = rb, init, fl
h.Store = dbm.Store

async def main(n, sandbox):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    rows = []
    for i in range(n + 3):
        for k in acc: acc[k] = 0
        c0 = time.process_time()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=sandbox, store_path=db)
        cpu = time.process_time() - c0
        if i >= 3:
            rows.append((r.to_answer_s, cpu, acc["open_w"], acc["rec_w"], acc["rec_c"], acc["flush_w"], acc["n_flush"]))
    m = lambda j: statistics.median(x[j] for x in rows) * 1000
    print(f"{sandbox} n={n} answer {m(0):.2f} ms | process cpu {m(1):.2f} | store open wall {m(2):.2f} | "
          f"record_batched wall {m(3):.2f} thread-cpu {m(4):.2f} | flush wall {m(5):.2f} in {statistics.median(x[6] for x in rows):.0f} flushes "
          f"| load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "inprocess"))

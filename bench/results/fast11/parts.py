"""Issue 16 item 3, session 11: the in-process run's to-answer with and without the store,
alternating, and the store's own time inside (flush wall and thread CPU)."""
import asyncio, json, statistics, sys, tempfile, time, gc
from pathlib import Path
import harness as h
SANDBOX = sys.argv[2] if len(sys.argv) > 2 else "inprocess"
from rlmd.store import db as sdb

spent = {"flush": 0.0, "flush_cpu": 0.0, "n": 0}
orig = sdb.Store.flush
def timed(self):
    t0 = time.perf_counter(); c0 = time.thread_time()
    orig(self)
    spent["flush"] += time.perf_counter() - t0; spent["flush_cpu"] += time.thread_time() - c0
    spent["n"] += 1
sdb.Store.flush = timed

async def main(n):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    tmp = Path(tempfile.mkdtemp()); db = tmp / "w.db"
    res = {"store": [], "nostore": [], "flush": [], "flush_cpu": [], "flushes": [], "cpu_store": [], "cpu_nostore": []}
    for i in range(n + 2):
        for store in (True, False):
            gc.collect()
            spent.update(flush=0.0, flush_cpu=0.0, n=0)
            c0 = time.process_time()
            run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=db if store else None)
            c1 = time.process_time()
            if i < 2: continue
            k = "store" if store else "nostore"
            res[k].append(run.to_answer_s * 1000)
            res["cpu_" + k].append((c1 - c0) * 1000)
            if store:
                res["flush"].append(spent["flush"] * 1000); res["flush_cpu"].append(spent["flush_cpu"] * 1000); res["flushes"].append(spent["n"])
    print(json.dumps({k: round(statistics.median(v), 2) for k, v in res.items()}))
asyncio.run(main(int(sys.argv[1])))

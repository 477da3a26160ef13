"""Per-phase wall time of bench 3's in-process run (+store unless --nostore): start->RunStarted,
->SandboxStarted, per-iteration, last cell. Medians over N runs."""
import asyncio, gc, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, os.getcwd() + "/bench")
import harness as H
from rlmd.engine import run_task
from rlmd.store import Store

async def one(script, db):
    t0 = time.perf_counter()
    marks = []
    def tracker(ev):
        marks.append((type(ev).__name__, time.perf_counter() - t0))
    models = H.RlmdScript(script)
    store = Store(db) if db else None
    t_open = time.perf_counter() - t0
    sinks = (store.record_batched, tracker) if store else (tracker,)
    try:
        res = await run_task(H.QUESTION, H.SMALL_CONTEXT, H.engine_config(len(script), "inprocess"), get_model=models.get_model, sinks=sinks)
    finally:
        t_end = time.perf_counter() - t0
        if store: store.close()
    t_close = time.perf_counter() - t0
    return t_open, marks, t_end, t_close

def main():
    n = int(sys.argv[1]); store = "--nostore" not in sys.argv
    script, _ = H.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db" if store else None
    rows = []
    async def go():
        for i in range(n + 3):
            gc.collect()
            r = await one(script, db)
            if i >= 3: rows.append(r)
    asyncio.run(go())
    def med(xs): return statistics.median(xs) * 1e3
    opens = [r[0] for r in rows]
    def at(r, name, k=0):
        hits = [t for nm, t in r[1] if nm == name]
        return hits[k]
    rs = [at(r, "RunStarted") for r in rows]
    ss = [at(r, "SandboxStarted") for r in rows]
    it0 = [at(r, "IterationStarted", 0) for r in rows]
    last = [at(r, "CellFinished", -1) for r in rows]
    iters = [(at(r, "CellFinished", -1) - at(r, "IterationStarted", 0)) / 20 for r in rows]
    ends = [r[2] for r in rows]; closes = [r[3] - r[2] for r in rows]
    print(f"store open {med(opens):.2f} | RunStarted {med(rs):.2f} | SandboxStarted {med(ss):.2f} | it0 {med(it0):.2f} | last cell {med(last):.2f} | per-iter {med(iters):.3f} | run_task returns {med(ends):.2f} | close {med(closes):.2f} ms")
    # per event-kind gaps: median time from event to next event, by pair
    import collections
    gaps = collections.defaultdict(list)
    for r in rows:
        m = r[1]
        for (a, ta), (b, tb) in zip(m, m[1:]):
            gaps[(a, b)].append(tb - ta)
    for k, v in sorted(gaps.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {k[0]:>22} -> {k[1]:<22} n/run {len(v)/len(rows):5.1f}  median {statistics.median(v)*1e6:8.1f} us  total/run {sum(v)/len(rows)*1e3:6.2f} ms")
main()

"""Issue 16 item 3, session 11: per-iteration time between consecutive events (medians over
iterations and runs, ms), store vs no store, alternating. argv: N sandbox."""
import asyncio, statistics, sys, tempfile, time, gc
from pathlib import Path
import harness as h
from rlmd.engine import run_task
from rlmd.store import Store

async def one(script, sandbox, db):
    last = [time.perf_counter(), "start"]
    gaps = {}
    def tracker(e):
        now = time.perf_counter()
        k = type(e).__name__
        if k.startswith("ModelCall"):
            k += "/" + e.role
        gaps.setdefault(f"{last[1]} -> {k}", []).append((now - last[0]) * 1000)
        last[:] = [now, k]
    store = Store(db) if db else None
    sinks = (store.record_batched, tracker) if store else (tracker,)
    models = h.RlmdScript(script)
    await run_task(h.QUESTION, h.SMALL_CONTEXT, h.engine_config(20, sandbox), get_model=models.get_model, sinks=sinks)
    if store: store.close()
    return gaps

async def main(n, sandbox):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    acc = {True: {}, False: {}}
    for i in range(n + 2):
        for st in (True, False):
            gc.collect()
            g = await one(script, sandbox, db if st else None)
            if i < 2: continue
            for k, v in g.items(): acc[st].setdefault(k, []).extend(v)
    for k in acc[True]:
        a, b = acc[True][k], acc[False].get(k, [0])
        print(f"{k:60s} n/run {len(a)/n:5.1f} store {statistics.median(a):7.3f} nostore {statistics.median(b):7.3f} sum-diff/run {(sum(a)-sum(b))/n:7.2f}")
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))

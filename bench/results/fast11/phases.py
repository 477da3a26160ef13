"""Issue 16 item 3, session 11: where a whole run with the store spends the time the run
without it does not: ms from the call's start to given events (medians), store vs no store,
alternating. argv: N sandbox."""
import asyncio, json, statistics, sys, tempfile, time, gc
from pathlib import Path
import harness as h
from rlmd.engine import run_task
from rlmd.store import Store
import os
if os.environ.get("NOCKPT"):
    import rlmd.store.db as _d; _d.CHECKPOINT_EVERY = 10**9

async def one(script, sandbox, db):
    t0 = time.perf_counter()
    marks = {}
    n = {"cell": 0}
    def tracker(e):
        k = type(e).__name__
        if k == "CellFinished":
            n["cell"] += 1
            k = f"cell{n['cell']}"
        marks.setdefault(k, (time.perf_counter() - t0) * 1000)
    store = Store(db) if db else None
    marks["store_open"] = (time.perf_counter() - t0) * 1000
    sinks = (store.record_batched, tracker) if store else (tracker,)
    models = h.RlmdScript(script)
    await run_task(h.QUESTION, h.SMALL_CONTEXT, h.engine_config(20, sandbox), get_model=models.get_model, sinks=sinks)
    if store: store.close()
    return marks

async def main(n, sandbox):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    acc = {True: {}, False: {}}
    for i in range(n + 2):
        for st in (True, False):
            gc.collect()
            m = await one(script, sandbox, db if st else None)
            if i < 2: continue
            for k, v in m.items(): acc[st].setdefault(k, []).append(v)
    keys = ["store_open", "RunStarted", "SandboxStarted", "IterationStarted", "cell1", "cell2", "cell5", "cell10", "cell15", "cell20"]
    for k in keys:
        a = statistics.median(acc[True].get(k, [0])); b = statistics.median(acc[False].get(k, [0]))
        print(f"{k:18s} store {a:8.1f}  nostore {b:8.1f}  diff {a-b:8.1f}")
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))

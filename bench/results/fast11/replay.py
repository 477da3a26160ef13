"""Issue 16 item 3, session 11: the events of one in-process whole run (bench 3's script)
replayed into a fresh store, record_batched in an asyncio loop as the engine calls it;
prints the store's thread CPU per run (median) in ms."""
import asyncio, json, statistics, sys, tempfile, time, gc
from pathlib import Path
import harness as h
from rlmd.store import Store

async def capture():
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    got = []
    from rlmd.engine import run_task
    models = h.RlmdScript(script)
    await run_task(h.QUESTION, h.SMALL_CONTEXT, h.engine_config(20, "inprocess"),
                   get_model=models.get_model, sinks=(got.append,))
    return got

async def replay(events, path):
    s = Store(path)
    c0 = time.thread_time()
    for e in events:
        s.record_batched(e)
        if type(e).__name__ in ("CellStarted",):
            await asyncio.sleep(0)
    s.flush()
    c1 = time.thread_time()
    s.close()
    return (c1 - c0) * 1000

async def main(n):
    events = await capture()
    tmp = Path(tempfile.mkdtemp())
    out = []
    for i in range(n):
        gc.collect()
        out.append(await replay(events, tmp / f"r{i}.db"))
    print(json.dumps({"events": len(events), "store_cpu_ms": round(statistics.median(out[2:]), 2), "min": round(min(out), 2)}))
asyncio.run(main(int(sys.argv[1])))

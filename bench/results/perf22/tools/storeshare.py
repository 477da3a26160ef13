"""Wall time inside Store.record_batched (and its parts) per bench-3 in-process run."""
import asyncio, gc, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, os.getcwd() + "/bench")
import harness as H
from rlmd.store import db as dbmod, journal as jmod
acc = {}
def wrap(obj, name, key):
    orig = getattr(obj, name)
    def w(*a, **k):
        t0 = time.perf_counter()
        try: return orig(*a, **k)
        finally: acc[key] = acc.get(key, 0) + time.perf_counter() - t0
    setattr(obj, name, w)
wrap(dbmod.Store, "record_batched", "record_batched")
wrap(dbmod.Store, "_persist", "persist")
wrap(jmod.Journal, "append_json" if hasattr(jmod.Journal, "append_json") else "append", "journal_write")
wrap(dbmod.Store, "_prepare_kept" if hasattr(dbmod.Store, "_prepare_kept") else "_prepare", "prepare")
wrap(dbmod.Store, "flush", "flush")
script, _ = H.make_script([3] * 10 + [2] * 10, "rlmd")
db = Path(tempfile.mkdtemp()) / "w.db"
res = []
async def go():
    for i in range(43):
        gc.collect(); acc.clear()
        t0 = time.perf_counter()
        run = await H.rlmd_whole_run(script, H.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
        if i >= 3: res.append((dict(acc), run.to_answer_s))
asyncio.run(go())
for k in ("record_batched", "prepare", "persist", "journal_write", "flush"):
    print(f"{k:15s} {statistics.median([r[0].get(k, 0) for r in res])*1e3:.2f} ms/run")
print("to answer", statistics.median([r[1] for r in res])*1e3)

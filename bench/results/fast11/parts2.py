import asyncio, json, statistics, sys, tempfile, time, gc
from pathlib import Path
import harness as h
from rlmd.store import db as sdb
spent = {}
def wrap(name):
    orig = getattr(sdb.Store, name)
    def f(self, *a):
        t0 = time.perf_counter()
        try: return orig(self, *a)
        finally: spent[name] = spent.get(name, 0) + time.perf_counter() - t0
    setattr(sdb.Store, name, f)
for n in ("record_batched", "flush", "_prepare", "__init__", "close"): wrap(n)
async def main(n):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    tmp = Path(tempfile.mkdtemp()); db = tmp / "w.db"
    acc = {}
    for i in range(n + 2):
        gc.collect(); spent.clear()
        t0=time.perf_counter()
        run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=sys.argv[2], store_path=db)
        tot=time.perf_counter()-t0
        if i < 2: continue
        acc.setdefault("to_answer", []).append(run.to_answer_s*1000)
        acc.setdefault("total", []).append(tot*1000)
        for k, v in spent.items(): acc.setdefault(k, []).append(v * 1000)
    print(json.dumps({k: round(statistics.median(v), 2) for k, v in acc.items()}))
asyncio.run(main(int(sys.argv[1])))

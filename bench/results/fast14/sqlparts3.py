import asyncio, sys, tempfile, time, statistics, collections
from pathlib import Path
import harness as h
from rlmd.store import Store
from rlmd.store import db as dbm

acc = collections.defaultdict(float); cnt = collections.Counter()
class Proxy:
    def __init__(self, conn): self._c = conn
    def execute(self, sql, params=()):
        t = time.perf_counter(); c = time.thread_time()
        try: return self._c.execute(sql, params)
        finally:
            k = sql.split("(")[0][:60]
            acc[k] += time.perf_counter() - t; cnt[k] += 1; acc["cpu " + k] += time.thread_time() - c
    def __getattr__(self, n): return getattr(self._c, n)

async def main(n):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    Store(db).close()
    orig_init = Store.__init__
    def init(self, *a, **k):
        orig_init(self, *a, **k); self._conn = Proxy(self._conn)
    Store.__init__ = init
    for i in range(n):
        run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
    tot = 0
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        tot += v
        print(f"{v/n*1000:7.3f} ms/run {cnt.get(k,1)/n:6.1f}/run {v/cnt.get(k,1)*1e6:7.1f} us  {k}")
    print("total", tot / n * 1000)
asyncio.run(main(int(sys.argv[1])))

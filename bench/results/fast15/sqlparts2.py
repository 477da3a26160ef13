"""Time each SQL statement kind of the store over N in-process + store runs (wraps Connection via a proxy)."""
import asyncio, sys, tempfile, time, collections, sqlite3
from pathlib import Path
import harness as h
import rlmd.store.db as dbm

T = collections.defaultdict(lambda: [0, 0.0])
COM = []; IDX = [0]
class Proxy:
    def __init__(self, c): self._c = c
    def execute(self, sql, params=()):
        t = time.perf_counter(); r = self._c.execute(sql, params); d = time.perf_counter() - t
        k = " ".join(sql.split()[:3])[:40]
        if k == "COMMIT": COM.append((IDX[0], d)); IDX[0] += 1
        T[k][0] += 1; T[k][1] += d; return r
    def close(self):
        t = time.perf_counter(); self._c.close(); T["close"][0] += 1; T["close"][1] += time.perf_counter() - t
    def __getattr__(self, n): return getattr(self._c, n)

orig_init = dbm.Store.__init__
def init(self, *a, **k):
    orig_init(self, *a, **k); self._conn = Proxy(self._conn); IDX[0] = 0
dbm.Store.__init__ = init

async def main(n):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()) / "w.db"
    for i in range(3):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
    T.clear(); COM.clear()
    for i in range(n):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
    tot = 0
    for k, (c, t) in sorted(T.items(), key=lambda kv: -kv[1][1]):
        tot += t; print(f"{k:42s} {c/n:7.1f}/run {t/n*1000:7.3f} ms/run {t/c*1e6:8.1f} us each")
    print("total", tot / n * 1000, "ms/run")
    import statistics as st
    COM2 = COM[-43*n:]
    big = [(i, d) for i, d in COM2 if d > 0.0008]
    print("commits >0.8ms:", len(big), "per run", len(big)/n, "their total ms/run", sum(d for _, d in big)/n*1000, "at indexes", sorted(set(i for i,_ in big))[:20])
    print("commit median us", st.median(d for _, d in COM2)*1e6)

asyncio.run(main(int(sys.argv[1])))

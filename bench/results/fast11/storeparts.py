import asyncio, json, statistics, sys, tempfile, time, gc, functools
from pathlib import Path
sys.argv += []
import replay as R
import rlmd.store.db as sdb
spent = {}
def wrap(owner, name, label):
    orig = getattr(owner, name)
    @functools.wraps(orig)
    def f(*a, **k):
        c0 = time.thread_time()
        try: return orig(*a, **k)
        finally: spent[label] = spent.get(label, 0) + time.thread_time() - c0
    setattr(owner, name, f)
wrap(sdb.Store, "_prepare", "prepare")
wrap(sdb.Store, "_dispatch", "dispatch")
wrap(sdb.Store, "_write_bumps", "bumps")
wrap(sdb, "_pair_finishes", "pair")
orig_exec = sdb.Store._exec
def ex(self, sql, params=()):
    c0 = time.thread_time()
    try: return orig_exec(self, sql, params)
    finally:
        k = "sql:" + sql.split()[0] + (" nodes" if "nodes" in sql[:30] else "")
        spent[k] = spent.get(k, 0) + time.thread_time() - c0
sdb.Store._exec = ex
orig_write = sdb.Store._write
import contextlib
@contextlib.contextmanager
def w(self):
    c0 = time.thread_time(); self._conn.execute("BEGIN IMMEDIATE"); spent["begin"] = spent.get("begin",0)+time.thread_time()-c0
    try:
        yield
        self._write_bumps()
        c0 = time.thread_time(); self._conn.execute("COMMIT"); spent["commit"] = spent.get("commit",0)+time.thread_time()-c0
    except BaseException:
        self._bumps.clear(); self._open_nodes.clear()
        if self._conn.in_transaction: self._conn.execute("ROLLBACK")
        raise
sdb.Store._write = w
async def main(n):
    events = await R.capture()
    tmp = Path(tempfile.mkdtemp()); acc = {}
    for i in range(n):
        gc.collect(); spent.clear()
        t = await R.replay(events, tmp / f"r{i}.db")
        if i < 2: continue
        acc.setdefault("total", []).append(t)
        for k, v in spent.items(): acc.setdefault(k, []).append(v * 1000)
    print(json.dumps({k: round(statistics.median(v), 2) for k, v in acc.items()}, indent=0))
asyncio.run(main(int(sys.argv[1])))

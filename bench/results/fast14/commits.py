import asyncio, sys, tempfile, time, statistics, collections
from pathlib import Path
import harness as h
from rlmd.store import Store
cnt = collections.Counter()
class Proxy:
    def __init__(self, conn): self._c = conn
    def execute(self, sql, params=()):
        if sql == "COMMIT": cnt["commit"] += 1
        return self._c.execute(sql, params)
    def __getattr__(self, n): return getattr(self._c, n)
async def main(n, sandbox):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    Store(db).close()
    orig_init = Store.__init__
    def init(self, *a, **k):
        orig_init(self, *a, **k); self._conn = Proxy(self._conn)
    Store.__init__ = init
    ans = []
    for i in range(n):
        run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=sandbox, store_path=db)
        ans.append(run.to_answer_s * 1000)
    print(sandbox, "commits/run", cnt["commit"] / n, "to answer median", statistics.median(ans))
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))

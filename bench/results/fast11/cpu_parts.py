"""Issue 16 item 3, session 11: thread CPU of the loop thread per in-process run with the
store (bench 3's script), split by wrapped functions (inclusive, non-nested), medians, ms."""
import asyncio, json, statistics, sys, tempfile, time, gc, functools
from pathlib import Path
import harness as h
import rlmd.store.db as sdb
import rlmd.models.tokens as tok
import rlmd.models.base as mbase
import rlmd.engine.host as host
import rlmd.sandbox.inprocess as ip
import rlmd.kernel.core as kcore

spent = {}
depth = [0]
def wrap(owner, name, label):
    orig = getattr(owner, name)
    if asyncio.iscoroutinefunction(orig):
        return
    @functools.wraps(orig)
    def f(*a, **k):
        if depth[0]:
            return orig(*a, **k)
        depth[0] += 1
        c0 = time.thread_time()
        try:
            return orig(*a, **k)
        finally:
            depth[0] -= 1
            spent[label] = spent.get(label, 0) + time.thread_time() - c0
    setattr(owner, name, f)

wrap(sdb.Store, "record_batched", "store.record_batched")
wrap(sdb.Store, "flush", "store.flush(timer)")
wrap(mbase.Model, "count_tokens", "tokens")
wrap(mbase.Model, "count_messages", "tokens")
wrap(kcore, "json_copy", "json_copy")
wrap(ip._Worker, "submit", "worker.submit")

async def main(n):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    acc = {}
    for i in range(n + 2):
        gc.collect(); spent.clear()
        c0 = time.thread_time(); p0 = time.process_time()
        run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
        c1 = time.thread_time(); p1 = time.process_time()
        if i < 2: continue
        acc.setdefault("loop thread", []).append((c1 - c0) * 1000)
        acc.setdefault("process", []).append((p1 - p0) * 1000)
        acc.setdefault("to_answer(wall)", []).append(run.to_answer_s * 1000)
        for k, v in spent.items(): acc.setdefault(k, []).append(v * 1000)
    print(json.dumps({k: round(statistics.median(v), 2) for k, v in acc.items()}))
asyncio.run(main(int(sys.argv[1])))

"""Thread CPU inside the store during bench 3's in-process + store run, journal on and off
(alternating run by run): record_batched (the step's path: prepare, journal write or commit),
the timer's flushes, close; inside them: _prepare, Journal.append, _write_batch (SQLite
transactions); medians over N runs each.
    PYTHONPATH=<checkout>:<checkout>/bench python storecpu.py N"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
import harness as h
import rlmd.store.db as dbm

acc = {}
# nested calls (record_batched -> flush) are counted in the outer one only
depth = {"n": 0}
def outer(name, fn):
    def wrap(self, *a, **k):
        depth["n"] += 1
        c = time.thread_time()
        try:
            return fn(self, *a, **k)
        finally:
            depth["n"] -= 1
            if depth["n"] == 0:
                acc[name] = acc.get(name, 0.0) + time.thread_time() - c
    return wrap
dbm.Store.record_batched = outer("record_batched", dbm.Store.record_batched)
dbm.Store._flush_due = outer("timer", dbm.Store._flush_due)
dbm.Store.close = outer("close", dbm.Store.close)
def inner(name, owner, attr):
    fn = getattr(owner, attr)
    def wrap(*a, **k):
        c = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            acc[name] = acc.get(name, 0.0) + time.thread_time() - c
    setattr(owner, attr, wrap)
inner("prepare", dbm.Store, "_prepare")
inner("append", dbm.Journal, "append")
inner("write_batch", dbm.Store, "_write_batch")
OFF = {"on": False}
class Toggled(dbm.Store):
    def __init__(self, *a, **k):
        c = time.thread_time()
        super().__init__(*a, **k)
        acc["open"] = acc.get("open", 0.0) + time.thread_time() - c
        if OFF["on"]:
            self._journal_off = True
h.Store = Toggled

async def main(n):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    d = Path(tempfile.mkdtemp())
    res = {"at once": [], "journal": []}
    for i in range(2 * n + 4):
        side = ("at once", "journal")[i % 2] if (i // 2) % 2 == 0 else ("journal", "at once")[i % 2]
        OFF["on"] = side == "at once"
        acc.clear()
        c = time.process_time()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=d / "w.db")
        acc["process"] = time.process_time() - c
        if i >= 4:
            res[side].append(dict(acc))
    keys = ("open", "record_batched", "timer", "close", "process", "prepare", "append", "write_batch")
    for side, rows in res.items():
        print(f"{side:8s} " + " | ".join(f"{k} {statistics.median(r.get(k, 0.0) for r in rows) * 1000:.2f}" for k in keys) + " ms CPU")
    print(f"n={n} load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main(int(sys.argv[1])))

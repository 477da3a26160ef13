"""A/B inside one process: bench 3's in-process + store run, alternating run by run between
variant 'base' and variant P (a monkeypatch toggled per run, or a second database file).
Prints median to-answer and process CPU per run for each, and the paired ratio."""
import asyncio, os, sys, tempfile, time, statistics
from pathlib import Path
import harness as h
import rlmd.store.db as dbm
import rlmd.store.codec as codec
P = sys.argv[2]
state = {"on": False}
_oi = dbm.Store.__init__
def _init(self, *a, **k):
    _oi(self, *a, **k)
    if state["on"] and P == "syncoff": self._conn.execute("PRAGMA synchronous = OFF")
dbm.Store.__init__ = _init
_prep = dbm.Store._prepare
def prep(self, event):
    if state["on"] and P == "noredact":
        raw = event.data
        d = codec.to_jsonable(raw if isinstance(raw, dict) else {"value": raw})
        return d if isinstance(d, dict) else {"value": d}
    if state["on"] and P == "noprep":
        return dict(event.data)
    return _prep(self, event)
dbm.Store._prepare = prep
_wb = dbm.Store._write_bumps
def wb(self):
    if state["on"] and P == "nobump":
        self._bumps = {}; return
    return _wb(self)
dbm.Store._write_bumps = wb
async def main(n):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    d = Path(tempfile.mkdtemp())
    dbs = {False: d / "a.db", True: d / "b.db"}
    from rlmd.store import Store
    for k in dbs: Store(dbs[k]).close()
    if P == "nopending":
        import sqlite3; c = sqlite3.connect(dbs[True]); c.execute("DROP TRIGGER nodes_ai"); c.commit(); c.close()
    if P == "nostatusidx":
        import sqlite3; c = sqlite3.connect(dbs[True]); c.execute("DROP INDEX idx_nodes_status"); c.commit(); c.close()
    if P == "nostatusparentidx":
        import sqlite3; c = sqlite3.connect(dbs[True]); c.execute("DROP INDEX idx_nodes_status"); c.execute("DROP INDEX idx_nodes_parent_id"); c.commit(); c.close()
    res = {False: ([], []), True: ([], [])}
    for i in range(2 * n + 4):
        on = bool(i % 2); state["on"] = on
        c = time.process_time()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=None if (on and P == "nostore") else dbs[on])
        if i >= 4:
            res[on][0].append(r.to_answer_s * 1000); res[on][1].append((time.process_time() - c) * 1000)
    m = statistics.median
    a, b = res[False], res[True]
    pa = [y / x for x, y in zip(a[0], b[0])]; pc = [y / x for x, y in zip(a[1], b[1])]
    print(f"{P:18s} base answer {m(a[0]):6.2f} cpu {m(a[1]):6.2f} | variant answer {m(b[0]):6.2f} cpu {m(b[1]):6.2f} | paired answer {m(pa):.3f} cpu {m(pc):.3f} | load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main(int(sys.argv[1])))

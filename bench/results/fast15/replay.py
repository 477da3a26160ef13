"""Replay one bench-3 run's 203 events into the store (open, record_batched, close), N times
per process, alternating nothing: prints the median thread CPU and wall of open+record (the part
inside bench 3's to-answer) and of close. PYTHONPATH=<checkout>:<checkout>/bench python replay.py N"""
import asyncio, sys, tempfile, time, statistics
from pathlib import Path
import harness as h
from rlmd.store import Store

P = sys.argv[2] if len(sys.argv) > 2 else "base"
import rlmd.store.db as dbm
_oi = dbm.Store.__init__
def _init(self, *a, **k):
    _oi(self, *a, **k)
    if P == "syncoff": self._conn.execute("PRAGMA synchronous = OFF")
    if P == "nostatusidx": self._conn.execute("DROP INDEX IF EXISTS idx_nodes_status")
    if P == "noidx": self._conn.execute("DROP INDEX IF EXISTS idx_nodes_status"); self._conn.execute("DROP INDEX IF EXISTS idx_nodes_parent_id")
dbm.Store.__init__ = _init
if P == "noredact":
    import rlmd.store.codec as codec
    def prep(self, event):
        raw = event.data
        d = codec.to_jsonable(raw if isinstance(raw, dict) else {"value": raw})
        return d if isinstance(d, dict) else {"value": d}
    dbm.Store._prepare = prep
if P == "noprep":
    dbm.Store._prepare = lambda self, e: dict(e.data)
async def main(n):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    events = []
    await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=None)
    import rlmd.engine as eng
    # capture: run once with a list sink
    from harness import RlmdScript, QUESTION, engine_config
    models = RlmdScript(script)
    await eng.run_task(QUESTION, h.SMALL_CONTEXT, engine_config(len(script), "inprocess"),
                       get_model=models.get_model, sinks=(events.append,))
    db = Path(tempfile.mkdtemp()) / "w.db"
    Store(db).close()
    rec_cpu, rec_wall, close_wall = [], [], []
    for i in range(n + 3):
        c0 = time.thread_time(); w0 = time.perf_counter()
        import dataclasses, os
        m = {}
        def nid(x):
            if x is None: return None
            if x not in m: m[x] = x[:12] + os.urandom(4).hex()
            return m[x]
        evs = [dataclasses.replace(e, run_id=nid(e.run_id), node_id=nid(e.node_id), parent_id=nid(e.parent_id)) for e in events]
        c0 = time.thread_time(); w0 = time.perf_counter()
        s = Store(db)
        for e in evs:
            s.record_batched(e)
        c1 = time.thread_time(); w1 = time.perf_counter()
        s.close()
        w2 = time.perf_counter()
        if i >= 3:
            rec_cpu.append(c1 - c0); rec_wall.append(w1 - w0); close_wall.append(w2 - w1)
        await asyncio.sleep(0)
    m = lambda x: statistics.median(x) * 1000
    print(f"{P:12s} events {len(events)} open+record cpu {m(rec_cpu):.2f} ms wall {m(rec_wall):.2f} ms close wall {m(close_wall):.2f} ms load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main(int(sys.argv[1])))

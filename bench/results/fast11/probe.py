import asyncio, statistics, sys, tempfile, time, gc, sqlite3
from pathlib import Path
import harness as h
from rlmd.engine import run_task
from rlmd.engine.events import CellStarted, ModelCallStarted

async def one(script, sandbox, mode, conn):
    last = [0.0]; gaps = []
    def probe(e):
        if isinstance(e, CellStarted):
            if mode == "commit":
                conn.execute("BEGIN IMMEDIATE"); conn.execute("INSERT INTO t VALUES (?)", ("x" * 2000,)); conn.execute("COMMIT")
            elif mode == "spin":
                t = time.perf_counter() + 0.0004
                while time.perf_counter() < t: pass
            last[0] = time.perf_counter()
        elif isinstance(e, ModelCallStarted) and e.role == "sub" and last[0]:
            gaps.append((time.perf_counter() - last[0]) * 1000); last[0] = 0.0
    models = h.RlmdScript(script)
    t0 = time.perf_counter()
    await run_task(h.QUESTION, h.SMALL_CONTEXT, h.engine_config(20, sandbox), get_model=models.get_model, sinks=(probe,))
    return statistics.median(gaps), (time.perf_counter() - t0) * 1000

async def main(n, sandbox):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    conn = sqlite3.connect(Path(tempfile.mkdtemp()) / "p.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL"); conn.execute("PRAGMA synchronous=NORMAL"); conn.execute("CREATE TABLE t (x)")
    acc = {}
    for i in range(n + 1):
        for mode in ("none", "commit", "spin"):
            gc.collect()
            g, tot = await one(script, sandbox, mode, conn)
            if i: acc.setdefault(mode, []).append((g, tot))
    for m, v in acc.items():
        print(m, "cellstart->sub ms", round(statistics.median(x[0] for x in v), 3), "run ms", round(statistics.median(x[1] for x in v), 1))
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))

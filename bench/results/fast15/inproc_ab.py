"""In-process paired A/B of the store: bench 3's in-process + store run alternating run by run
between the before copy's Store (rlmd/store/db.py + schema.py loaded from BEFORE) and this
checkout's, each on its own database file. Prints medians and paired ratios (CPU, to answer).
    PYTHONPATH=<after>:<after>/bench python inproc_ab.py BEFORE N"""
import asyncio, importlib.util, sys, tempfile, time, statistics, types
from pathlib import Path
import harness as h
import rlmd.store.db as after_db
BEFORE, N = sys.argv[1], int(sys.argv[2])
def load(name, path, **inject):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m
    src = open(path).read()
    if inject:
        src = src.replace("from rlmd.store import schema\n", "import b_schema as schema\n")
    exec(compile(src, path, "exec"), m.__dict__); return m
load("b_schema", BEFORE + "/rlmd/store/schema.py")
before_db = load("b_db", BEFORE + "/rlmd/store/db.py", inject=True)
Stores = {"before": before_db.Store, "after": after_db.Store}
async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    d = Path(tempfile.mkdtemp())
    res = {k: ([], []) for k in Stores}
    for i in range(2 * N + 4):
        side = ("before", "after")[i % 2] if (i // 2) % 2 == 0 else ("after", "before")[i % 2]
        h.Store = Stores[side]
        c = time.process_time()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=d / f"{side}.db")
        assert not r.store_errors, r.store_errors
        if i >= 4:
            res[side][0].append(r.to_answer_s * 1000); res[side][1].append((time.process_time() - c) * 1000)
    m = statistics.median
    b, a = res["before"], res["after"]
    pa = [y / x for x, y in zip(b[0], a[0])]; pc = [y / x for x, y in zip(b[1], a[1])]
    print(f"n={N} before: answer {m(b[0]):.2f} cpu {m(b[1]):.2f} ms | after: answer {m(a[0]):.2f} cpu {m(a[1]):.2f} ms | paired after/before answer {m(pa):.3f} cpu {m(pc):.3f} | ratio of medians answer {m(a[0])/m(b[0]):.3f} cpu {m(a[1])/m(b[1]):.3f} | load {open('/proc/loadavg').read().split()[0]}")
asyncio.run(main())

"""cProfile of both threads (loop + cell worker) over N bench-3 in-process runs."""
import asyncio, cProfile, gc, os, sys, tempfile, pstats
from pathlib import Path
sys.path.insert(0, os.getcwd() + "/bench")
import harness as H
from rlmd.sandbox import inprocess
wprofs = []
orig = inprocess._Worker._serve
def serve(self):
    p = cProfile.Profile(); wprofs.append(p); p.enable()
    try: orig(self)
    finally: p.disable()
inprocess._Worker._serve = serve
n = int(sys.argv[1]); store = "--nostore" not in sys.argv
script, _ = H.make_script([3] * 10 + [2] * 10, "rlmd")
db = Path(tempfile.mkdtemp()) / "w.db"
mp = cProfile.Profile()
async def go():
    for i in range(n):
        gc.collect()
        mp.enable()
        await H.rlmd_whole_run(script, H.SMALL_CONTEXT, sandbox="inprocess", store_path=db if store else None)
        mp.disable()
asyncio.run(go())
mp.dump_stats(sys.argv[2] + ".main")
s = pstats.Stats(wprofs[0])
for p in wprofs[1:]: s.add(p)
s.dump_stats(sys.argv[2] + ".worker")

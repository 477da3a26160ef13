import asyncio, sys, tempfile, time
from pathlib import Path
import harness as h
async def main(n, store):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    c = time.process_time()
    for i in range(n):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db if store else None)
    print("cpu/run ms", (time.process_time() - c) / n * 1000)
asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "store"))

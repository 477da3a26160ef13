import asyncio, cProfile, pstats, tempfile, sys
from pathlib import Path
import harness as h
async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    for i in range(3):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=sys.argv[1], store_path=db)
    pr = cProfile.Profile()
    pr.enable()
    for i in range(20):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=sys.argv[1], store_path=db)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(45)
asyncio.run(main())

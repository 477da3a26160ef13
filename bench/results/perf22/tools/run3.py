"""Bench 3's in-process + store run, N times in one process; prints to-answer and CPU medians.
usage: run3.py N [--profile out.prof] [--nostore]"""
import asyncio, gc, os, statistics, sys, tempfile, time
from pathlib import Path
sys.argv[0] = "bench/harness.py"
sys.path.insert(0, os.getcwd() + "/bench")
import harness as H

def main():
    n = int(sys.argv[1]); prof = None
    if "--profile" in sys.argv:
        import cProfile; prof = cProfile.Profile()
    store = "--nostore" not in sys.argv
    calls = [3] * 10 + [2] * 10
    script, _ = H.make_script(calls, "rlmd")
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "w.db"
    async def go():
        ans, cpu = [], []
        for i in range(n + 2):
            gc.collect()
            c0 = time.process_time()
            if prof and i >= 2: prof.enable()
            run = await H.rlmd_whole_run(script, H.SMALL_CONTEXT, sandbox="subprocess" if "--sub" in sys.argv else "inprocess", store_path=db if store else None)
            if prof and i >= 2: prof.disable()
            c1 = time.process_time()
            if "--sub" in sys.argv: H._settle()
            assert run.result.status == "completed", run.result
            if i >= 2:
                ans.append(run.to_answer_s); cpu.append(c1 - c0)
        print(f"to answer median {statistics.median(ans)*1e3:.2f} ms  min {min(ans)*1e3:.2f}  cpu median {statistics.median(cpu)*1e3:.2f} ms  per-iter {statistics.median(ans)/20*1e3:.3f} ms")
    asyncio.run(go())
    if prof:
        prof.dump_stats(sys.argv[sys.argv.index("--profile") + 1])
main()

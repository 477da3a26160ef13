"""Profile rlmd in-process whole runs over the scripted server (session 23)."""
import asyncio, cProfile, os, pstats, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "/work/main")
from bench import whole_run_server as w
from bench.harness import make_script, SMALL_CONTEXT

async def main():
    os.environ[w.KEY_ENV] = "bench"
    calls = [3] * 10 + [2] * 10
    script, n_sub = make_script(calls, "rlmd")
    tmp = Path(tempfile.mkdtemp())
    server = w.Server({"root-rlmd": script}, tmp)
    sandbox = sys.argv[1] if len(sys.argv) > 1 else "inprocess"
    try:
        for _ in range(3):
            await w.rlmd_run(server.url, sandbox, tmp / "db", 20); server.stats()
        pr = cProfile.Profile()
        ts = []
        pr.enable()
        for _ in range(10):
            r, t = await w.rlmd_run(server.url, sandbox, tmp / "db", 20); server.stats(); ts.append(t)
        pr.disable()
        print("to answer ms", sorted(round(x*1e3,1) for x in ts))
        pr.dump_stats(str(tmp / "p"))
        st = pstats.Stats(str(tmp / "p")); st.sort_stats("tottime").print_stats(35)
        st.sort_stats("cumtime").print_stats(60)
    finally:
        server.close()
asyncio.run(main())

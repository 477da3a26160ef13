"""cProfile of N in-process + store runs of bench 3's script; prints CPU per run and top functions."""
import asyncio, cProfile, gc, pstats, sys, tempfile, time, io
from pathlib import Path
import harness as h

async def main(n, store, prof):
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    for i in range(3):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db if store else None)
    pr = cProfile.Profile()
    c0 = time.process_time(); w0 = time.perf_counter()
    if prof: pr.enable()
    ans = []
    for i in range(n):
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db if store else None)
        ans.append(r.to_answer_s)
    if prof: pr.disable()
    c1 = time.process_time(); w1 = time.perf_counter()
    print(f"store={store} prof={prof} cpu/run {(c1-c0)/n*1000:.2f} ms wall/run {(w1-w0)/n*1000:.2f} ms answer median {sorted(ans)[n//2]*1000:.2f} ms")
    if prof:
        s = io.StringIO()
        st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(45)
        st.sort_stats("cumulative").print_stats(60)
        print(s.getvalue())

asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "store", sys.argv[3] == "prof"))

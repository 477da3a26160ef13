import asyncio, cProfile, pstats, sys, time, statistics
from rlmd.sandbox import inprocess
from rlmd.sandbox.inprocess import InProcessSandbox
wp = []
orig = inprocess._Worker._serve
def serve(self):
    p = cProfile.Profile(); wp.append(p); p.enable()
    try: orig(self)
    finally: p.disable()
if "--prof" in sys.argv: inprocess._Worker._serve = serve
async def bare(fn, args): return "ok"
async def main():
    sb = InProcessSandbox(); await sb.start(bare); await sb.load_context("x" * 1000)
    for _ in range(200): await sb.execute("pass")
    mp = cProfile.Profile()
    ts = []
    if "--prof" in sys.argv: mp.enable()
    for _ in range(3000):
        t0 = time.perf_counter(); await sb.execute("pass"); ts.append(time.perf_counter() - t0)
    mp.disable()
    await sb.close()
    print(f"empty cell median {statistics.median(ts)*1e6:.1f} us")
    if "--prof" in sys.argv:
        pstats.Stats(mp).sort_stats("tottime").print_stats(25)
        await asyncio.sleep(0.1)
        pstats.Stats(wp[0]).sort_stats("tottime").print_stats(15)
asyncio.run(main())

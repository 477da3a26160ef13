"""Per-llm_query cost in the in-process sandbox with a bare handler: a cell making K calls."""
import asyncio, os, statistics, sys, time
from rlmd.sandbox.inprocess import InProcessSandbox
K = 200
async def bare(fn, args):
    return "ok"
async def main():
    sb = InProcessSandbox()
    await sb.start(bare)
    await sb.load_context("x" * 1000)
    code = f"for i in range({K}):\n    a = llm_query('Question about: ' + context[:100])\n"
    res = []
    cpu = []
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
        c0 = time.process_time(); t0 = time.perf_counter()
        out = await sb.execute(code)
        assert out.error is None, out.error
        res.append((time.perf_counter() - t0) / K); cpu.append((time.process_time() - c0) / K)
    empty = []
    for r in range(200):
        t0 = time.perf_counter(); await sb.execute("pass"); empty.append(time.perf_counter() - t0)
    await sb.close()
    print(f"per llm_query: wall median {statistics.median(res)*1e6:.1f} us min {min(res)*1e6:.1f}; cpu median {statistics.median(cpu)*1e6:.1f} us | empty cell {statistics.median(empty)*1e6:.1f} us")
asyncio.run(main())

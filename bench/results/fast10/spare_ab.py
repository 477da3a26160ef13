"""Spare-ready hardened starts (create + start + first cell), child per root, alternating."""
import asyncio, json, os, statistics, subprocess, sys, time
CHILD = r'''
import asyncio, json, sys, time
from rlmd.sandbox import create_sandbox
async def host(fn, args): return None
async def main(n):
    out = []
    for i in range(n + 2):
        t0 = time.perf_counter()
        box = create_sandbox("subprocess")
        await box.start(host)
        r = await box.execute("x = 1")
        out.append(time.perf_counter() - t0)
        assert r.error is None
        await box.close()
        await asyncio.sleep(0.4)
    print(json.dumps(out[2:]))
asyncio.run(main(int(sys.argv[1])))
'''
n, reps, roots = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
res = {r: [] for r in roots}
for rep in range(reps):
    for r in (roots if rep % 2 == 0 else roots[::-1]):
        env = dict(os.environ, PYTHONPATH=r)
        out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, cwd="/tmp", capture_output=True, text=True, check=True).stdout
        res[r].append(statistics.median(json.loads(out)))
for r in roots:
    print(f"{r:30s} per-child medians ms: {' '.join(f'{x*1000:.1f}' for x in res[r])}  median {statistics.median(res[r])*1000:.2f}")
print("load", os.getloadavg())

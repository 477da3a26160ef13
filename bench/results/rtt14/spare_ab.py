"""Paired A/B of the hardened spare-ready start: create + start, then the first cell x = 1 (timed apart)."""
import json, os, statistics, subprocess, sys
CHILD = r"""
import asyncio, json, sys, time
from rlmd.sandbox import create_sandbox
async def host(fn, args): return "ok"
async def main(n):
    st, fc = [], []
    for i in range(n + 2):
        t0 = time.perf_counter()
        box = create_sandbox("subprocess", spare_kernel=True)
        await box.start(host)
        t1 = time.perf_counter()
        r = await box.execute("x = 1")
        t2 = time.perf_counter()
        assert r.error is None
        await box.close()
        if i >= 2: st.append(t1 - t0); fc.append(t2 - t1)
        await asyncio.sleep(0.5)
    print(json.dumps({"start": st, "first": fc}))
asyncio.run(main(int(sys.argv[1])))
"""
roots = sys.argv[1:3]; reps = int(sys.argv[3]); n = int(sys.argv[4])
res = {r: {"start": [], "first": []} for r in roots}
for rep in range(reps):
    for root in (roots if rep % 2 == 0 else roots[::-1]):
        env = {**os.environ, "PYTHONPATH": f"{root}:{root}/tui"}
        out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, cwd=root, capture_output=True, text=True, check=True).stdout
        got = json.loads(out)
        for k in got: res[root][k] += got[k]
for root in roots:
    print(f"{root}: start {statistics.median(res[root]['start'])*1e3:.2f} ms, first cell {statistics.median(res[root]['first'])*1e3:.2f} ms, n={len(res[root]['start'])}")
print("load", os.getloadavg())

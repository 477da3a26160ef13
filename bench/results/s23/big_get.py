import asyncio, os, statistics, sys, time
sys.path.insert(0, os.environ.get("ROOT", "."))
from rlmd.sandbox import create_sandbox
async def host(fn, args): return "ok"
async def main():
    box = create_sandbox("subprocess", timeout_s=120)
    await box.start(host)
    await box.execute("big = 'y' * 100_000_000")
    ts = []
    for _ in range(3):
        t0 = time.perf_counter(); v = await box.get_variable("big"); ts.append(time.perf_counter() - t0)
        assert len(v) == 100_000_000
    t1 = time.perf_counter(); r = await box.execute("print('z' * 20_000_000)"); t2 = time.perf_counter()
    assert len(r.stdout) == 20_000_001
    print(f"get_variable 100 MB median {statistics.median(ts)*1e3:.0f} ms; print 20 MB {(t2-t1)*1e3:.0f} ms")
    await box.close()
asyncio.run(main())

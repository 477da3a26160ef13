import asyncio, os, statistics
from rlmd.sandbox import create_sandbox
def kns(pid):
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            t += int(fh.read().split()[0])
    return t / 1e6
async def main():
    res = {"bwrap": [], "none": []}
    for i in range(12):
        for iso in ("bwrap", "none"):
            sb = create_sandbox("subprocess", spare_kernel=False, isolation=iso)
            async def h(fn, a): return "ok"
            await sb.start(h)
            k = sb._kernel
            pid = k.kernel_pid()
            res[iso].append((kns(pid), kns(k.pid) if k.pid != pid else 0.0))
            await sb.close()
    for iso, v in res.items():
        print(iso, "kernel CPU at start ms %.1f, wrapper %.1f" % (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)))
asyncio.run(main())

# Which limit ends a fork bomb (pids limit 64, memory 256 MiB), N runs per checkout on PYTHONPATH;
# and the memory charged to the kernel's group after a first cell `x = 1`.
import asyncio, collections, os, sys
from rlmd.sandbox import create_sandbox
from rlmd.sandbox.limits import Limits
async def host(fn, args): return "ok"
async def main(n):
    LIM = Limits(wall_s=30, memory_bytes=256 * 2**20, processes=64)
    got = collections.Counter(); usage = []
    for i in range(n):
        box = create_sandbox("subprocess", spare_kernel=False, limits=LIM, timeout_s=30)
        await box.start(host)
        await box.execute("x = 1")
        usage.append(box._kernel.launch.memory_usage())
        r = await box.execute("import os\nwhile True:\n    os.fork()", timeout_s=20)
        err = r.error or ""
        got["pids" if "process count" in err else "memory" if "memory limit" in err else "timeout" if r.timed_out else err[:60]] += 1
        await box.close()
    print(sys.path[0], dict(got), "memory charged after x = 1: MiB", sorted(round(u / 2**20, 1) for u in usage))
asyncio.run(main(int(sys.argv[1])))

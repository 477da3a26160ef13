import asyncio, os, resource, statistics, subprocess, sys, time
from rlmd.sandbox import create_sandbox
def ch():
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime
def kns(pid):
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            t += int(fh.read().split()[0])
    return t / 1e6
bare = []
for _ in range(15):
    c = ch(); subprocess.run([sys.executable, "-I", "-S", "-c", "pass"]); bare.append((ch() - c) * 1000)
print("python -I -S -c pass: CPU ms", statistics.median(bare))
bare = []
for _ in range(15):
    c = ch(); subprocess.run([sys.executable, "-I", "-S", "-c", "import threading, io, collections, functools, itertools"]); bare.append((ch() - c) * 1000)
print("python -I -S + kernel's first imports: CPU ms", statistics.median(bare))
async def main():
    ks = []
    for _ in range(10):
        sb = create_sandbox("subprocess", spare_kernel=False)
        async def h(fn, a): return "ok"
        await sb.start(h)
        pid = (await sb.health())["host_pid"]
        ks.append(kns(pid))
        await sb.close()
    print("kernel (bwrap, isolated) CPU at hello+health: ms", statistics.median(ks))
asyncio.run(main())

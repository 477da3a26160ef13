import asyncio, os, sys, threading, time
sys.path.insert(0, os.environ.get("ROOT", "."))
from rlmd.sandbox import create_sandbox
CELL = "x = sum(range(100)); print(x)"
async def host(fn, args): return "ok"
def tcpu():
    out = {}
    for t in os.listdir("/proc/self/task"):
        f = open(f"/proc/self/task/{t}/stat").read()
        name = open(f"/proc/self/task/{t}/comm").read().strip()
        s = f.rsplit(")", 1)[1].split()
        out[(t, name)] = (int(s[11]), int(s[12]))
    return out
async def main():
    box = create_sandbox("subprocess")
    await box.start(host)
    for _ in range(200): await box.execute(CELL)
    a = tcpu(); print([t.name for t in threading.enumerate()])
    for _ in range(5000): await box.execute(CELL)
    b = tcpu()
    for k in b: print(k, "utime", b[k][0] - a.get(k,(0,0))[0], "stime", b[k][1] - a.get(k,(0,0))[1])
    await box.close()
asyncio.run(main())

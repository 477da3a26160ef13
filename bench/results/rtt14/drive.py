"""Drive N warm cells on a hardened sandbox; print kernel pid, wait on a file between phases."""
import asyncio, os, sys, time
sys.path.insert(0, os.environ.get("ROOT", "."))
from rlmd.sandbox import create_sandbox
CELL = "x = sum(range(100)); print(x)"
async def host(fn, args): return "ok"
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
async def main():
    n = int(sys.argv[1]); mode = sys.argv[2] if len(sys.argv) > 2 else "hardened"
    opts = {} if mode == "hardened" else {"isolation": "none"}
    box = create_sandbox("subprocess", **opts)
    await box.start(host)
    for _ in range(100): await box.execute(CELL)
    kpid = box.kernel.kernel_pid()
    print("kernel", kpid, "host", os.getpid(), flush=True)
    pin = os.environ.get("PIN")
    if pin:
        os.sched_setaffinity(0, {0})
        os.sched_setaffinity(kpid, {0} if pin == "same" else {1})
        for _ in range(100): await box.execute(CELL)
    gate = os.environ.get("GATE")
    if gate:
        while not os.path.exists(gate): await asyncio.sleep(0.1)
    k0, h0, t0 = cpu(kpid), time.process_time(), time.perf_counter()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); r = await box.execute(CELL); ts.append(time.perf_counter() - a)
        assert r.stdout == "4950\n", r
    wall = time.perf_counter() - t0
    ts.sort()
    print(f"pin={os.environ.get('PIN')} n={n} median {ts[n//2]*1e6:.0f} us min {ts[0]*1e6:.0f} us kernel cpu {(cpu(kpid)-k0)/n*1e6:.0f} us host cpu {(time.process_time()-h0)/n*1e6:.0f} us load {os.getloadavg()[0]:.2f}", flush=True)
    await box.close()
asyncio.run(main())

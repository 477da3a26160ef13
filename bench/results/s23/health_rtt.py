"""Daemon command round trip: N rlmd.health over the Unix socket; daemon CPU (user/sys ticks)."""
import asyncio, os, statistics, sys, tempfile, time
from pathlib import Path
root = os.environ["ROOT"]; sys.path.insert(0, root); sys.path.insert(0, root + "/tests")
from helpers.server import Daemon
from rlmd.server.client import Client
def ticks(pid):
    s = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split(); return int(s[11]), int(s[12])
async def main():
    home = Path(tempfile.mkdtemp()); d = Daemon(home).start()
    try:
        c = await Client.connect(d.socket)
        for _ in range(300): await c.command("rlmd.health")
        u0, s0 = ticks(d.proc.pid); ts = []
        for _ in range(3000):
            t = time.perf_counter(); await c.command("rlmd.health"); ts.append(time.perf_counter() - t)
        u1, s1 = ticks(d.proc.pid)
        print(f"health median {statistics.median(ts)*1e6:.0f} us p99 {sorted(ts)[2969]*1e6:.0f} us daemon utime {u1-u0} stime {s1-s0} ticks/3000")
        await c.close()
    finally:
        d.stop() if hasattr(d, "stop") else d.proc.kill()
asyncio.run(main())

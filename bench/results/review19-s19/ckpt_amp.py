"""Hostile REPL code: one 30 MB string bound to N names; what the daemon's checkpoint does."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from rlmd.server.client import Client

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
home = Path("/work/s19/review19/h-ckpt")
home.mkdir(parents=True, exist_ok=True)
proj = Path("/work/s19/review19/proj-ckpt")
proj.mkdir(exist_ok=True)
(proj / "a.py").write_text("x = 1\n")
env = {**os.environ, "RLMD_HOME": str(home)}
d = subprocess.Popen(
    [sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")], env=env
)


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("VmHWM", "VmRSS")):
            print(" ", line.strip())


async def main():
    os.environ["RLMD_HOME"] = str(home)
    from rlmd import paths

    sock = paths.socket_path()
    for _ in range(100):
        if sock.exists():
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    c = await Client.connect(sock)
    r = await c.command("rlmd.workspace.open", {"workspace": str(proj)}, timeout=120)
    print("open", r.get("state"))
    code = f"s = 'x' * (30 * 2**20)\nfor i in range({N}):\n    globals()['v%d' % i] = s\n"
    r = await c.command("rlmd.workspace.exec", {"workspace": str(proj), "code": code}, timeout=120)
    print("exec error", r["error"])
    rss(d.pid)
    t = time.time()
    try:
        r = await c.command("rlmd.workspace.close", {"workspace": str(proj)}, timeout=600)
        print(
            "close",
            {k: r[k] for k in ("state",)},
            "ckpt bytes",
            (r.get("last_checkpoint") or {}).get("bytes"),
        )
    except Exception as e:
        print("close failed", e)
    print("close took", round(time.time() - t, 1), "s")
    rss(d.pid)
    await c.close()


asyncio.run(main())
d.terminate()
d.wait()

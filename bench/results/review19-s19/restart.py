import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlmd.server.client import Client

home = Path("/work/s19/review19/h-rs")
home.mkdir(parents=True, exist_ok=True)
proj = Path("/work/s19/review19/proj-repr")
(home / "sleep.json").write_text(json.dumps(["```repl\nimport time\ntime.sleep(100)\n```"]))
os.environ["RLMD_HOME"] = str(home)
from rlmd import paths  # noqa: E402  (after RLMD_HOME is set)


async def main():
    d = subprocess.Popen([sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")])
    for _ in range(200):
        try:
            c = await Client.connect(paths.socket_path())
            break
        except OSError:
            await asyncio.sleep(0.1)
    await c.command(
        "rlmd.task.start",
        {
            "workspace": str(proj),
            "question": "q",
            "models": {"root": f"scripted:{home}/sleep.json"},
        },
    )
    await asyncio.sleep(5)
    kids = subprocess.run(
        ["pgrep", "-P", str(d.pid)], capture_output=True, text=True
    ).stdout.split()
    print("daemon children:", kids)
    d.send_signal(signal.SIGKILL)
    d.wait()
    await c.close()
    for i in range(4):
        t = time.time()
        d2 = subprocess.Popen(
            [sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / f"d{i}.log")],
            stderr=subprocess.PIPE,
        )
        try:
            rc = d2.wait(timeout=8)
            print(
                f"restart {i}: exited rc={rc} after {time.time() - t:.1f}s:",
                d2.stderr.read().decode()[-300:].strip(),
            )
        except subprocess.TimeoutExpired:
            print(f"restart {i}: running after 8 s")
            d2.terminate()
            d2.wait()
            break
        alive = [k for k in kids if os.path.exists(f"/proc/{k}")]
        print(
            "   old daemon's children alive:",
            alive,
            [open(f"/proc/{k}/cmdline").read().replace("\0", " ")[:80] for k in alive],
        )
        await asyncio.sleep(5)


asyncio.run(main())

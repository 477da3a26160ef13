"""SIGKILL the daemon with one task running and two queued in one workspace; restart; look."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from rlmd.server.client import Client, RpcError

home = Path("/work/s19/review19/h-kill")
home.mkdir(parents=True, exist_ok=True)
proj = Path("/work/s19/review19/proj-kill")
proj.mkdir(exist_ok=True)
(proj / "a.py").write_text("x = 1\n")
script = home / "sleep.json"
script.write_text(json.dumps(["```repl\nimport time\nkeep = [1, 2]\ntime.sleep(120)\n```"]))
os.environ["RLMD_HOME"] = str(home)
from rlmd import paths  # noqa: E402  (after RLMD_HOME is set)


def start():
    return subprocess.Popen(
        [sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")]
    )


async def connect():
    sock = paths.socket_path()
    for _ in range(200):
        try:
            return await Client.connect(sock)
        except OSError:
            await asyncio.sleep(0.1)
    raise SystemExit("no daemon")


async def main():
    d = start()
    c = await connect()
    ids = []
    for i in range(3):
        r = await c.command(
            "rlmd.task.start",
            {"workspace": str(proj), "question": f"q{i}", "models": {"root": f"scripted:{script}"}},
            timeout=60,
        )
        ids.append(r["run_id"])
        print("started", r["run_id"], r["state"], r.get("queue_position"))
    await asyncio.sleep(6)
    print([(await c.command("rlmd.task.status", {"run_id": i}))["state"] for i in ids])
    d.send_signal(signal.SIGKILL)
    d.wait()
    await c.close()
    d2 = start()
    c = await connect()
    h = await c.command("rlmd.health", {})
    print("interrupted_at_start", h.get("interrupted_at_start"))
    for i in ids:
        try:
            s = await c.command("rlmd.task.status", {"run_id": i})
            print(i, s.get("source"), s.get("state"), s.get("status"), s.get("error"))
        except RpcError as e:
            print(i, "ERR", e)
    runs = await c.command("rlmd.runs.list", {})
    print(
        "runs.list:",
        [(r["run_id"] if "run_id" in r else r.get("id"), r["status"]) for r in runs["runs"]],
    )
    v = await c.command("rlmd.workspace.variables", {"workspace": str(proj)})
    print("variables", v["source"], [x["name"] for x in v["variables"]])
    await c.close()
    d2.terminate()
    d2.wait()


asyncio.run(main())

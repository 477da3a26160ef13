"""REPL objects whose repr / len hang or explode; what workspace.variables, close do."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from rlmd.server.client import Client, RpcError

home = Path("/work/s19/review19/h-repr")
home.mkdir(parents=True, exist_ok=True)
proj = Path("/work/s19/review19/proj-repr")
proj.mkdir(exist_ok=True)
(proj / "a.py").write_text("x = 1\n")
os.environ["RLMD_HOME"] = str(home)
from rlmd import paths  # noqa: E402  (after RLMD_HOME is set)

d = subprocess.Popen([sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")])
CASES = {
    "repr_sleeps": "class H:\n    def __repr__(self):\n        import time\n        time.sleep(1000)\nh = H()",
    "len_sleeps": "class L(list):\n    def __len__(self):\n        import time\n        time.sleep(1000)\n        return 1\nl = L()",
    "repr_spins": "class S:\n    def __repr__(self):\n        while True: pass\ns = S()",
    "getattr_bomb": "class G:\n    def __getattribute__(self, n):\n        raise SystemExit(3)\ng = G()",
}


async def main():
    sock = paths.socket_path()
    for _ in range(200):
        try:
            c = await Client.connect(sock)
            break
        except OSError:
            await asyncio.sleep(0.1)
    for name, code in CASES.items():
        await c.command(
            "rlmd.workspace.reset", {"workspace": str(proj), "cancel_tasks": True}
        ) if False else None
        t = time.time()
        r = await c.command(
            "rlmd.workspace.exec",
            {"workspace": str(proj), "code": code, "timeout_s": 5},
            timeout=120,
        )
        print(
            name,
            "exec",
            round(time.time() - t, 1),
            "s error:",
            (r["error"] or "")[-150:],
            "timed_out",
            r["timed_out"],
            "restarted",
            r["kernel_restarted"],
        )
        for cmd, params in (("rlmd.workspace.variables", {}), ("rlmd.workspace.close", {})):
            t = time.time()
            try:
                v = await c.command(cmd, {"workspace": str(proj), **params}, timeout=150)
                out = {k: v[k] for k in v if k in ("source", "state")}
                if "variables" in v:
                    out["vars"] = [(x["name"], x.get("preview")) for x in v["variables"]]
                if "last_checkpoint" in v and v["last_checkpoint"]:
                    out["skipped"] = v["last_checkpoint"].get("skipped")
                print("  ", cmd, round(time.time() - t, 1), "s", out)
            except (RpcError, TimeoutError) as e:
                print("  ", cmd, round(time.time() - t, 1), "s", type(e).__name__, str(e)[:300])
    await c.close()


asyncio.run(main())
d.terminate()
d.wait()

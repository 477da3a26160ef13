import asyncio
import os
import subprocess
import sys
from pathlib import Path

from rlmd.server.client import Client, RpcError

home = Path("/work/s19/review19/h-cfg")
home.mkdir(parents=True, exist_ok=True)
os.environ["RLMD_HOME"] = str(home)
from rlmd import paths  # noqa: E402  (after RLMD_HOME is set)

d = subprocess.Popen([sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")])


async def main():
    for _ in range(200):
        try:
            c = await Client.connect(paths.socket_path())
            break
        except OSError:
            await asyncio.sleep(0.1)
    for name, text in (
        ("deep", "a = " + "[" * 2000 + "]" * 2000 + "\n"),
        ("big", "# x\n" * 300_000),
    ):
        proj = Path(f"/work/s19/review19/proj-cfg-{name}")
        proj.mkdir(exist_ok=True)
        (proj / "a.py").write_text("x = 1\n")
        (proj / ".rlmd.toml").write_text(text)
        for cmd, params in (
            (
                "rlmd.task.start",
                {"question": "q", "models": {"root": "scripted:/work/s19/review19/fin.json"}},
            ),
            ("rlmd.workspace.open", {}),
        ):
            try:
                r = await c.command(cmd, {"workspace": str(proj), **params}, timeout=60)
                print(name, cmd, "OK", str(r)[:200])
            except RpcError as e:
                print(name, cmd, e.code, e.message[:200])
    await c.close()


asyncio.run(main())
d.terminate()
d.wait()
print(open(home / "d.log").read()[-1500:])

"""After one edited file in a warm 30,000-file workspace: what the refresh costs, by part
(the walk that stats every file; binding the new codebase in the subprocess sandbox; the
root model's metadata). Session 23 (rescan23), for what is left after the watch."""
import asyncio, os, statistics, sys, time
from pathlib import Path
from rlmd.context import load_codebase, refresh_codebase
from rlmd.sandbox import create_sandbox
from rlmd.workspace.watch import FolderWatch

root, rounds = Path(sys.argv[1]), int(sys.argv[2])


async def main():
    ctx = load_codebase(root)
    box = create_sandbox("subprocess")
    from rlmd.workspace.manager import _no_calls

    await box.start(_no_calls)
    await box.load_context(ctx.value, codebase=True)
    walk, bind, meta, watched = [], [], [], []
    for i in range(rounds):
        (root / "pkg0000" / "mod00000.py").write_text(f"X = {i}\n")
        w = FolderWatch()
        t = time.perf_counter(); fresh = refresh_codebase(ctx, on_folder=w.add); walk.append(time.perf_counter() - t)
        w.close()
        t = time.perf_counter(); await box.load_context(fresh.value, codebase=True); bind.append(time.perf_counter() - t)
        t = time.perf_counter(); fresh.metadata(lambda s: len(s) // 4); meta.append(time.perf_counter() - t)
        ctx = fresh
    await box.close()
    m = lambda v: f"{statistics.median(v):.3f} s"
    print(f"{len(ctx.value)} files, {rounds} rounds, one file edited before each: walk (with a new watch) {m(walk)}, "
          f"bind in the sandbox {m(bind)}, metadata {m(meta)}; load {os.getloadavg()}")

asyncio.run(main())

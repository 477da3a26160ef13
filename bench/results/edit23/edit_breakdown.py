"""After one edited file in a warm workspace: the refresh by part (the partial walk, the
difference sent to the sandbox, the metadata with a chars//4 counter). Session 23 (edit23).
Run: edit_breakdown.py FOLDER ROUNDS [BACKEND]; edits FOLDER/pkg0000/mod00000.py (a
bench/scale_curve.py codebase)."""
import asyncio, os, statistics, sys, time, threading
from pathlib import Path
from rlmd.sandbox import create_sandbox
from rlmd.workspace import manager as m

root, rounds = Path(sys.argv[1]), int(sys.argv[2])
async def main():
    ctx, w = m._watched_load(root, threading.Event())
    box = create_sandbox(sys.argv[3] if len(sys.argv) > 3 else "subprocess")
    await box.start(m._no_calls)
    await box.load_context(ctx.value, codebase=True)
    ct = lambda s: len(s) // 4
    ctx.metadata(ct)
    walk, bind, meta = [], [], []
    for i in range(rounds):
        (root / "pkg0000" / "mod00000.py").write_text(f"X = {i:04d}\n")
        t = time.perf_counter(); fresh, w = await asyncio.to_thread(m._watched_refresh, ctx, w); w.clear(); walk.append(time.perf_counter() - t)
        t = time.perf_counter(); await box.update_codebase(fresh.value, *fresh.changes); bind.append(time.perf_counter() - t)
        t = time.perf_counter(); await asyncio.to_thread(fresh.metadata, ct); meta.append(time.perf_counter() - t)
        ctx = fresh
    r = await box.execute("print(len(context), context['pkg0000/mod00000.py'])")
    print(r.stdout.strip())
    await box.close()
    md = lambda v: f"{statistics.median(v):.4f} s"
    print(f"{len(ctx.value)} files, {rounds} rounds, one file edited before each: walk {md(walk)}, update in the sandbox {md(bind)}, metadata {md(meta)}; load {os.getloadavg()}")
asyncio.run(main())

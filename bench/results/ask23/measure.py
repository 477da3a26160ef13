"""Paired timing: rlmd ask (warm workspace) vs rlmd run on the same folder, scripted model."""
import json, os, subprocess, sys, time
from pathlib import Path

wt = Path("/work/wt-ask23")
folder = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
home = Path("/tmp/ask23/bench/home")
home.mkdir(parents=True, exist_ok=True)
env = {**os.environ, "RLMD_HOME": str(home), "PYTHONPATH": f"{wt}:{wt}/tui"}
model = f"scripted:{wt}/tests/helpers/scripted_models.py:cells"
q = json.dumps({"cells": ["print(len(context))\nFINAL(str(len(context)))"]})
py = "/work/main/.venv/bin/python"

def timed(args):
    t = time.perf_counter()
    p = subprocess.run([py, "-m", "rlmd", *args], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    assert p.returncode == 0, p.stderr[-2000:]
    return dt, p.stdout.strip()

first, ans = timed(["ask", q, "-m", model, "-w", folder, "-q", "--start-timeout", "120"])
print(f"first ask (daemon start + workspace load): {first:.2f}s answer={ans}")
asks, runs = [], []
for i in range(rounds):
    a, ans_a = timed(["ask", q, "-m", model, "-w", folder, "-q"])
    r, ans_r = timed(["run", q, "-m", model, "--context", folder, "-q"])
    assert ans_a == ans_r, (ans_a, ans_r)
    asks.append(a); runs.append(r)
    print(f"round {i+1}: ask {a:.3f}s  run {r:.3f}s  ratio {a/r:.2f}  load {os.getloadavg()[0]:.2f}")
asks.sort(); runs.sort()
print(f"median ask {asks[len(asks)//2]:.3f}s  median run {runs[len(runs)//2]:.3f}s  ratio {asks[len(asks)//2]/runs[len(runs)//2]:.2f}")

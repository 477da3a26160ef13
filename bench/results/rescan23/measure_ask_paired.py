"""Paired timing of `rlmd ask` in a warm workspace, before/after (session 23, rescan23):
alternating rounds of ask through a daemon of checkout A and one of checkout B (each its own
RLMD_HOME), scripted model. Adapted from measure.py (the ask23 helper's script).

Run: python measure_ask_paired.py FOLDER ROUNDS AFTER_CHECKOUT BEFORE_CHECKOUT
"""
import json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

folder, rounds = sys.argv[1], int(sys.argv[2])
roots = {"after": Path(sys.argv[3]), "before": Path(sys.argv[4])}
work = Path(tempfile.mkdtemp(prefix="ask-paired-"))
py = sys.executable
q = json.dumps({"cells": ["print(len(context))\nFINAL(str(len(context)))"]})


def env(label):
    home = work / label
    home.mkdir(exist_ok=True)
    root = roots[label]
    return {**os.environ, "RLMD_HOME": str(home), "PYTHONPATH": f"{root}:{root}/tui"}


def ask(label, *extra):
    model = f"scripted:{roots['after']}/tests/helpers/scripted_models.py:cells"
    t = time.perf_counter()
    p = subprocess.run([py, "-m", "rlmd", "ask", q, "-m", model, "-w", folder, "-q", *extra],
                       env=env(label), capture_output=True, text=True, cwd=work)
    dt = time.perf_counter() - t
    assert p.returncode == 0, p.stderr[-2000:]
    return dt, p.stdout.strip()


for label in roots:
    print(label, "first ask (daemon start + load): %.2fs" % ask(label, "--start-timeout", "120")[0])
times = {k: [] for k in roots}
try:
    for i in range(rounds):
        for label in roots:
            dt, ans = ask(label)
            times[label].append(dt)
        print(f"round {i + 1}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items())
              + f"  load {os.getloadavg()[0]:.2f}")
finally:
    for label in roots:  # the daemons ask started: SIGTERM by the pid in their home
        pid_file = work / label / "run" / "daemon.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), 15)
for k, v in times.items():
    print(f"median {k} {statistics.median(v):.3f}s (min {min(v):.3f}, max {max(v):.3f})")
print("load", os.getloadavg())

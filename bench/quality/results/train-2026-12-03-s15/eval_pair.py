"""issue 13, session 15 (session 13's script, only the paths changed: /work/s15/t, /work/s15/model.lock;
the code under test, a git archive of main, now has the repetition guard, rlmd/models/repetition.py,
on by default for every model): held-out rollouts of the
base and the tuned 0.5B, ONE PROCESS PER TASK,
base and tuned interleaved per task (order alternating), so load hits both alike; each process
killed as soon as its rollout row is in the store (session 10's lesson: a timed-out local call
kept decoding and slowed the next task). Budget of sessions 7-10: 1 sample, temperature 0,
max-iterations 6, max-depth 1, max-seconds 150, subprocess sandbox.
usage (under flock /work/s15/model.lock): python eval_pair.py BASE TUNED BASE_SET TUNED_SET
[DEADLINE_EPOCH]"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

base, tuned, base_set, tuned_set = sys.argv[1:5]
deadline = float(sys.argv[5]) if len(sys.argv) > 5 else time.time() + 1500
WT = os.environ.get("WT", "/work/s15/t/evalcode")  # a git archive of main
OUT = os.environ.get("OUT", "/work/s15/t")
MAX_S = "150"
os.chdir(OUT)
env = {**os.environ, "PYTHONPATH": f"{WT}:{WT}/tui", "RLMD_HOME": f"{OUT}/home"}

# one-task folders (the held-out set's manifest, one task line, its contexts linked)
held = "tasks/heldout"
tids = []
for line in open(f"{held}/tasks.jsonl"):
    rec = json.loads(line)
    tids.append(rec["id"])
    one = f"one/{rec['id']}"
    if not os.path.exists(f"{one}/tasks.jsonl"):
        os.makedirs(one, exist_ok=True)
        shutil.copy(f"{held}/manifest.json", one)
        with open(f"{one}/tasks.jsonl", "w") as f:
            f.write(line)
        for sub in ("contexts", ".codeqa-0"):
            if os.path.exists(f"{held}/{sub}"):
                os.symlink(os.path.abspath(f"{held}/{sub}"), f"{one}/{sub}")


def done(set_name: str) -> set[str]:
    if not os.path.exists(f"{OUT}/home/rlmd.db"):  # session 12: a home with no store yet
        return set()
    c = sqlite3.connect(f"file:{OUT}/home/rlmd.db?mode=ro", uri=True)
    try:
        rows = c.execute("select task_id from rollouts where rollout_set=?", (set_name,))
        return {r[0] for r in rows}
    except sqlite3.OperationalError:
        return set()
    finally:
        c.close()


log = open(f"eval-{base_set}-{tuned_set}.log", "a")  # noqa: SIM115
for k, tid in enumerate(tids):
    pair = [(base, base_set), (tuned, tuned_set)]
    # session 12: a task's pair runs whole or not at all before the deadline (the rest resumes
    # later, in the next turn at the lock), so both models of a task meet the same load
    todo = [s for _, s in pair if tid not in done(s)]
    if len(todo) == 2 and time.time() + 2 * (float(MAX_S) + 30) > deadline:
        print(f"{tid}: pair skipped, deadline", file=log, flush=True)
        sys.exit(0)
    for model, set_name in pair if k % 2 == 0 else pair[::-1]:
        if tid in done(set_name):
            continue
        if time.time() + float(MAX_S) + 60 > deadline:
            print(f"{tid} {set_name}: skipped, deadline", file=log, flush=True)
            sys.exit(0)
        load = os.getloadavg()
        cmd = [sys.executable, "-m", "rlmd", "train", "rollout", "--tasks", f"one/{tid}"]
        cmd += ["--model", model, "--samples", "1", "--temperature", "0", "--set", set_name]
        cmd += ["--max-iterations", "6", "--max-depth", "1", "--max-seconds", MAX_S]
        cmd += ["--sandbox", "subprocess"]
        start = time.strftime("%H:%M:%S", time.gmtime())
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
        t0 = time.time()
        while p.poll() is None and tid not in done(set_name) and time.time() - t0 < float(MAX_S) + 120:
            time.sleep(2)
        left = p.poll() is None
        if left:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        print(
            f"{tid} {set_name}: start {start} UTC, {time.time() - t0:.0f} s, killed after its row: "
            f"{left}, load before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}",
            file=log,
            flush=True,
        )

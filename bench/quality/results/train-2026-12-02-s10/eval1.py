"""issue 13, session 10: held-out rollouts, ONE PROCESS PER TASK, the process killed as soon as
its rollout row is in the store. Why: a local model call that ran out of the wall-clock budget
keeps decoding in its worker thread (a prompt's prefill cannot be aborted), so in one process
the next task's run competes with it, and the process does not exit until it ends (t15-s10:
the last row at 07:54:56, the process killed by its timeout at 08:03:28). Same command and
budget as eval.sh. usage: python eval1.py MODEL SET [MAX_SECONDS] [DEADLINE_EPOCH]"""

import os
import signal
import sqlite3
import subprocess
import sys
import time

model, set_name = sys.argv[1], sys.argv[2]
max_s = sys.argv[3] if len(sys.argv) > 3 else "150"
deadline = float(sys.argv[4]) if len(sys.argv) > 4 else time.time() + 1380
os.chdir("/work/s10/t10")
env = {
    **os.environ,
    "PYTHONPATH": "/work/wt-t10:/work/wt-t10/tui",
    "RLMD_HOME": "/work/s10/t10/home",
}


def done() -> set[str]:
    c = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
    try:
        rows = c.execute("select task_id from rollouts where rollout_set=?", (set_name,))
        return {r[0] for r in rows}
    finally:
        c.close()


log = open(f"eval1-{set_name}.log", "a")  # noqa: SIM115
for tid in sorted(os.listdir("one")):
    if tid in done():
        continue
    if time.time() + float(max_s) + 60 > deadline:
        print(f"{tid}: skipped, deadline", file=log, flush=True)
        break
    load = os.getloadavg()
    cmd = [sys.executable, "-m", "rlmd", "train", "rollout", "--tasks", f"one/{tid}"]
    cmd += ["--model", model, "--samples", "1", "--temperature", "0", "--set", set_name]
    cmd += ["--max-iterations", "6", "--max-depth", "1", "--max-seconds", max_s]
    cmd += ["--sandbox", "subprocess"]
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    t0 = time.time()
    while p.poll() is None and tid not in done() and time.time() - t0 < float(max_s) + 120:
        time.sleep(2)
    left = p.poll() is None
    if left:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    after = os.getloadavg()[0]
    print(
        f"{tid}: {time.time() - t0:.0f} s, killed after its row: {left}, "
        f"load before {load[0]:.2f}, after {after:.2f}",
        file=log,
        flush=True,
    )

"""issue 13 item 6, session 14 (t14): the GRPO run's steps as a table (log.jsonl of the run folder):
step, group (task), rewards, advantages, prompt and completion tokens, tokens scored, seconds, loss,
and the 1-minute load nearest the step's end (load.log; START = the run's first-step clock, HH:MM:SS).
usage: python steps.py RUN_DIR LOAD_LOG START"""

import datetime as dt
import json
import sys
from pathlib import Path

run, load_log, start = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
t0 = dt.datetime.strptime(start, "%H:%M:%S")
loads = []
for line in open(load_log):
    hms, one, *_ = line.split()
    loads.append((dt.datetime.strptime(hms, "%H:%M:%S"), one))
print("| step | group | rewards | advantages | prompt tok | completion tok | s | loss | load |")
print("|---|---|---|---|---|---|---|---|---|")
for line in (run / "log.jsonl").read_text().splitlines():
    r = json.loads(line)
    end = t0 + dt.timedelta(seconds=r["seconds"])
    load = min(loads, key=lambda x: abs((x[0] - end).total_seconds()))[1] if loads else "?"
    for g in r["groups"]:
        print(f"| {r['step']} | {g['task_id']} | {[round(x, 3) for x in g['rewards']]} | "
              f"{[round(a, 2) for a in g['advantages']]} | {g['prompt_tokens']} | "
              f"{g['completion_tokens']} | {r['step_seconds']:.0f} | {r['loss']:.4f} | {load} |")

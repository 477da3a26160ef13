"""The SFT's steps: seconds per step (differences of log.jsonl's 'seconds'; step 1 includes the
trainer's set-up), tokens per step (trainer_state.json's num_tokens), loss, learning rate, token
accuracy, and the 1-minute load sampled nearest the step's end (load.log). The clock time of
log.jsonl's zero: the last checkpoint's trainer_state.json mtime minus its step's seconds.
usage: python steps.py RUN_DIR LOAD_LOG"""

import glob
import json
import os
import sys

run, load_log = sys.argv[1:3]
log = [json.loads(x) for x in open(f"{run}/log.jsonl")]
ck = sorted(glob.glob(f"{run}/checkpoints/checkpoint-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
hist = {h["step"]: h for h in json.load(open(f"{ck[-1]}/trainer_state.json"))["log_history"] if "loss" in h}
loads = []
for line in open(load_log):
    p = line.split()
    if len(p) > 3 and p[1][0].isdigit():
        h, m, s = map(int, p[0].split(":"))
        loads.append((h * 3600 + m * 60 + s, float(p[1])))
last = int(ck[-1].rsplit("-", 1)[1])
at = next(r for r in log if r["step"] == last)
t0 = os.path.getmtime(f"{ck[-1]}/trainer_state.json") % 86400 - at["seconds"]
print("step end_utc seconds tokens loss lr token_acc load1")
prev_s, prev_tok = 0.0, 0
for r in log:
    st = hist.get(r["step"], {})
    tok = int(st.get("num_tokens", 0))
    end = t0 + r["seconds"]
    ld = min(loads, key=lambda x: abs(x[0] - end))[1] if loads else float("nan")
    e = int(end)
    print(
        f"{r['step']} {e // 3600:02d}:{e % 3600 // 60:02d}:{e % 60:02d} {r['seconds'] - prev_s:.1f} "
        f"{tok - prev_tok} {r['loss']:.3f} {r['learning_rate']:.3g} {st.get('mean_token_accuracy', float('nan')):.3f} {ld:.2f}"
    )
    prev_s, prev_tok = r["seconds"], tok

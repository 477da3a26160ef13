#!/bin/sh
# issue 13, session 19: every task set again after the reinstall (deterministic generators), same
# commands as sessions 15-17. Train: medium seeds 0, 1; train-pairs-x (both_have and
# both_exactly_one pairs tasks of medium seeds 2, 3, 5, ids suffixed -sN, contexts referenced in
# their seed's folder); train-um (the one user_most oolong task of small seed 8). Held-out: tiny,
# seeds 0 (A), 16 (B), 17 (C).
set -e
T=/work/s19/t; W=${W:-/work/wt-t19}
export PYTHONPATH=$W:$W/tui RLMD_HOME=$T/home
PY=/work/main/.venv/bin/python
cd $T/tasks
echo "start $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"
for s in 0 1 2 3 5; do $PY -m rlmd train tasks --split train --size medium --seed $s --out train-m$s; done
$PY -m rlmd train tasks --split train --size small --seed 8 --out train-s8
$PY -m rlmd train tasks --split heldout --size tiny --out heldout-a
$PY -m rlmd train tasks --split heldout --size tiny --seed 16 --out heldout-b
$PY -m rlmd train tasks --split heldout --size tiny --seed 17 --out heldout-c
$PY - <<'PY'
import json, os, shutil
def pick(out, srcs, keep):
    os.makedirs(out, exist_ok=True)
    shutil.copy(f"{srcs[0][1]}/manifest.json", out)
    n = 0
    with open(f"{out}/tasks.jsonl", "w") as f:
        for suffix, src in srcs:
            for line in open(f"{src}/tasks.jsonl"):
                rec = json.loads(line)
                if keep(rec):
                    rec["id"] += suffix
                    rec["context_ref"] = f"../{src}/{rec['context_ref']}"
                    f.write(json.dumps(rec) + "\n"); n += 1
    print(out, n, "tasks")
pick("train-pairs-x", [(f"-s{s}", f"train-m{s}") for s in (2, 3, 5)],
     lambda r: r["family"] == "pairs" and r["params"].get("template") in ("both_have", "both_exactly_one"))
pick("train-um", [("", "train-s8")],
     lambda r: r["family"] == "oolong" and r["params"].get("template") == "user_most")
PY
echo "end $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"

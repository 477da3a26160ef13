#!/bin/sh
# issue 13, session 8: the train-split teacher dataset with repair trajectories (no model use).
# Same task set and commands as session 6 (seed 0, size small, 2 samples per task), with the
# teacher's default repair share (0.3). Usage: sh teacher.sh WORKTREE OUTDIR
set -e
WT=${1:-/work/main}; OUT=${2:-/work/s8/repair-data}
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
mkdir -p "$OUT" && cd "$OUT"
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size small --out tasks/train
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 2 --set teacher > teacher.log 2>&1
$PY -m rlmd train export --format sft --set teacher --out sft.jsonl 2> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"
# a second set with 4 samples per task (more repair trajectories; same tasks)
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 4 --set teacher4 > teacher4.log 2>&1
$PY -m rlmd train export --format sft --set teacher4 --out sft4.jsonl 2> export4.log
cat export4.log
echo "end4 $(date -u +%H:%M:%S) $(uptime)"

#!/bin/sh
# issue 13, session 9: the train-split teacher dataset with repair trajectories, regenerated on
# current main (the system prompt changed since session 8). No model use.
# Usage: sh teacher.sh WORKTREE OUTDIR
set -e
WT=${1:-/work/wt-sft9}; OUT=${2:-/work/s9/sft9}
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
mkdir -p "$OUT" && cd "$OUT"
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size small --out tasks/train
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 2 --repair-share 0.3 --set teacher-s9 > teacher.log 2>&1
$PY -m rlmd train export --format sft --set teacher-s9 --out sft.jsonl 2> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"

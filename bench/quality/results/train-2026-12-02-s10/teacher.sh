#!/bin/sh
# issue 13, session 10: the train-split teacher dataset recorded FOLDED (as inference sees failed
# turns), exported plain and with the repair samples up-weighted. No model use.
# Usage: sh teacher.sh WORKTREE OUTDIR
set -e
WT=${1:-/work/wt-t10}; OUT=${2:-/work/s10/t10}
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
mkdir -p "$OUT" && cd "$OUT"
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size small --out tasks/train
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 2 --repair-share 0.3 --set teacher-s10m > teacher.log 2>&1
$PY -m rlmd train export --format sft --set teacher-s10m --out sft.jsonl 2> export.log
$PY -m rlmd train export --format sft --set teacher-s10m --out sft-r4.jsonl --repeat-repair 4 2>> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"

#!/bin/sh
# issue 13, session 11: tasks (train small, held-out tiny) and the teacher data, folded, exported
# plain and with the repair samples written 4 times (session 10's commands). No model use.
# Usage: sh teacher.sh WORKTREE OUTDIR
set -e
WT=${1:-/work/wt-t11}; OUT=${2:-/work/s11/t}
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
mkdir -p "$OUT/home/models" && cd "$OUT"
for f in "$HOME"/.local/share/rlmd/models/*.gguf; do ln -sf "$f" home/models/; done
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size small --out tasks/train
[ -f tasks/heldout/tasks.jsonl ] || $PY -m rlmd train tasks --split heldout --size tiny --out tasks/heldout
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 2 --repair-share 0.3 --set teacher-s11 > teacher.log 2>&1
$PY -m rlmd train export --format sft --set teacher-s11 --out sft.jsonl 2> export.log
$PY -m rlmd train export --format sft --set teacher-s11 --out sft-r4.jsonl --repeat-repair 4 2>> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"

#!/bin/sh
# issue 13, session 13: tasks (train small, held-out tiny) and the teacher data (session 11's teacher.sh;
# code e55b623: the sniah opening ends on one unindented print). No model use.
set -e
WT=/work/s13/t/code; OUT=/work/s13/t
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
mkdir -p "$OUT/home/models" && cd "$OUT"
for f in "$HOME"/.local/share/rlmd/models/*.gguf; do ln -sf "$f" home/models/; done
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size small --out tasks/train
[ -f tasks/heldout/tasks.jsonl ] || $PY -m rlmd train tasks --split heldout --size tiny --out tasks/heldout
$PY -m rlmd train rollout --tasks tasks/train --model teacher --samples 2 --repair-share 0.3 --set teacher-s13 > teacher.log 2>&1
$PY -m rlmd train export --format sft --set teacher-s13 --out sft.jsonl 2> export.log
$PY -m rlmd train export --format sft --set teacher-s13 --out sft-r4.jsonl --repeat-repair 4 2>> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"

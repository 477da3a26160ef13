#!/bin/sh
# issue 13 item 6, session 14 (t14): the home and the tasks of the first real GRPO run. No model use.
# Home /work/s14/g/home: the pulled GGUFs linked in, session 13's bench sources copied, session 13's
# dequantised float32 0.5B (its cache key is the GGUF's resolved path, size and mtime: the same file)
# linked so `rlmd train grpo` skips the ~5 min dequantisation. Tasks: the TRAIN split (seed 14),
# sniah and oolong only; pick/ = sniah 000-003 and oolong 000-003 (the 1,024-token contexts).
set -e
G=/work/s14/g; S13=/work/s13/t/home
export PYTHONPATH=/work/wt-t14:/work/wt-t14/tui RLMD_HOME=$G/home
PY=/work/main/.venv/bin/python
mkdir -p $G/home/models $G/home/cache/train-base && cd $G
for f in "$HOME"/.local/share/rlmd/models/*.gguf; do ln -sf "$f" home/models/; done
[ -d home/bench-data ] || cp -r $S13/bench-data home/
[ -d home/cache/llama-cpp-python ] || cp -r $S13/cache/llama-cpp-python home/cache/
for d in $S13/cache/train-base/*; do ln -sfn "$d" home/cache/train-base/; done
echo "start $(date -u +%H:%M:%S) $(uptime)"
[ -f tasks/train/tasks.jsonl ] || $PY -c '
from rlmd.train.tasks import generate_split
ts = generate_split("train", "tasks/train", seed=14, size="small", families=("sniah", "oolong"))
print(len(ts), "tasks")'
mkdir -p tasks/pick && cp tasks/train/manifest.json tasks/pick/
ln -sfn $G/tasks/train/contexts tasks/pick/contexts
grep -E '"id": "train-(sniah|oolong)-00[0-3]"' tasks/train/tasks.jsonl > tasks/pick/tasks.jsonl
$PY -c '
import json
for l in open("tasks/pick/tasks.jsonl"):
    r = json.loads(l); print(r["id"], r["metric"], r["length_tokens"], repr(r["answer"])[:40], r["question"][:90])'
echo "end $(date -u +%H:%M:%S) $(uptime)"

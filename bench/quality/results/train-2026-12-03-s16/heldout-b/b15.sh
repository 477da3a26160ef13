#!/bin/sh
# session 16 coordinator: the 1.5B on the fresh held-out set (seed 1000019), same budget as the 0.5B eval,
# one process per task; tasks not started by DEADLINE are skipped (and said so).
cd /work/s16/h2
export PYTHONPATH=/work/s16/t/evalcode:/work/s16/t/evalcode/tui RLMD_HOME=/work/s16/h2/home
DEADLINE=$(date -u -d "today 10:50" +%s)
for t in heldout-sniah-000 heldout-oolong-000 heldout-pairs-000 heldout-codeqa-000-tomllib heldout-sniah-001 heldout-oolong-001 heldout-codeqa-001-tomllib; do
  if [ "$(date -u +%s)" -ge "$DEADLINE" ]; then echo "skipped $t (deadline)"; continue; fi
  echo "start $t $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  /work/main/.venv/bin/python -m rlmd train rollout --tasks one/$t --model qwen2.5-coder-1.5b --set b15-s16b \
    --samples 1 --temperature 0 --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess 2>&1 | grep -E "^\[|error" 
done
echo "end $(date -u +%H:%M:%S)"

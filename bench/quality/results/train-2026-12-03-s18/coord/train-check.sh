#!/bin/sh
# coordinator s18: the tuned 0.5B (s18) on 6 TRAIN-split aggregation tasks it was trained on (same
# budget, default sub-model = base): does it skip the compute turn on tasks it has seen too?
T=/work/s18/t; PY=/work/main/.venv/bin/python; O=/work/s18/trainchk
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
DEADLINE=$(date -u -d "today 17:12" +%s)
cd $O
for d in one/*; do
  [ $(( $(date -u +%s) + 150 )) -gt $DEADLINE ] && { echo "$d skipped" >> log; continue; }
  echo "$d start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> log
  flock /work/s18/model.lock timeout -s KILL 300 $PY -m rlmd train rollout --tasks $d --model qwen0.5b-rlm-s18 \
    --samples 1 --temperature 0 --set ttrain-s18 --max-iterations 6 --max-depth 1 --max-seconds 150 \
    --sandbox subprocess >> out 2>&1
  echo "$d end rc=$? $(date -u +%H:%M:%S)" >> log
done
echo done >> log

#!/bin/sh
# coordinator s18: the 1.5B on held-out set C (seed 1000020, s17's), same budget and code (s17's eval
# archive of main 0439560) as the 0.5B eval there, one process per task, store = s17's, set b15-s17c.
T=/work/s17/t; PY=/work/main/.venv/bin/python; O=/work/s18/c15
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
DEADLINE=$(date -u -d "today 15:38" +%s)
cd $T/set-c
for t in heldout-sniah-000 heldout-oolong-000 heldout-pairs-000 heldout-codeqa-000-tomllib heldout-sniah-001 heldout-oolong-001 heldout-codeqa-001-tomllib; do
  if [ "$(date -u +%s)" -ge "$DEADLINE" ]; then echo "skipped $t (deadline)" >> $O/log; continue; fi
  echo "start $t $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> $O/log
  flock /work/s18/model.lock timeout -s KILL 300 $PY -m rlmd train rollout --tasks one/$t --model qwen2.5-coder-1.5b \
    --set b15-s17c --samples 1 --temperature 0 --max-iterations 6 --max-depth 1 --max-seconds 150 \
    --sandbox subprocess >> $O/out 2>&1
  echo "end $t rc=$? $(date -u +%H:%M:%S)" >> $O/log
done
(cd $T/evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db base-s17c tuned-s17c b15-s17c) > $O/summary.txt 2>&1
echo "done $(date -u +%H:%M:%S)" >> $O/log

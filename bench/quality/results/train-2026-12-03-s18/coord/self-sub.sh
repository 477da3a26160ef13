#!/bin/sh
# coordinator s18: the tuned 0.5B (qwen0.5b-rlm-s18) answering its OWN sub-calls (--sub-model = the
# adapter) on the 9 aggregation held-out tasks, same budget and code (t18's eval archive of main
# 1739354) as t18's eval, which ran sub-calls on the base (the new default). Isolates the default's
# effect on answers. Starts after the CI run; one process per task; skips tasks past DEADLINE.
while [ ! -e /work/s18/ci/done ]; do sleep 5; done
T=/work/s18/t; PY=/work/main/.venv/bin/python; O=/work/s18/self
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
DEADLINE=$(date -u -d "today 17:10" +%s)
cd $T
for X in a b c; do for K in oolong-000 oolong-001 pairs-000; do
  [ $(( $(date -u +%s) + 180 )) -gt $DEADLINE ] && { echo "$X $K skipped, deadline" >> $O/log; continue; }
  echo "$X $K start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> $O/log
  flock /work/s18/model.lock timeout -s KILL 300 $PY -m rlmd train rollout --tasks set-$X/one/heldout-$K \
    --model qwen0.5b-rlm-s18 --sub-model qwen0.5b-rlm-s18 --samples 1 --temperature 0 --set tself-s18$X \
    --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess >> $O/out 2>&1
  echo "$X $K end rc=$? $(date -u +%H:%M:%S)" >> $O/log
done; done
(cd $T/evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db tuned-s18a tself-s18a tuned-s18b tself-s18b tuned-s18c tself-s18c) > $O/summary.txt 2>&1
echo done > $O/done

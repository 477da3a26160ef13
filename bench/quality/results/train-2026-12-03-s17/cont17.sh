#!/bin/sh
# issue 13, session 17: the eval's continuation. The coordinator restarted run17.sh 30 minutes early
# (SFT 11:53-13:00, eval from 13:02) with EVAL_DEADLINE=13:31; the aggregation runs now take their
# sub-calls (up to 130 s each), so sets B and C did not fit by 13:31. This resumes them, same code
# (evalcode, main 0439560), same adapter and budget, under the model lock and the busy mark, until
# DEADLINE (13:55, the brief's end of the eval window): eval_pair.py skips the tasks already done
# and starts no pair that could overrun the deadline. Then the reports again (run17.sh's).
D=$(dirname "$(readlink -f "$0")")
S12=$D/../train-2026-12-02-s12; S13=$D/../train-2026-12-02-s13
T=/work/s17/t; NAME=qwen0.5b-rlm-s17; PY=/work/main/.venv/bin/python
cd $T
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
DEADLINE=$(date -u -d "today ${EVAL_DEADLINE:-13:55}" +%s)
touch /work/s17/eval.running
for X in b c; do
  flock /work/s17/model.lock sh -c "echo \"cont: set $X lock taken \$(date -u +%H:%M:%S), load \$(cut -d' ' -f1-3 /proc/loadavg)\" >> chain.log;
    OUT=$T/set-$X WT=$T/evalcode $PY $S13/eval_pair.py qwen2.5-coder-0.5b $NAME base-s17$X tuned-s17$X $DEADLINE"
  echo "cont: set $X end rc=$? $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> chain.log
done
rm -f /work/s17/eval.running
echo "cont: eval done, mark cleared $(date -u +%H:%M:%S)" >> chain.log
for X in a b c; do
  (cd evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db base-s17$X tuned-s17$X) > rows-$X.txt 2>&1
  $PY $S13/guard.py base-s17$X tuned-s17$X > guard-$X.txt 2>&1
  for S in base-s17$X tuned-s17$X; do
    for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
      echo "######## $S $TID"; $PY $S13/traj2.py $S $TID
    done > traj-$S.txt 2>&1
  done
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
    echo "######## tuned-s17$X $TID"; $PY $S13/eval-s14/calls.py tuned-s17$X $TID
  done > calls-tuned-$X.txt 2>&1
done
echo "cont: report done $(date -u +%H:%M:%S)" >> chain.log

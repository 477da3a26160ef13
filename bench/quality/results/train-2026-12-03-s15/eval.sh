#!/bin/sh
# issue 13, session 15 (session 13's eval.sh, paths moved to /work/s15; before that session 12's;
# after the SFT has stopped, (1) convert the adapter if `rlmd models` does not know it yet
# (no model run: outside the lock), (2) a git archive of main into /work/s15/t/evalcode (once; its
# commit in chain.log: the code under test has the repetition guard on by default), (3) in the model
# lock, base and tuned 0.5B on the 7 held-out tasks, one process per task, interleaved (eval_pair.py,
# session 12's budget), (4) the per-task rows, each run's last prompt, and which root calls the
# repetition guard ended.
# usage: sh eval.sh EVAL_DEADLINE_EPOCH     (e.g. $(date -d 'today 22:40' +%s))
D=$(dirname "$(readlink -f "$0")")
# the eval scripts are session 13's (this session's copies differed only in default paths: OUT, WT given here)
S13=$D/../train-2026-12-02-s13
T=/work/s15/t
NAME=qwen0.5b-rlm-s15
PY=/work/main/.venv/bin/python
cd $T
if [ ! -d $T/evalcode ]; then
  mkdir -p $T/evalcode && git -C /work/main archive main | tar -x -C $T/evalcode
  echo "evalcode = git archive of main $(git -C /work/main rev-parse --short main) $(date -u +%H:%M:%S)" >> chain.log
fi
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
if [ ! -f $T/home/models/adapters/$NAME.json ]; then
  echo "convert start $(date -u +%H:%M:%S) $(uptime)" >> chain.log
  $PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> chain.log 2>&1
  echo "convert end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
fi
exec 9> /work/s15/model.lock
echo "eval.sh lock wait $(date -u +%H:%M:%S)" >> chain.log
flock 9
echo "lock taken $(date -u +%H:%M:%S); eval start $(uptime)" >> chain.log
OUT=$T WT=$T/evalcode $PY "$S13/eval_pair.py" qwen2.5-coder-0.5b $NAME base-s15 tuned-s15 "$1"
echo "eval end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
flock -u 9
(cd $T/evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db base-s15 tuned-s15) > $T/rows.txt 2>&1
$PY "$S13/guard.py" base-s15 tuned-s15 > $T/guard.txt 2>&1
for S in base-s15 tuned-s15; do
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' $T/tasks/heldout/tasks.jsonl); do
    echo "######## $S $TID"; $PY "$S13/traj2.py" $S $TID
  done > $T/traj-$S.txt 2>&1
done
echo "report done $(date -u +%H:%M:%S)" >> chain.log

#!/bin/sh
# issue 13, session 19: the measured chain, started once (in /work/s19/t, private data).
#  START (18:40)     load log every minute; SFT on sft-mix.jsonl, session 17's recipe (fresh LoRA
#                    r16/a32 on the top 8 blocks of the 0.5B, fp32, --threads 2, --max-length 2048,
#                    a checkpoint every 2 steps), in its own session, its autogroup set to nice 0
#                    right after it starts (others run at 10), stopped by `timeout` at SFT_END
#                    (19:38) whatever the step.
#  then              a git archive of main (the eval's code).
#  then, not waiting for anything else: /work/s19/t19-eval.running, convert the last checkpoint,
#                    then under flock /work/s19/model.lock the TUNED model only, with session 13's
#                    eval_pair.py (its base and tuned the same model and set: a task done once is
#                    skipped the second time), one process per task, --samples 1 --temperature 0
#                    --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess;
#                    sub-calls on the adapter's base (rlmd's default since 5ae1259). Sets A, B, C
#                    in that order, each in its own folder. A task starts only if it can end by
#                    EVAL_END (19:58): eval_pair.py skips a task when now + 2 x 180 s passes its
#                    deadline argument, so it is given EVAL_END + 180 s. Set C is what gets cut.
#  then              clear the mark; reports (rollout rows, guard, trajectories, calls, steps).
D=${D:-$(dirname "$(readlink -f "$0")")}  # the results folder (set it when running a copy)
S12=$D/../train-2026-12-02-s12; S13=$D/../train-2026-12-02-s13
T=/work/s19/t; NAME=qwen0.5b-rlm-s19; PY=/work/main/.venv/bin/python
at() { date -u -d "today $1" +%s; }
wait_until() { NOW=$(date -u +%s); [ "$NOW" -lt "$(at "$1")" ] && sleep $(( $(at "$1") - NOW )); }
stamp() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
cd $T
echo "chain started $(stamp), waiting for ${START:-18:40}" >> chain.log
wait_until ${START:-18:40}
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log; sleep 60; done) &
LOADLOG=$!
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
LIMIT=$(( $(at ${SFT_END:-19:38}) - $(date -u +%s) ))
echo "sft start $(stamp) limit=${LIMIT}s code $(cat code.txt)" >> sft.log
echo "sft start $(stamp) limit=${LIMIT}s" >> chain.log
setsid timeout $LIMIT $PY -m rlmd train sft --base qwen2.5-coder-0.5b --data sft-mix.jsonl \
  --out $NAME --steps ${STEPS:-110} --save-steps 2 --max-length 2048 --lora-layers 8 --threads 2 \
  --precision fp32 --no-convert >> sft.log 2>&1 &
SFT=$!
sleep 1
echo 0 > /proc/$SFT/autogroup && echo "sft pid $SFT autogroup: $(cat /proc/$SFT/autogroup)" >> chain.log
wait $SFT
RC=$?
echo "sft end rc=$RC $(stamp)" >> sft.log
echo "sft end rc=$RC $(stamp)" >> chain.log
rm -rf evalcode && mkdir evalcode && git -C /work/main archive main | tar -x -C evalcode
echo "evalcode = git archive of main $(git -C /work/main rev-parse --short main) $(stamp)" >> chain.log
touch /work/s19/t19-eval.running
export PYTHONPATH=$T/evalcode:$T/evalcode/tui
echo "convert start $(stamp)" >> chain.log
$PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(stamp)" >> chain.log
DEADLINE=$(( $(at ${EVAL_END:-19:58}) + 180 ))
for X in a b c; do
  SRC=$T/tasks/heldout-$X
  mkdir -p set-$X/tasks && ln -sfn $SRC set-$X/tasks/heldout && ln -sfn $T/home set-$X/home
  flock /work/s19/model.lock sh -c "echo \"set $X ($SRC): lock taken \$(date -u +%H:%M:%S), load \$(cut -d' ' -f1-3 /proc/loadavg)\" >> chain.log;
    OUT=$T/set-$X WT=$T/evalcode $PY $S13/eval_pair.py $NAME $NAME tuned-s19$X tuned-s19$X $DEADLINE"
  echo "set $X end rc=$? $(stamp)" >> chain.log
done
rm -f /work/s19/t19-eval.running
echo "eval done, mark cleared $(stamp)" >> chain.log
for X in a b c; do
  (cd evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db tuned-s19$X) > rows-$X.txt 2>&1
  $PY $S13/guard.py tuned-s19$X > guard-$X.txt 2>&1
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
    echo "######## tuned-s19$X $TID"; $PY $S13/traj2.py tuned-s19$X $TID
  done > traj-tuned-s19$X.txt 2>&1
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
    echo "######## tuned-s19$X $TID"; $PY $S13/eval-s14/calls.py tuned-s19$X $TID
  done > calls-tuned-$X.txt 2>&1
done
$PY $S12/steps.py home/train/$NAME load.log > steps.txt 2>&1
echo "report done $(stamp)" >> chain.log
kill $LOADLOG

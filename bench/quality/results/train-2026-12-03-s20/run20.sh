#!/bin/sh
# issue 13, session 20: session 18's mix trained again under another seed (run-to-run spread).
#  The data: session 17's teacher.sh (sets renamed teacher-s20-*) on a git archive of main d442e2c,
#  whose teacher is session 18's again; session 18's mix18.py, whose summary (mix.txt) came out
#  identical to session 18's. The chain is session 19's run19.sh with three changes: the SFT gets
#  `--seed 1` (session 18 trained with the default, 0), 100 steps as session 18 asked for, and the
#  times below; nothing else runs on the machine but the coordinator's light work.
#  START             load log every minute; SFT (fresh LoRA r16/a32 on the top 8 blocks of the
#                    0.5B, fp32, --threads 2, --max-length 2048, a checkpoint every 2 steps) in
#                    its own session at autogroup nice 0, stopped by `timeout` at SFT_END.
#  then              a git archive of main (the eval's code); convert the last checkpoint; under
#                    flock /work/s20/model.lock the TUNED model only with session 13's
#                    eval_pair.py, one process per task, --samples 1 --temperature 0
#                    --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess,
#                    sub-calls on the adapter's base; sets A, B, C; a task starts only if it can
#                    end by EVAL_END. Then the reports.
D=${D:-$(dirname "$(readlink -f "$0")")}  # the results folder (set it when running a copy)
S12=$D/../train-2026-12-02-s12; S13=$D/../train-2026-12-02-s13
T=/work/s20/t; NAME=qwen0.5b-rlm-s20; PY=/work/main/.venv/bin/python
at() { date -u -d "today $1" +%s; }
wait_until() { NOW=$(date -u +%s); [ "$NOW" -lt "$(at "$1")" ] && sleep $(( $(at "$1") - NOW )); }
stamp() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
cd $T
echo "chain started $(stamp), waiting for ${START:-20:55}" >> chain.log
wait_until ${START:-20:55}
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log; sleep 60; done) &
LOADLOG=$!
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
LIMIT=$(( $(at ${SFT_END:-22:10}) - $(date -u +%s) ))
echo "sft start $(stamp) limit=${LIMIT}s code $(cat code.txt)" >> sft.log
echo "sft start $(stamp) limit=${LIMIT}s" >> chain.log
setsid timeout $LIMIT $PY -m rlmd train sft --base qwen2.5-coder-0.5b --data sft-mix.jsonl \
  --out $NAME --steps ${STEPS:-100} --seed ${SEED:-1} --save-steps 2 --max-length 2048 --lora-layers 8 --threads 2 \
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
touch /work/s20/t20-eval.running
export PYTHONPATH=$T/evalcode:$T/evalcode/tui
echo "convert start $(stamp)" >> chain.log
$PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(stamp)" >> chain.log
DEADLINE=$(( $(at ${EVAL_END:-22:40}) + 180 ))
for X in a b c; do
  SRC=$T/tasks/heldout-$X
  mkdir -p set-$X/tasks && ln -sfn $SRC set-$X/tasks/heldout && ln -sfn $T/home set-$X/home
  flock /work/s20/model.lock sh -c "echo \"set $X ($SRC): lock taken \$(date -u +%H:%M:%S), load \$(cut -d' ' -f1-3 /proc/loadavg)\" >> chain.log;
    OUT=$T/set-$X WT=$T/evalcode $PY $S13/eval_pair.py $NAME $NAME tuned-s20$X tuned-s20$X $DEADLINE"
  echo "set $X end rc=$? $(stamp)" >> chain.log
done
rm -f /work/s20/t20-eval.running
echo "eval done, mark cleared $(stamp)" >> chain.log
for X in a b c; do
  (cd evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db tuned-s20$X) > rows-$X.txt 2>&1
  $PY $S13/guard.py tuned-s20$X > guard-$X.txt 2>&1
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
    echo "######## tuned-s20$X $TID"; $PY $S13/traj2.py tuned-s20$X $TID
  done > traj-tuned-s20$X.txt 2>&1
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' set-$X/tasks/heldout/tasks.jsonl); do
    echo "######## tuned-s20$X $TID"; $PY $S13/eval-s14/calls.py tuned-s20$X $TID
  done > calls-tuned-$X.txt 2>&1
done
$PY $S12/steps.py home/train/$NAME load.log > steps.txt 2>&1
echo "report done $(stamp)" >> chain.log
kill $LOADLOG

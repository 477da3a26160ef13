#!/bin/sh
# issue 13, session 17: the measured chain, started once. At START (12:25 UTC): the load log (every
# minute) and the SFT on sft-mix.jsonl, session 16's recipe (fresh LoRA r16/a32 on the top 8 blocks
# of the 0.5B, fp32, --threads 2, --max-length 2048, a checkpoint every 2 steps), stopped by
# `timeout` at SFT_END (13:25) whatever the step. At EVAL_CODE (13:26) a git archive of main; at
# EVAL_START (13:27), not waiting for anything else: mark the machine busy (/work/s17/eval.running),
# convert the last checkpoint, and under flock /work/s17/model.lock run session 13's eval_pair.py
# (base and tuned 0.5B interleaved, one process per held-out task, --samples 1 --temperature 0
# --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess) on three held-out sets
# in order, A (seed 1000003), B (1000019), C (1000020), each in its own folder (the sets share
# task ids) with OUT/WT set; one DEADLINE for all (13:56: eval_pair starts no pair that could
# overrun it, so set C is what gets cut). Then clear the mark, and the reports: the rollout
# report, session 13's guard.py / traj2.py, session 14's calls.py, session 12's steps.py.
D=$(dirname "$(readlink -f "$0")")
S12=$D/../train-2026-12-02-s12; S13=$D/../train-2026-12-02-s13
T=/work/s17/t; NAME=qwen0.5b-rlm-s17; PY=/work/main/.venv/bin/python
at() { date -u -d "today $1" +%s; }
wait_until() { NOW=$(date -u +%s); [ "$NOW" -lt "$(at "$1")" ] && sleep $(( $(at "$1") - NOW )); }
cd $T
wait_until ${START:-12:25}
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log; sleep 60; done) &
LOADLOG=$!
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
LIMIT=$(( $(at ${SFT_END:-13:25}) - $(date -u +%s) ))
echo "sft start $(date -u +%H:%M:%S) limit=${LIMIT}s $(cat code.txt) load $(cut -d' ' -f1-3 /proc/loadavg)" >> sft.log
sh -c 'echo 10 > /proc/self/autogroup; exec "$@"' sh timeout $LIMIT $PY -m rlmd train sft \
  --base qwen2.5-coder-0.5b --data sft-mix.jsonl --out $NAME --steps ${STEPS:-120} --save-steps 2 \
  --max-length 2048 --lora-layers 8 --threads 2 --precision fp32 --no-convert >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> sft.log
wait_until ${EVAL_CODE:-13:26}
rm -rf evalcode && mkdir evalcode && git -C /work/main archive main | tar -x -C evalcode
echo "evalcode = git archive of main $(git -C /work/main rev-parse --short main) $(date -u +%H:%M:%S)" >> chain.log
wait_until ${EVAL_START:-13:27}
touch /work/s17/eval.running
export PYTHONPATH=$T/evalcode:$T/evalcode/tui
echo "convert start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> chain.log
$PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(date -u +%H:%M:%S)" >> chain.log
DEADLINE=$(at ${EVAL_DEADLINE:-13:56})
for X in a b c; do
  case $X in a) SRC=/work/s13/t/tasks/heldout;; b) SRC=/work/s16/h2/tasks/heldout;; c) SRC=$T/tasks/heldout-c;; esac
  mkdir -p set-$X/tasks && ln -sfn $SRC set-$X/tasks/heldout && ln -sfn $T/home set-$X/home
  flock /work/s17/model.lock sh -c "echo \"set $X ($SRC): lock taken \$(date -u +%H:%M:%S), load \$(cut -d' ' -f1-3 /proc/loadavg)\" >> chain.log;
    OUT=$T/set-$X WT=$T/evalcode $PY $S13/eval_pair.py qwen2.5-coder-0.5b $NAME base-s17$X tuned-s17$X $DEADLINE"
  echo "set $X end rc=$? $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> chain.log
done
rm -f /work/s17/eval.running
echo "eval done, mark cleared $(date -u +%H:%M:%S)" >> chain.log
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
$PY $S12/steps.py home/train/$NAME load.log > steps.txt 2>&1
echo "report done $(date -u +%H:%M:%S)" >> chain.log
kill $LOADLOG

#!/bin/sh
# issue 13 item 6, session 14 (t14), optional after run.sh: the GRPO adapter (qwen0.5b-grpo-s14) on the
# same 8 train tasks with the same rollout settings and the same sampling seeds (sample k: 1234 + k),
# set grpo-s14-after, in the model lock, stopped at END (HH:MM UTC); then both sets' summaries.
# Same tasks it trained on: this says whether the steps moved the policy, not whether it generalises.
# (MODEL, SET, TASKS, CODE from the environment: the clipped run's adapter, and the oolong-first order)
G=/work/s14/g; PY=/work/main/.venv/bin/python; CODE=${CODE:-$G/code}
MODEL=${MODEL:-qwen0.5b-grpo-s14}; SET=${SET:-grpo-s14-after}; TASKS=${TASKS:-$G/tasks/pick}
export PYTHONPATH=$CODE:$CODE/tui RLMD_HOME=$G/home
END=$(date -u -d "today $1" +%s)
log() { echo "$* $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> $G/chain.log; }
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> $G/load.log; sleep 60; done) &
LOADLOG=$!
trap 'kill $LOADLOG' EXIT
log "after $SET lock wait"
exec 9> /work/s14/model.lock
flock 9
left=$((END - $(date +%s)))
log "after $SET start (${left}s)"
[ $left -gt 120 ] && timeout -k 20 $left $PY -m rlmd train rollout --tasks $TASKS \
  --model $MODEL --samples 4 --temperature 1.0 --set $SET --parallel 2 \
  --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess \
  >> $G/$SET.out 2>> $G/$SET.err
log "after $SET end rc=$?"
flock -u 9
for S in grpo-s14 $SET; do echo "## $S"; $PY -m rlmd train summary --set $S; done > $G/summary-$SET.txt 2>&1

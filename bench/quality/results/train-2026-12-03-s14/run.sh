#!/bin/sh
# issue 13 item 6, session 14 (t14): the first real GRPO run, base qwen2.5-coder-0.5b, on this machine.
# After the coordinator's held-out eval ("report done" in /work/s13/t/chain.log), each model phase in
# /work/s14/model.lock (taken per phase, so a helper's short model command can pass in between):
#  1. rollout: tasks/pick (train split, seed 14: sniah 000-003, oolong 000-003), K=4 samples at
#     temperature 1.0, 2 at once (each sample index its own llama.cpp instance, 1 thread), budget of the
#     held-out evals (6 iterations, depth 1, 150 s); stopped at ROLLOUT_END (resumable set `grpo-s14`);
#  2. export --format grpo (all groups, and the default: zero-advantage groups dropped) + groups.py;
#  3. grpo: LoRA r16/a32 on the top 8 blocks, fp32, 2 threads, lr 1e-4, 1 group a step, adapter saved
#     every step, --max-seconds so the steps end by GRPO_END (at most 25 min);
#  4. convert (LoRA GGUF, registered as qwen0.5b-grpo-s14) and one smoke `rlmd run` with it.
# The code is a git archive of branch t14 (CODE); all output in $G (chain.log: times, 1/5/15-min load).
# usage: sh run.sh ROLLOUT_END GRPO_END STOP (HH:MM UTC; STOP: no phase starts after it)
# (MODEL, BASE, CONVERT_BASE, G, NAME, WAIT_FILE, LOCK, LORA_LAYERS, FAKE_REWARDS from the
# environment: the test of this script with the tiny random model, whose rewards are all 0)
G=${G:-/work/s14/g}; D=$(dirname "$(readlink -f "$0")")
PY=/work/main/.venv/bin/python; CODE=$G/code; NAME=${NAME:-qwen0.5b-grpo-s14}; SET=grpo-s14
MODEL=${MODEL:-qwen2.5-coder-0.5b}; BASE=${BASE:-$MODEL}; CONVERT_BASE=${CONVERT_BASE:-$MODEL}
WAIT_FILE=${WAIT_FILE:-/work/s13/t/chain.log}; LOCK=${LOCK:-/work/s14/model.lock}
epoch() { date -u -d "today $1" +%s; }
R_END=$(epoch "$1"); G_END=$(epoch "$2"); STOP=$(epoch "$3")
log() { echo "$* $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> $G/chain.log; }
cd $G
if [ ! -d $CODE ]; then
  mkdir -p $CODE && git -C /work/wt-t14 archive t14 | tar -x -C $CODE
  log "code = git archive of t14 $(git -C /work/wt-t14 rev-parse --short t14)"
fi
export PYTHONPATH=$CODE:$CODE/tui RLMD_HOME=$G/home
RLMD="$PY -m rlmd"
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> $G/load.log; sleep 60; done) &
LOADLOG=$!
trap 'kill $LOADLOG' EXIT
log "waiting for the eval"
until grep -q "report done" $WAIT_FILE; do sleep 20; done
log "eval done"

# 1. rollouts
log "rollout lock wait"
exec 9> $LOCK
flock 9
left=$((R_END - $(date +%s)))
log "rollout start (${left}s)"
if [ $left -gt 120 ]; then
  timeout -k 20 $left $RLMD train rollout --tasks $G/tasks/pick --model $MODEL --samples 4 \
    --temperature 1.0 --set $SET --parallel 2 --max-iterations 6 --max-depth 1 --max-seconds 150 \
    --sandbox subprocess > $G/rollout.out 2> $G/rollout.err
  log "rollout end rc=$?"
fi
flock -u 9
$RLMD train summary --set $SET > $G/summary.txt 2>&1

# 2. export
$RLMD train export --format grpo --set $SET --out $G/groups-all.jsonl --keep-zero-advantage 2>> $G/export.log
$RLMD train export --format grpo --set $SET --out $G/groups.jsonl 2>> $G/export.log
$PY "$D/groups.py" $G/home/rlmd.db $G/groups-all.jsonl > $G/groups.txt 2>&1
if [ -n "$FAKE_REWARDS" ]; then  # the tiny model's test only
  $PY -c 'import json,sys; [print(json.dumps({**g, "rewards": [1.0, 0.0, 0.5, 0.0][:len(g["rewards"])]}))
    for g in map(json.loads, open(sys.argv[1]))]' $G/groups-all.jsonl > $G/groups.jsonl
fi
log "export done: $(wc -l < $G/groups.jsonl) groups with a spread of $(wc -l < $G/groups-all.jsonl)"

# 3. grpo
[ $(date +%s) -lt $STOP ] || { log "past STOP before grpo"; exit 1; }
log "grpo lock wait"
flock 9
budget=$((G_END - $(date +%s) - 90)); [ $budget -gt 1500 ] && budget=1500
log "grpo start (budget ${budget}s)"
$RLMD train grpo --base $BASE --data $G/groups.jsonl --out $NAME --steps 200 \
  --max-seconds $budget --lora-layers ${LORA_LAYERS:-8} --threads 2 --precision fp32 --save-steps 1 \
  --no-convert > $G/grpo.out 2> $G/grpo.err
log "grpo end rc=$?"
flock -u 9

# 4. convert + smoke run
[ $(date +%s) -lt $STOP ] || { log "past STOP before convert"; exit 1; }
log "convert start"
$RLMD train convert $NAME --base $CONVERT_BASE >> $G/convert.log 2>&1
log "convert end rc=$?"
$RLMD models > $G/models.txt 2>&1
[ $(date +%s) -lt $STOP ] || { log "past STOP before the smoke run"; exit 1; }
Q=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["question"])' $G/tasks/pick/tasks.jsonl)
flock 9
log "smoke start"
timeout -k 10 200 $RLMD run --model $NAME --max-iterations 6 --max-depth 1 --max-seconds 150 \
  -c $G/tasks/pick/contexts/sniah-000.txt "$Q" > $G/smoke.out 2> $G/smoke.err
log "smoke end rc=$?"
flock -u 9
log "all done"

#!/bin/sh
# issue 13 item 6, session 14 (t14), after run.sh: the unclipped adapter collapsed (every turn `1332`).
#  a. the unclipped adapter's rollouts on the train tasks, oolong first (tasks/order), set grpo-s14-after,
#     until A_END (after.sh; its first try on tasks/pick was stopped to make room);
#  b. the same GRPO with the clipped surrogate (code2 = git archive of main 8dd259e: --clip 0.2, the
#     default), same groups, options and seed, --steps 27 (the unclipped run's count) within C_SECONDS;
#     convert, registered as qwen0.5b-grpo-clip-s14; the same smoke `rlmd run`;
#  c. its rollouts like (a), set grpo-clip-s14-after, until STOP.
# Rollouts use code (6db66ca, the base rollouts' code); only the training uses code2.
# usage: sh run2.sh A_END C_SECONDS STOP
G=/work/s14/g; D=$(dirname "$(readlink -f "$0")"); PY=/work/main/.venv/bin/python
NAME=qwen0.5b-grpo-clip-s14
log() { echo "$* $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> $G/chain.log; }
cd $G
if [ ! -d $G/code2 ]; then
  mkdir -p $G/code2 && git -C /work/main archive 8dd259e | tar -x -C $G/code2
  log "code2 = git archive of main 8dd259e"
fi
TASKS=$G/tasks/order sh "$D/after.sh" "$1"
export RLMD_HOME=$G/home
exec 9> /work/s14/model.lock
log "grpo-clip lock wait"
flock 9
log "grpo-clip start (max ${2}s)"
PYTHONPATH=$G/code2:$G/code2/tui $PY -m rlmd train grpo --base qwen2.5-coder-0.5b \
  --data $G/groups.jsonl --out $NAME --steps 27 --max-seconds "$2" --lora-layers 8 --threads 2 \
  --precision fp32 --save-steps 1 --clip 0.2 --no-convert > $G/grpo-clip.out 2> $G/grpo-clip.err
log "grpo-clip end rc=$?"
PYTHONPATH=$G/code2:$G/code2/tui $PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> $G/convert.log 2>&1
log "convert clip end rc=$?"
Q=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["question"])' $G/tasks/pick/tasks.jsonl)
log "smoke-clip start"
PYTHONPATH=$G/code:$G/code/tui timeout -k 10 200 $PY -m rlmd run --model $NAME --max-iterations 6 \
  --max-depth 1 --max-seconds 150 -c $G/tasks/pick/contexts/sniah-000.txt "$Q" > $G/smoke-clip.out 2> $G/smoke-clip.err
log "smoke-clip end rc=$?"
flock -u 9
exec 9>&-
MODEL=$NAME SET=grpo-clip-s14-after TASKS=$G/tasks/order sh "$D/after.sh" "$3"
log "run2 done"

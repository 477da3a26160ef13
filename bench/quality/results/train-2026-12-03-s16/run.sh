#!/bin/sh
# issue 13, session 16: the measured chain, started once. At START (09:05 UTC) the load log (every
# minute) and the hour of SFT on sft-mix.jsonl (session 13's recipe as session 15 ran it: fresh LoRA
# r16/a32 on the top 8 blocks of the 0.5B, fp32, --threads 2, --max-length 2048, a checkpoint every
# 2 steps), stopped by `timeout` at SFT_END (10:05) whatever the step. Then wait for the coordinator's
# final CI (/work/s16/ci/done written after CI_FROM, 09:45) or EVAL_LATEST (10:20) at the latest,
# mark the machine busy (/work/s16/eval.running), convert the last checkpoint, and under
# flock /work/s16/model.lock run session 13's eval_pair.py (base and tuned 0.5B, one process per
# held-out task, interleaved, --samples 1 --temperature 0 --max-iterations 6 --max-depth 1
# --max-seconds 150 --sandbox subprocess) with OUT/WT set to this session's folders; then session
# 13's guard.py / traj2.py and the rollout report, and clear the mark.
D=$(dirname "$(readlink -f "$0")")
S13=$D/../train-2026-12-02-s13
T=/work/s16/t; NAME=qwen0.5b-rlm-s16; PY=/work/main/.venv/bin/python
at() { date -u -d "today $1" +%s; }
cd $T
NOW=$(date -u +%s); [ "$NOW" -lt "$(at ${START:-09:05})" ] && sleep $(( $(at ${START:-09:05}) - NOW ))
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log; sleep 60; done) &
LOADLOG=$!
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
LIMIT=$(( $(at ${SFT_END:-10:05}) - $(date -u +%s) ))
echo "sft start $(date -u +%H:%M:%S) limit=${LIMIT}s code=$(cat code.txt) $(uptime)" >> sft.log
sh -c 'echo 10 > /proc/self/autogroup; exec "$@"' sh timeout $LIMIT $PY -m rlmd train sft \
  --base qwen2.5-coder-0.5b --data sft-mix.jsonl --out $NAME --steps ${STEPS:-120} --save-steps 2 \
  --max-length 2048 --lora-layers 8 --threads 2 --precision fp32 --no-convert >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log
CI_FROM=$(at ${CI_FROM:-09:45}); LATEST=$(at ${EVAL_LATEST:-10:20})
ci_done() { [ -e /work/s16/ci/done ] && [ "$(stat -c %Y /work/s16/ci/done)" -ge "$CI_FROM" ]; }
while ! ci_done && [ "$(date -u +%s)" -lt "$LATEST" ]; do sleep 10; done
echo "ci done: $(ci_done && echo yes || echo no) $(date -u +%H:%M:%S)" >> chain.log
touch /work/s16/eval.running
if [ ! -d evalcode ]; then
  mkdir -p evalcode && git -C /work/main archive main | tar -x -C evalcode
  echo "evalcode = git archive of main $(git -C /work/main rev-parse --short main) $(date -u +%H:%M:%S)" >> chain.log
fi
export PYTHONPATH=$T/evalcode:$T/evalcode/tui
echo "convert start $(date -u +%H:%M:%S) $(uptime)" >> chain.log
[ -f home/models/adapters/$NAME.json ] || $PY -m rlmd train convert $NAME --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
echo "lock wait $(date -u +%H:%M:%S)" >> chain.log
flock /work/s16/model.lock sh -c "echo \"lock taken \$(date -u +%H:%M:%S); eval start \$(uptime)\" >> chain.log;
  OUT=$T WT=$T/evalcode $PY $S13/eval_pair.py qwen2.5-coder-0.5b $NAME base-s16 tuned-s16 $(at ${EVAL_DEADLINE:-10:38})"
echo "eval end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
rm -f /work/s16/eval.running
(cd evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db base-s16 tuned-s16) > rows.txt 2>&1
$PY $S13/guard.py base-s16 tuned-s16 > guard.txt 2>&1
for S in base-s16 tuned-s16; do
  for TID in $($PY -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1])]' tasks/heldout/tasks.jsonl); do
    echo "######## $S $TID"; $PY $S13/traj2.py $S $TID
  done > traj-$S.txt 2>&1
done
echo "report done $(date -u +%H:%M:%S)" >> chain.log
kill $LOADLOG

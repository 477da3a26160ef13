#!/bin/sh
# issue 13, session 9: held-out rollouts of one model (one locked piece, <= 7 x 150 s), the budget of
# session 7's eval.sh. usage: eval.sh MODEL SET
export PYTHONPATH=/work/wt-sft9:/work/wt-sft9/tui RLMD_HOME=/work/s9/sft9/home
cd /work/s9/sft9
echo "eval $2 start $(date -u +%H:%M:%S) $(uptime)" >> eval.log
timeout 1380 /work/main/.venv/bin/python -m rlmd train rollout --tasks tasks/heldout --model $1 --samples 1 --temperature 0 --set $2 --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess > eval-$2.log 2>&1
echo "eval $2 end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> eval.log

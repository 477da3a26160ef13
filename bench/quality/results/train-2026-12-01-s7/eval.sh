#!/bin/sh
# issue 13, session 7: held-out rollouts of one model (one locked piece, <= 7 x 150 s)
# usage: eval.sh MODEL SET
export PYTHONPATH=/work/wt-train3:/work/wt-train3/tui RLMD_HOME=/work/s7/train3-measure/home
cd /work/s7/train3-measure
echo "eval $2 start $(date -u +%H:%M:%S) $(uptime)" >> eval.log
timeout 1380 /work/main/.venv/bin/python -m rlmd train rollout --tasks tasks/heldout --model $1 --samples 1 --temperature 0 --set $2 --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess > eval-$2.log 2>&1
echo "eval $2 end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> eval.log

#!/bin/sh
# issue 13, session 10: held-out rollouts of one model (one locked piece, <= 7 x 150 s), session 7/9's
# budget. usage: eval.sh MODEL SET   (run under flock /work/s10/model.lock)
export PYTHONPATH=/work/wt-t10:/work/wt-t10/tui RLMD_HOME=/work/s10/t10/home
cd /work/s10/t10
echo "eval $2 start $(date -u +%H:%M:%S) $(git -C /work/wt-t10 rev-parse --short HEAD) $(uptime)" >> eval.log
timeout ${LIMIT:-1380} /work/main/.venv/bin/python -m rlmd train rollout --tasks tasks/heldout --model $1 --samples 1 --temperature 0 --set $2 --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess > eval-$2.log 2>&1
echo "eval $2 end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> eval.log

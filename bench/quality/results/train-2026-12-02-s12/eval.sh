#!/bin/sh
# issue 13, session 12 (t12): the eval half of chain.sh, started by hand: q12 took the model lock at
# 16:17 (its codeintel runs, up to 3 x 420 s) while the SFT ran, so chain.sh's 16:41 deadline could
# not hold; chain.sh was stopped while it waited for the lock (after the SFT stop and the archive),
# the adapter converted outside the lock (no model use), and this waits for the lock and evaluates.
# usage: sh eval.sh EVAL_DEADLINE_EPOCH
D=$(dirname "$(readlink -f "$0")")
cd /work/s12/t
export PYTHONPATH=/work/s12/t/evalcode:/work/s12/t/evalcode/tui RLMD_HOME=/work/s12/t/home
exec 9> /work/s12/model.lock
echo "eval.sh lock wait $(date -u +%H:%M:%S)" >> chain.log
flock 9
echo "lock taken $(date -u +%H:%M:%S); eval start $(uptime)" >> chain.log
WT=/work/s12/t/evalcode /work/main/.venv/bin/python "$D/eval_pair.py" qwen2.5-coder-0.5b qwen0.5b-rlm-s12 base-s12 tuned-s12 "$1"
echo "eval end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
flock -u 9
cd /work/s12/t/evalcode && /work/main/.venv/bin/python -m bench.quality.rollout_report --db /work/s12/t/home/rlmd.db base-s12 tuned-s12 > /work/s12/t/rows.txt 2>&1
echo "report done $(date -u +%H:%M:%S)" >> /work/s12/t/chain.log

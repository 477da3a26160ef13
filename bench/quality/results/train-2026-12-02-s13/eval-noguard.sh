#!/bin/sh
# issue 13, session 13 (optional, after eval.sh; prepared by t13): the tuned adapter with the
# repetition guard off (config-noguard.toml appended to home/config.toml first; check the adapter
# path there against home/models/adapters/qwen0.5b-rlm-s13.json), paired with the base again, same
# budget. usage: sh eval-noguard.sh EVAL_DEADLINE_EPOCH
D=$(dirname "$(readlink -f "$0")")
T=/work/s13/t
PY=/work/main/.venv/bin/python
cd $T
export PYTHONPATH=$T/evalcode:$T/evalcode/tui RLMD_HOME=$T/home
echo "noguard lock wait $(date -u +%H:%M:%S)" >> chain.log
flock /work/s13/model.lock sh -c "echo \"noguard start \$(date -u +%H:%M:%S) \$(uptime)\" >> chain.log; WT=$T/evalcode $PY $D/eval_pair.py qwen2.5-coder-0.5b tuned-noguard base2-s13 tuned-noguard-s13 $1; echo \"noguard end rc=\$? \$(date -u +%H:%M:%S) \$(uptime)\" >> chain.log"
(cd $T/evalcode && $PY -m bench.quality.rollout_report --db $T/home/rlmd.db base2-s13 tuned-noguard-s13) > $T/rows-noguard.txt 2>&1
$PY "$D/guard.py" base2-s13 tuned-noguard-s13 > $T/guard-noguard.txt 2>&1

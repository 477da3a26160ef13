#!/bin/bash
# usage: SRC=<dir> bash rw.sh NAME ONLY TIMEOUT  (run under flock /work/s12/model.lock)
set -u
NAME=$1; ONLY=$2; TIMEOUT=${3:-420}
OUT=/work/s12/q/runs/$NAME
mkdir -p /work/s12/q/runs
cd "$SRC"
export PYTHONPATH=$SRC:$SRC/tui
echo "start $(date -u)  $(uptime)" > /work/s12/q/runs/$NAME.load
/work/main/.venv/bin/python -m bench.quality run --tasks /work/s12/q/tasks --out "$OUT" \
  --model qwen2.5-coder-1.5b --systems rlmd-d1 --split heldout --only "$ONLY" \
  --threads ${THREADS:-1} --task-timeout "$TIMEOUT" > /work/s12/q/runs/$NAME.log 2>&1
rc=$?
echo "end $(date -u)  $(uptime) rc=$rc" >> /work/s12/q/runs/$NAME.load
cp /work/s12/q/runs/$NAME.load "$OUT/load.txt" 2>/dev/null
exit $rc

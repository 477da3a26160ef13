#!/bin/sh
cd /work/wt-t11
export PYTHONPATH=/work/wt-t11:/work/wt-t11/tui
echo 10 > /proc/self/autogroup 2>/dev/null
for i in 1 2 3; do
  echo "run $i start $(date -u +%H:%M:%S) $(git rev-parse --short HEAD) dirty=$(git status --short | wc -l) $(uptime)"
  nice -n 15 /work/main/.venv/bin/python -m pytest -q -x -p no:cacheprovider tests/test_train_tiny.py tests/test_train_pipeline.py tests/test_train_repair.py 2>&1 | tail -3
  echo "run $i end $(date -u +%H:%M:%S)"
done

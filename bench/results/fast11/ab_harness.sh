#!/bin/sh
# Issue 16 item 3, session 11: bench 3 of bench/harness.py for before and after (git archive
# copies), alternating; raw outputs and the load before/after each run.
# usage: ab_harness.sh BEFORE_DIR AFTER_DIR REPS OUTDIR TAG
B=$1; A=$2; N=$3; OUT=$(cd "$4" && pwd); TAG=$5
for i in $(seq 1 "$N"); do
  for side in before after; do
    if [ "$side" = before ]; then D=$B; else D=$A; fi
    f="$OUT/$TAG-$side-$i.txt"
    (cd "$D" && { uptime; date -u; PYTHONPATH=$D:$D/tui nice -n 15 /work/main/.venv/bin/python bench/harness.py --only 3; echo "rc=$?"; uptime; date -u; } > "$f" 2>&1)
  done
done

#!/bin/sh
# bench 3 of bench/harness.py, before and after (git archive copies), alternating; raw outputs with the load.
# usage: ab_harness.sh BEFORE AFTER REPS OUTDIR TAG
B=$1; A=$2; N=$3; OUT=$4; TAG=$5
for i in $(seq 1 "$N"); do
  for side in before after; do
    if [ "$side" = before ]; then D=$B; else D=$A; fi
    f="$OUT/$TAG-$side-$i.txt"
    (cd "$D" && { uptime; date -u; PYTHONPATH=$D:$D/tui sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 15 /work/main/.venv/bin/python bench/harness.py --only 3'; echo "rc=$?"; uptime; date -u; } > "$f" 2>&1)
  done
done

#!/bin/sh
# usage: ab.sh BEFORE AFTER ALTERNATIONS N SANDBOX store|nostore  -> lines "side i load json"
# BEFORE/AFTER: absolute paths of git-archive copies; runs /tmp/f14/loop_ab.py (the loop_ab.py here)
B=$1; A=$2; K=$3; N=$4; SB=$5; ST=$6
for i in $(seq 1 "$K"); do
  for side in before after; do
    if [ "$side" = before ]; then D=$B; else D=$A; fi
    L=$(cut -d' ' -f1-3 /proc/loadavg)
    R=$(cd "$D" && PYTHONPATH=$D:$D/tui:$D/bench sh -c "echo 10 > /proc/self/autogroup; exec nice -n 15 /work/main/.venv/bin/python /tmp/f14/loop_ab.py $N $SB $ST" 2>&1 | tail -1)
    echo "$side $i load $L $R"
  done
done

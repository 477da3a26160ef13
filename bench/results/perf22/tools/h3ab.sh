#!/bin/sh
# usage: h3ab.sh ROUNDS OUTDIR ; alternates bench/harness.py --only 3 between before and after trees (ABBA)
R=$1; OUT=$2; mkdir -p $OUT
for r in $(seq 1 $R); do
  if [ $((r % 2)) = 1 ]; then ORDER="A B"; else ORDER="B A"; fi
  for S in $ORDER; do
    if [ $S = A ]; then D=/work/s22/perf22/before; else D=/work/wt-perf22; fi
    L0=$(cut -d' ' -f1 /proc/loadavg); T=$(date -u +%H:%M:%S)
    (cd $D && sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 15 env PYTHONPATH=$PWD:$PWD/tui /work/main/.venv/bin/python bench/harness.py --only 3' > $OUT/h3-$r-$S.txt 2>&1)
    L1=$(cut -d' ' -f1 /proc/loadavg)
    echo "round $r side $S start $T load $L0-$L1 $(grep 'loop overhead per iteration' $OUT/h3-$r-$S.txt | head -1)" | tee -a $OUT/summary.txt
  done
done

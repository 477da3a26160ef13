#!/bin/sh
# usage: wrsab.sh ROUNDS OUTDIR ; alternates bench/whole_run_server.py between before and after trees (ABBA)
R=$1; OUT=$2; mkdir -p $OUT
for r in $(seq 1 $R); do
  if [ $((r % 2)) = 1 ]; then ORDER="A B"; else ORDER="B A"; fi
  for S in $ORDER; do
    if [ $S = A ]; then D=/work/s22/perf22/before; else D=/work/wt-perf22; fi
    L0=$(cut -d' ' -f1 /proc/loadavg); T=$(date -u +%H:%M:%S)
    (cd $D && sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 15 env PYTHONPATH=$PWD:$PWD/tui /work/main/.venv/bin/python bench/whole_run_server.py' > $OUT/w-$r-$S.txt 2>&1)
    L1=$(cut -d' ' -f1 /proc/loadavg)
    echo "round $r side $S start $T load $L0-$L1 | $(grep -i 'in-process\|inprocess' $OUT/w-$r-$S.txt | grep -i 'x\b\|ratio\|/' | tail -2 | tr '\n' '|')" | tee -a $OUT/summary.txt
  done
done

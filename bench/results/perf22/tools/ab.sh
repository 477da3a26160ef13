#!/bin/sh
# usage: ab.sh ROUNDS N OUTFILE [extra args]; alternates before/after trees, run3.py N runs each
R=$1; N=$2; OUT=$3; shift 3
for r in $(seq 1 $R); do
  for side in A B; do
    if [ $side = A ]; then D=/work/s22/perf22/before; else D=/work/wt-perf22; fi
    if [ $((r % 2)) = 0 ]; then if [ $side = A ]; then D=/work/wt-perf22; S=B; else D=/work/s22/perf22/before; S=A; fi; else S=$side; fi
    L=$(cut -d' ' -f1 /proc/loadavg)
    res=$(cd $D && sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 15 env PYTHONPATH=$PWD:$PWD/tui /work/main/.venv/bin/python /work/s22/perf22/tools/run3.py '$N' '"$*")
    echo "round $r side $S load $L $res" | tee -a $OUT
  done
done

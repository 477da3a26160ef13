#!/bin/sh
# A/B: main vs pipe23, alternating, N cells each round; + per-thread u/s time
N=${N:-3000}
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) -eq 1 ]; then order="main pipe23"; else order="pipe23 main"; fi
  for w in $order; do
    if [ $w = main ]; then root=/work/main; else root=/work/wt-pipe23; fi
    printf "%s " $w; cd $root && ROOT=$root /work/main/.venv/bin/python bench/results/rtt14/drive.py $N hardened | tail -1
  done
done

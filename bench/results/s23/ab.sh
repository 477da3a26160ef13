#!/bin/sh
# A/B: s14-era checkout (old14) vs main, alternating, N cells each round
N=${N:-3000}
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for w in $order; do
    if [ $w = old ]; then root=/work/s23/old14; else root=/work/main; fi
    printf "%s " $w; cd $root && ROOT=$root /work/main/.venv/bin/python bench/results/rtt14/drive.py $N hardened | tail -1
  done
done

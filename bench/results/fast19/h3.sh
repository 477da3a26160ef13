#!/bin/sh
# alternating bench-3 harness runs: base (main 07bf5ab) and new (the journal), N pairs, ABBA
PY=/work/main/.venv/bin/python
OUT=/work/s19/fast19/h3${3:-}
N=$1; TAG=$2
i=1
while [ $i -le $N ]; do
  if [ $((i % 2)) -eq 1 ]; then ORDER="base new"; else ORDER="new base"; fi
  for side in $ORDER; do
    T=/work/s19/fast19/$side
    f=$OUT/h3$TAG-$side-$i.txt
    { uptime; date -u; } > $f
    (cd $T && PYTHONPATH=$T:$T/tui sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 15 '$PY' bench/harness.py --only 3' >> $f 2>&1; echo "rc=$?" >> $f)
    { uptime; date -u; } >> $f
  done
  i=$((i+1))
done
echo done > $OUT/done$TAG

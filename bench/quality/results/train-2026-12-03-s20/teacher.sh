#!/bin/sh
# issue 13, session 17: the teacher's rollouts with session 17's teacher (codeqa notes whose only
# backticked literal is the answer; aggregation's own first words; the flat labelling cell), run
# on a git archive of main 61b7014 (/work/s17/t/code). Train sets: session 15's medium seeds 0 and
# 1 and its rare pairs templates (linked into /work/s17/t/tasks), plus train-um: the one user_most
# oolong task of `rlmd train tasks --split train --size small --seed 8` (no medium set has one: the
# generator drops user_most where the busiest user answers it). Sets teacher-s20-*; then the SFT
# export (reward 1, >= 2 iterations). No model use.
set -e
T=${T:-/work/s17/t}
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
PY=/work/main/.venv/bin/python
cd "$T"
echo "start $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"
roll() {  # folder, samples, set suffix
  $PY -m rlmd train rollout --tasks "tasks/$1" --model teacher --samples "$2" --set "teacher-s20-$3" \
    > "teacher-$3.log" 2>&1
  tail -n 3 "teacher-$3.log"
}
roll train-m0 2 m0
roll train-m1 2 m1
roll train-pairs-x 3 px
roll train-um 3 um
$PY -m rlmd train export --format sft --set teacher-s20-m0 --set teacher-s20-m1 --set teacher-s20-px \
  --set teacher-s20-um --min-reward 1 --min-iterations 2 --out sft-all.jsonl 2> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"

#!/bin/sh
# issue 13, session 16: the teacher's rollouts with the reading turns of every family (code: git archive
# of main f6f7694 in /work/s16/t/code) on session 15's train task sets (medium seeds 0 and 1, and the
# rare pairs templates: /work/s15/t/tasks, linked into /work/s16/t/tasks), new set names, then the SFT
# export (reward 1, >= 2 iterations). No model use.
set -e
T=/work/s16/t
export PYTHONPATH=$T/code:$T/code/tui RLMD_HOME=$T/home
PY=/work/main/.venv/bin/python
cd $T
echo "start $(date -u +%H:%M:%S) $(uptime)"
for s in m0 m1; do
  $PY -m rlmd train rollout --tasks tasks/train-$s --model teacher --samples 2 --set teacher-s16-$s > teacher-$s.log 2>&1
done
$PY -m rlmd train rollout --tasks tasks/train-pairs-x --model teacher --samples 3 --set teacher-s16-px > teacher-px.log 2>&1
$PY -m rlmd train export --format sft --set teacher-s16-m0 --set teacher-s16-m1 --set teacher-s16-px \
  --min-reward 1 --min-iterations 2 --out sft-all.jsonl 2> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"

#!/bin/sh
# issue 13, session 15: train tasks (medium, seeds 0 and 1) and the teacher data with the literal
# strategies (code: git archive of t15 4271d0f in /work/s15/t/code). No model use.
set -e
OUT=/work/s15/t; WT=$OUT/code
export PYTHONPATH=$WT:$WT/tui RLMD_HOME=$OUT/home
PY=/work/main/.venv/bin/python
cd "$OUT"
echo "start $(date -u +%H:%M:%S) $(uptime)"
for s in 0 1; do
  [ -f tasks/train-m$s/tasks.jsonl ] || $PY -m rlmd train tasks --split train --size medium --seed $s --out tasks/train-m$s
  $PY -m rlmd train rollout --tasks tasks/train-m$s --model teacher --samples 2 --set teacher-s15-m$s > teacher-m$s.log 2>&1
done
$PY -m rlmd train export --format sft --set teacher-s15-m0 --set teacher-s15-m1 --min-reward 1 --out sft-all.jsonl 2> export.log
cat export.log
echo "end $(date -u +%H:%M:%S) $(uptime)"
# then (05:20): pairs tasks of the two rare templates (both_have, both_exactly_one) from medium seeds 2, 3, 5
# (ids suffixed -sN, contexts referenced in their seed's folder): tasks/train-pairs-x, 3 samples each
# for s in 2 3 5; do $PY -m rlmd train tasks --split train --size medium --seed $s --out tasks/train-m$s; done
# (filtered by hand into tasks/train-pairs-x, see RESULTS)
# $PY -m rlmd train rollout --tasks tasks/train-pairs-x --model teacher --samples 3 --set teacher-s15-px

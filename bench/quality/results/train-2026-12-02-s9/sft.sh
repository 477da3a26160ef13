#!/bin/sh
# issue 13, session 9: one locked SFT piece (<= 22 min); re-running resumes from the last checkpoint.
# Option A: OUT's checkpoints/ starts as a copy of session 7's checkpoint-32 (adapter + Adam state,
# trained on session 6's teacher data), so the trainer resumes at step 33 on the new data.
STEPS=${STEPS:-64}
export PYTHONPATH=/work/wt-sft9:/work/wt-sft9/tui RLMD_HOME=/work/s9/sft9/home
cd /work/s9/sft9
echo "sft start $(date -u +%H:%M:%S) steps=$STEPS $(uptime)" >> sft.log
timeout ${LIMIT:-1320} /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b --data sft.jsonl --out qwen0.5b-rlm-s9 --steps $STEPS --save-steps 1 --max-length 2048 >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

#!/bin/sh
# issue 13, session 7: one locked SFT piece (< 25 min); re-running resumes from the last checkpoint
STEPS=${STEPS:-40}
export PYTHONPATH=/work/wt-train3:/work/wt-train3/tui RLMD_HOME=/work/s7/train3-measure/home
cd /work/s7/train3-measure
echo "sft start $(date -u +%H:%M:%S) steps=$STEPS $(uptime)" >> sft.log
timeout ${LIMIT:-1380} /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b --data sft.jsonl --out qwen0.5b-rlm-s6 --steps $STEPS --save-steps 1 >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

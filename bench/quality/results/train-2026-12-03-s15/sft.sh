#!/bin/sh
# issue 13, session 15: the hour of SFT, session 13's recipe (fresh LoRA r16/a32 on the top 8 blocks of
# the 0.5B, fp32, --threads 2, --max-length 2048, a checkpoint every 2 steps) on this session's mix
# (sft-mix.jsonl: 167 samples, literal strategies and aggregation last steps; mix.py). Stopped by
# timeout at END (default 06:55 UTC) whatever the step; re-running resumes from the last checkpoint.
STEPS=${STEPS:-110}; THREADS=${THREADS:-2}; END=${END:-06:55}
export PYTHONPATH=/work/s15/t/code:/work/s15/t/code/tui RLMD_HOME=/work/s15/t/home
cd /work/s15/t
LIMIT=$(( $(date -u -d "today $END" +%s) - $(date -u +%s) ))
echo "sft start $(date -u +%H:%M:%S) steps=$STEPS threads=$THREADS limit=${LIMIT}s $(uptime)" >> sft.log
timeout $LIMIT /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b \
  --data sft-mix.jsonl --out qwen0.5b-rlm-s15 --steps $STEPS --save-steps 2 --max-length 2048 \
  --lora-layers 8 --threads $THREADS --precision fp32 --no-convert >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

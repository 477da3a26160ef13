#!/bin/sh
# issue 13, session 13: the hour of SFT (session 12's recipe: fresh LoRA r16/a32 on the top 8 blocks of the
# 0.5B, fp32, no checkpointing) on this session's teacher data (teacher.sh: sniah opening ends unindented),
# repairs x4 (sft-r4.jsonl, 195 samples). Stopped by timeout after LIMIT s; re-running resumes.
STEPS=${STEPS:-90}; THREADS=${THREADS:-2}
export PYTHONPATH=/work/s13/t/code:/work/s13/t/code/tui RLMD_HOME=/work/s13/t/home
cd /work/s13/t
echo "sft start $(date -u +%H:%M:%S) steps=$STEPS threads=$THREADS $(uptime)" >> sft.log
timeout ${LIMIT:-3700} /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b \
  --data sft-r4.jsonl --out qwen0.5b-rlm-s13 --steps $STEPS --save-steps 2 --max-length 2048 \
  --lora-layers 8 --threads $THREADS --precision fp32 --no-convert >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

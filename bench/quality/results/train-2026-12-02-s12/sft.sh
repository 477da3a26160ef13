#!/bin/sh
# issue 13, session 12: the hour of SFT the issue asks for, started while the machine is quiet.
# Fresh LoRA r16/a32 on the top 8 blocks of the 0.5B (session 11's setting), fp32, no checkpointing,
# on session 10's folded teacher data with repairs x4 (sft-r4.jsonl, 195 samples; teacher.sh of s11).
# Re-running resumes from the last checkpoint.
STEPS=${STEPS:-70}; THREADS=${THREADS:-2}
export PYTHONPATH=/work/s12/t/code:/work/s12/t/code/tui RLMD_HOME=/work/s12/t/home
cd /work/s12/t
echo "sft start $(date -u +%H:%M:%S) steps=$STEPS threads=$THREADS $(uptime)" >> sft.log
timeout ${LIMIT:-4500} /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b \
  --data sft-r4.jsonl --out qwen0.5b-rlm-s12 --steps $STEPS --save-steps 2 --max-length 2048 \
  --lora-layers 8 --threads $THREADS --precision fp32 --no-convert >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

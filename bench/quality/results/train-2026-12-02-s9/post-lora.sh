#!/bin/sh
# convert the last checkpoint (LoRA GGUF, registered as qwen0.5b-rlm-s9) then the held-out eval
export PYTHONPATH=/work/wt-sft9:/work/wt-sft9/tui RLMD_HOME=/work/s9/sft9/home
cd /work/s9/sft9
echo "convert start $(date -u +%T) $(uptime)" >> convert.log
/work/main/.venv/bin/python -m rlmd train convert qwen0.5b-rlm-s9 --base qwen2.5-coder-0.5b >> convert.log 2>&1
echo "convert end rc=$? $(date -u +%T) $(uptime)" >> convert.log
./eval.sh qwen0.5b-rlm-s9 tuned-s9

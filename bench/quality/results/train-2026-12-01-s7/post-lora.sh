#!/bin/sh
# convert the last checkpoint (LoRA GGUF, registered as qwen0.5b-rlm-s6) then the held-out eval
export PYTHONPATH=/work/wt-train3:/work/wt-train3/tui RLMD_HOME=/work/s7/train3-measure/home
cd /work/s7/train3-measure
echo "convert start $(date -u +%T) $(uptime)" >> convert.log
/work/main/.venv/bin/python -m rlmd train convert qwen0.5b-rlm-s6 --base qwen2.5-coder-0.5b >> convert.log 2>&1
echo "convert end rc=$? $(date -u +%T) $(uptime)" >> convert.log
./eval.sh qwen0.5b-rlm-s6 tuned-s7

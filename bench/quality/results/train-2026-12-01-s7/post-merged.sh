#!/bin/sh
# merge the adapter into the base, q4_k_m, registered as qwen0.5b-rlm-s6-merged, then the held-out eval
export PYTHONPATH=/work/wt-train3:/work/wt-train3/tui RLMD_HOME=/work/s7/train3-measure/home
cd /work/s7/train3-measure
echo "merge start $(date -u +%T) $(uptime)" >> convert.log
timeout 600 /work/main/.venv/bin/python -m rlmd train convert qwen0.5b-rlm-s6 --base qwen2.5-coder-0.5b --merge >> convert.log 2>&1
rc=$?
echo "merge end rc=$rc $(date -u +%T) $(uptime)" >> convert.log
[ $rc -eq 0 ] && ./eval.sh qwen0.5b-rlm-s6-merged merged-s7

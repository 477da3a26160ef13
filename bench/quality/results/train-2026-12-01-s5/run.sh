#!/bin/sh
# issue 13, session 5 (one locked piece, < 25 min): SFT with every turn kept, then the held-out turn-2 check
export PYTHONPATH=/work/wt-train:/work/wt-train/tui RLMD_HOME=/work/s5/train-measure/home
cd /work/s5/train-measure
echo "sft start $(date -u +%H:%M:%S) $(uptime)" >> sft.log
timeout 1080 /work/main/.venv/bin/python -m rlmd train sft --base qwen2.5-coder-0.5b --data sft.jsonl --out qwen0.5b-rlm-sft2 --steps 3 --lr 2e-4 --max-length 2048 --save-steps 1 >> sft.log 2>&1
echo "sft end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log
timeout 240 /work/main/.venv/bin/python check.py home/train/qwen0.5b-rlm-sft2/adapter.gguf > check.log 2>check.err
echo "check end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> sft.log

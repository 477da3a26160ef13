cd /work/s11/t
export RLMD_HOME=/work/s11/t/home PYTHONPATH=/work/wt-t11
for cfg in '{"lora_layers": 8, "gradient_checkpointing": false, "precision": "fp32"}' '{"lora_layers": 0, "gradient_checkpointing": true, "precision": "fp32"}' '{"lora_layers": 8, "gradient_checkpointing": false, "precision": "fp32"}'; do
  echo "worker start $(date -u +%H:%M:%S) $cfg $(uptime)"
  /work/main/.venv/bin/python /work/wt-t11/bench/train_step.py --data sft-r4.jsonl --base qwen2.5-coder-0.5b --worker "$cfg" --indices 58 --threads 0 2>/dev/null | tail -1
  echo "worker end $(date -u +%H:%M:%S) $(uptime)"
done

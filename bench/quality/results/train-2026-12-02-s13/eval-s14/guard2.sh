#!/bin/sh
# issue 13, session 14: the tuned 0.5B (session 13's adapter) on the two held-out sniah tasks again,
# on main a381f29 (the repetition guard now also checks inside one line); same budget as eval_pair.py
cd /work/s13/t
export PYTHONPATH=/work/s14/evalcode2:/work/s14/evalcode2/tui RLMD_HOME=/work/s13/t/home
for TID in heldout-sniah-000 heldout-sniah-001; do
  flock /work/s14/model.lock sh -c "echo \"$TID start \$(date -u +%H:%M:%S) \$(uptime)\"; /work/main/.venv/bin/python -m rlmd train rollout --tasks one/$TID --model qwen0.5b-rlm-s13 --samples 1 --temperature 0 --set tuned-s13-g2 --max-iterations 6 --max-depth 1 --max-seconds 150 --sandbox subprocess 2>&1 | grep -v llama_adapter; echo \"$TID end \$(date -u +%H:%M:%S) \$(uptime)\""
done

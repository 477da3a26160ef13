#!/bin/sh
# coordinator, session 12: base vs tuned 0.5B, both with repeat_penalty 1.1 (home/config.toml), same budget as t12's eval
cd /work/s12/t
export PYTHONPATH=/work/s12/t/evalcode:/work/s12/t/evalcode/tui RLMD_HOME=/work/s12/t/home
echo "rp lock wait $(date -u +%H:%M:%S)" >> chain.log
flock /work/s12/model.lock sh -c 'echo "rp start $(date -u +%H:%M:%S) $(uptime)" >> chain.log; WT=/work/s12/t/evalcode /work/main/.venv/bin/python /work/main/bench/quality/results/train-2026-12-02-s12/eval_pair.py base-rp tuned-rp base-rp-s12 tuned-rp-s12 1796233920; echo "rp end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log'
cd /work/s12/t/evalcode && /work/main/.venv/bin/python -m bench.quality.rollout_report --db /work/s12/t/home/rlmd.db base-rp-s12 tuned-rp-s12 > /work/s12/t/rows-rp.txt 2>&1

#!/bin/sh
# issue 13, session 11: the SFT (its timeout removed at 13:15 when steps had fallen to ~45 s) trains
# on until the model lock is ours (at the latest STOP), then stops right after a complete
# checkpoint, converts it, and runs base + tuned on the held-out tasks (eval_pair.py) in the lock.
# usage: sh chain2.sh SFT_PID STOP_EPOCH EVAL_DEADLINE_EPOCH
export PYTHONPATH=/work/wt-t11:/work/wt-t11/tui RLMD_HOME=/work/s11/t/home
D=$(dirname "$(readlink -f "$0")")
cd /work/s11/t
CK=home/train/qwen0.5b-rlm-s11/checkpoints
exec 9> /work/s11/model.lock
while :; do
  if [ "$(date +%s)" -ge "$2" ]; then flock 9; break; fi
  if flock -n 9; then break; fi
  sleep 5
done
echo "lock taken $(date -u +%H:%M:%S) $(uptime)" >> chain.log
# stop right after a checkpoint is complete (trainer_state.json is written last)
n0=$(ls $CK | grep -c checkpoint-)
last=$(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)
while kill -0 "$1" 2>/dev/null; do
  new=$(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)
  if [ "$new" != "$last" ] && [ -f "$new/trainer_state.json" ]; then sleep 3; kill "$1"; break; fi
  sleep 1
done
while kill -0 "$1" 2>/dev/null; do sleep 1; done
echo "sft stopped $(date -u +%H:%M:%S) at $(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)" >> chain.log
/work/main/.venv/bin/python -m rlmd train convert qwen0.5b-rlm-s11 --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(date -u +%H:%M:%S); eval start $(uptime)" >> chain.log
/work/main/.venv/bin/python $D/eval_pair.py qwen2.5-coder-0.5b qwen0.5b-rlm-s11 base-s11 tuned-s11 $3
echo "eval end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log

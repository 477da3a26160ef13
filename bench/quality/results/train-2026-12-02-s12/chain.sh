#!/bin/sh
# issue 13, session 12 (t12): waits for the coordinator's SFT (sft.sh, python PID $1) to end; at the
# latest at STOP it stops it right after the next complete checkpoint (session 11's chain2.sh), or
# at HARD with the last complete one (the eval must end before the lock's next user). Then a git
# archive of main (both models run on that one code base), and in the model lock: convert the
# adapter, run base + tuned on the held-out tasks (eval_pair.py), the report.
# usage: sh chain.sh SFT_PID STOP_EPOCH HARD_EPOCH EVAL_DEADLINE_EPOCH
D=$(dirname "$(readlink -f "$0")")
cd /work/s12/t
CK=home/train/qwen0.5b-rlm-s12/checkpoints
echo "chain start $(date -u +%H:%M:%S) $(uptime)" >> chain.log
while kill -0 "$1" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$2" ]; then
    echo "STOP reached $(date -u +%H:%M:%S) at $(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)" >> chain.log
    last=$(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)
    while kill -0 "$1" 2>/dev/null; do
      new=$(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1)
      if [ "$new" != "$last" ] && [ -f "$new/trainer_state.json" ]; then sleep 3; kill "$1"; break; fi
      if [ "$(date +%s)" -ge "$3" ] && [ -f "$new/trainer_state.json" ]; then echo "HARD reached $(date -u +%H:%M:%S), stopped at complete $new" >> chain.log; kill "$1"; break; fi
      sleep 1
    done
    while kill -0 "$1" 2>/dev/null; do sleep 1; done
    break
  fi
  sleep 5
done
echo "sft ended $(date -u +%H:%M:%S) at $(ls -d $CK/checkpoint-* | sort -t- -k2 -n | tail -1) $(uptime)" >> chain.log
rm -rf evalcode && mkdir evalcode
git -C /work/main archive main | tar -x -C evalcode
echo "evalcode = main $(git -C /work/main rev-parse main) $(date -u +%H:%M:%S)" >> chain.log
export PYTHONPATH=/work/s12/t/evalcode:/work/s12/t/evalcode/tui RLMD_HOME=/work/s12/t/home
exec 9> /work/s12/model.lock
echo "lock wait $(date -u +%H:%M:%S)" >> chain.log
flock 9
echo "lock taken $(date -u +%H:%M:%S) $(uptime)" >> chain.log
/work/main/.venv/bin/python -m rlmd train convert qwen0.5b-rlm-s12 --base qwen2.5-coder-0.5b >> chain.log 2>&1
echo "convert end rc=$? $(date -u +%H:%M:%S); eval start $(uptime)" >> chain.log
WT=/work/s12/t/evalcode /work/main/.venv/bin/python "$D/eval_pair.py" qwen2.5-coder-0.5b qwen0.5b-rlm-s12 base-s12 tuned-s12 "$4"
echo "eval end rc=$? $(date -u +%H:%M:%S) $(uptime)" >> chain.log
flock -u 9
cd /work/s12/t/evalcode && /work/main/.venv/bin/python -m bench.quality.rollout_report --db /work/s12/t/home/rlmd.db base-s12 tuned-s12 > /work/s12/t/rows.txt 2>&1
echo "report done $(date -u +%H:%M:%S)" >> /work/s12/t/chain.log

#!/bin/sh
# issue 13, session 12 (t12): the load once a minute while the SFT runs, with its last logged step
while kill -0 21430 2>/dev/null; do
  echo "$(date -u +%H:%M:%S) $(cut -d, -f3- /proc/loadavg | head -c0)$(cat /proc/loadavg | cut -d' ' -f1-3) step $(tail -1 home/train/qwen0.5b-rlm-s12/log.jsonl | cut -c1-12)" >> load.log
  sleep 60
done
echo "$(date -u +%H:%M:%S) sft gone $(cat /proc/loadavg)" >> load.log

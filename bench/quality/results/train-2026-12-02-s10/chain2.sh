#!/bin/sh
# after chain.sh: the 1.5B again at the same budget, one process per task (eval1.py)
cd /work/s10/t10
while kill -0 12121 2>/dev/null; do sleep 10; done
sleep 45
DL=$(date -u -d 09:08:00 +%s)
echo "eval1 t15b-s10 wait-lock $(date -u +%T)" >> eval.log
flock /work/s10/model.lock sh -c "echo \"eval1 t15b-s10 start \$(date -u +%T) \$(uptime)\" >> eval.log; timeout 1380 /work/main/.venv/bin/python eval1.py qwen2.5-coder-1.5b t15b-s10 150 $DL; echo \"eval1 t15b-s10 end rc=\$? \$(date -u +%T) \$(uptime)\" >> eval.log"

#!/bin/sh
# after chain2.sh: the two codeqa tasks eval1.py skipped (their hidden .codeqa-0 folder was not linked)
cd /work/s10/t10
while kill -0 20356 2>/dev/null; do sleep 5; done
DL=$(date -u -d 09:10:00 +%s)
flock /work/s10/model.lock sh -c "echo \"eval1 t15b-s10 (codeqa) start \$(date -u +%T) \$(uptime)\" >> eval.log; timeout 700 /work/main/.venv/bin/python eval1.py qwen2.5-coder-1.5b t15b-s10 150 $DL; echo \"eval1 t15b-s10 (codeqa) end rc=\$? \$(date -u +%T) \$(uptime)\" >> eval.log"

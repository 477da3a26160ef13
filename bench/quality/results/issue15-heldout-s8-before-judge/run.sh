#!/bin/bash
# usage: after.sh NAME ONLY TIMEOUT [SYSTEMS]
cd ${SRC:-/work/wt-quality}
export PYTHONPATH=$PWD:$PWD/tui
uptime; date -u
time /work/main/.venv/bin/python -m bench.quality run --tasks /tmp/q15/tasks --out /tmp/q15/$1 --model qwen2.5-coder-1.5b --systems ${4:-rlmd-d1} --split heldout --only $2 --threads ${THREADS:-2} --task-timeout $3
uptime; date -u

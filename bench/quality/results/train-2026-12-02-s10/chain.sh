#!/bin/sh
# piece 1: the 1.5B teacher; release; piece 2: base 0.5B on the current engine (fold on)
cd /work/s10/t10
flock /work/s10/model.lock ./eval.sh qwen2.5-coder-1.5b t15-s10
sleep 45
flock /work/s10/model.lock ./eval.sh qwen2.5-coder-0.5b base-s10

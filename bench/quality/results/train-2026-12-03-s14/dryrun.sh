#!/bin/sh
# issue 13 item 6, session 14 (t14): the whole rollout -> export -> grpo -> convert -> run path with the
# tests' tiny random Qwen2 (2 layers, width 32, the 0.5B's tokenizer) instead of the 0.5B, before the
# model lock is free. A random model earns no reward, so the exported groups' rewards are replaced by
# made-up ones (1, 0, 0.5, 0) before `grpo`; everything else is the real command line.
set -e
D=$(dirname "$(readlink -f "$0")")
G=/work/s14/g; T=$G/dry
export PYTHONPATH=/work/wt-t14:/work/wt-t14/tui RLMD_HOME=$T/home
PY=/work/main/.venv/bin/python
RLMD="$PY -m rlmd"
rm -rf $T && mkdir -p $T/home/cache && cd $T
cp -r $G/home/cache/llama-cpp-python home/cache/
echo "start $(date -u +%H:%M:%S) $(uptime)"
$PY - <<'PY'
from pathlib import Path
import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from rlmd.train.gguf_lora import convert_model
gguf = sorted((Path.home() / ".local/share/rlmd/models").glob("qwen2.5-coder-0.5b*.gguf"))[0]
tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=max(len(tok), 151_936), hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=4_096, tie_word_embeddings=True)
Qwen2ForCausalLM(cfg).save_pretrained("tiny")
tok.save_pretrained("tiny")
convert_model(Path("tiny"), Path("tiny.gguf"))
PY
cat > home/config.toml <<TOML
[models.tiny]
provider = "local"
model = "$T/tiny.gguf"
context_window = 4096
max_output_tokens = 64
TOML
$RLMD train rollout --tasks $G/tasks/pick --model tiny --samples 4 --temperature 1.0 --set dry \
  --parallel 2 --max-iterations 2 --max-depth 1 --max-seconds 60 --sandbox subprocess 2>&1 | tail -40
$RLMD train export --format grpo --set dry --out groups-all.jsonl --keep-zero-advantage
$PY "$D/groups.py" home/rlmd.db groups-all.jsonl
$PY -c '
import json
out = open("groups.jsonl", "w")
for line in open("groups-all.jsonl"):
    g = json.loads(line); g["rewards"] = [1.0, 0.0, 0.5, 0.0][: len(g["rewards"])]
    out.write(json.dumps(g) + "\n")'
$RLMD train grpo --base $T/tiny --data groups.jsonl --out tiny-grpo --steps 4 --max-seconds 60 \
  --lora-layers 1 --threads 1 --precision fp32 --save-steps 1 --no-convert 2>&1 | grep -v Warning | cut -c1-400
$RLMD train convert tiny-grpo --base $T/tiny.gguf
$RLMD models 2>&1 | grep -i tiny || true
echo "hello world" > ctx.txt; $RLMD run --model tiny-grpo --max-iterations 1 --max-seconds 60 -c ctx.txt "What is the first word?" 2>&1 | tail -5 || true
echo "end $(date -u +%H:%M:%S) $(uptime)"

"""Which samples the SFT steps trained on: each step's token count (TRL's num_tokens, from
trainer_state.json) matched against the token lengths of sft-r4.jsonl's samples (the trainer's
tokenisation of the cached base). usage: python seen.py CHECKPOINT_DIR"""

import glob
import json
import sys

from transformers import AutoTokenizer

from rlmd.train.sft import _length

tok = AutoTokenizer.from_pretrained(glob.glob("home/cache/train-base/*/")[0])
rows = [json.loads(x) for x in open("sft-r4.jsonl")]
by_len: dict[int, list[int]] = {}
for i, r in enumerate(rows):
    by_len.setdefault(_length(tok, r), []).append(i)
state = json.load(open(f"{sys.argv[1]}/trainer_state.json"))
prev = 0
for h in state["log_history"]:
    n = int(h["num_tokens"] - prev)
    prev = h["num_tokens"]
    cands = by_len.get(n, [])
    desc = sorted({(rows[i].get("task_id", "?"), rows[i].get("turn"), bool(rows[i].get("repair"))) for i in cands})
    print(h["step"], n, desc)

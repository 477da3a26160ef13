"""Which SFT samples the resumed steps trained on: TRL logs cumulative num_tokens; each step's
delta is one sample's token count (batch 1), matched against the samples' lengths."""

import glob
import json

from transformers import AutoTokenizer

from rlmd.train.sft import _length

tok = AutoTokenizer.from_pretrained(glob.glob("home/cache/train-base/*/")[0])
rows = [json.loads(x) for x in open("sft.jsonl")]
lens = [_length(tok, r) for r in rows]
ck = sorted(
    glob.glob("home/train/qwen0.5b-rlm-s9/checkpoints/checkpoint-*"),
    key=lambda p: int(p.rsplit("-", 1)[1]),
)[-1]
hist = json.load(open(ck + "/trainer_state.json"))["log_history"]
logs = [(h["step"], h["loss"], h["num_tokens"]) for h in hist if "loss" in h and h["step"] > 32]
prev = 0.0
for i, loss, nt in logs:
    nt = float(nt)
    if nt < prev:  # a new piece: the counter restarts
        prev = 0.0
    d = round(nt - prev)
    prev = nt
    m = [j for j, n in enumerate(lens) if abs(n - d) <= 1]
    desc = [
        f"{rows[j]['family']} t{rows[j]['turn']}{' REPAIR' if rows[j].get('repair') else ''}{' FINAL' if 'FINAL' in rows[j]['completion'][-1]['content'] else ''}"
        for j in m
    ]
    print(i, loss, d, sorted(set(desc)) if m else "?")

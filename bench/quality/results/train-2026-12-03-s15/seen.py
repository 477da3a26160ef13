"""Which samples the SFT steps trained on (session 12's seen.py, for this session's mix): each
step's token count (TRL's num_tokens, from trainer_state.json) matched against the token lengths
of sft-mix.jsonl's samples; printed with the family, turn and the mix bucket (mix.py).
usage (in /work/s15/t): python seen.py CHECKPOINT_DIR"""

import glob
import json
import sys
from collections import Counter

from transformers import AutoTokenizer

from rlmd.train.sft import _length

tok = AutoTokenizer.from_pretrained(glob.glob("home/cache/train-base/*/")[0])
rows = [json.loads(x) for x in open("sft-mix.jsonl")]
by_len: dict[int, list[int]] = {}
for i, r in enumerate(rows):
    by_len.setdefault(_length(tok, r), []).append(i)


def kind(r: dict) -> str:
    t = r["completion"][0]["content"]
    if r["family"] in ("sniah", "codeqa"):
        return "final" if "FINAL(" in t else "search"
    if "records = []" in t:
        return "parse"
    if "llm_query_batched" in t:
        return "label"
    return "compute" if "answer =" in t else "final_only"


state = json.load(open(f"{sys.argv[1]}/trainer_state.json"))
prev = 0
seen = Counter()
for h in state["log_history"]:
    if "num_tokens" not in h:
        continue
    n = int(h["num_tokens"] - prev)
    prev = h["num_tokens"]
    cands = by_len.get(n, [])
    desc = sorted({(rows[i]["task_id"], rows[i]["turn"], rows[i]["family"], kind(rows[i])) for i in cands})
    kinds = {(d[2], d[3]) for d in desc}
    seen[next(iter(kinds)) if len(kinds) == 1 else ("ambiguous", "")] += 1
    print(h["step"], n, desc)
print("by family / turn kind:", dict(sorted(seen.items())))

"""issue 13, session 15: what an SFT file holds: samples per family / strategy / turn kind,
final turns per aggregation template, and token lengths (the 0.5B's tokenizer, chat template
applied as sft does: prompt + completion). usage: python datastats.py FILE.jsonl [DB]"""

import json
import sqlite3
import sys
from collections import Counter, defaultdict

from tokenizers import Tokenizer

path = sys.argv[1]
db = sys.argv[2] if len(sys.argv) > 2 else "/work/s15/t/home/rlmd.db"
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
tasks = {}
for s in ("0", "1"):
    for line in open(f"/work/s15/t/tasks/train-m{s}/tasks.jsonl"):
        r = json.loads(line)
        tasks[f"teacher-s15-m{s}", r["id"]] = r["params"].get("template")
for line in open("/work/s15/t/tasks/train-pairs-x/tasks.jsonl"):
    r = json.loads(line)
    tasks["teacher-s15-px", r["id"]] = r["params"].get("template")
info, template = {}, {}
for run_id, rset, tid, details in c.execute("select run_id, rollout_set, task_id, details from rollouts"):
    info[run_id] = json.loads(details).get("strategy")
    template[run_id] = tasks.get((rset, tid))
tok = Tokenizer.from_file(
    "/work/s15/t/home/cache/train-base/qwen2.5-coder-0.5b-instruct-q4_k_m-1d9614638d18-33202c483d4133c9/tokenizer.json"
)
recs = [json.loads(line) for line in open(path)]
by = Counter()
final_by_template = Counter()
lengths = defaultdict(list)
for r in recs:
    strat = info.get(r["run_id"], "?")
    text = r["completion"][0]["content"]
    kind = "final" if "FINAL(" in text else "step"
    by[(r["family"], strat, kind)] += 1
    if r["family"] in ("oolong", "pairs") and kind == "final":
        final_by_template[(r["family"], template.get(r["run_id"]))] += 1
    n = sum(len(tok.encode(m["content"]).ids) + 5 for m in r["prompt"] + r["completion"])
    lengths[r["family"]].append(n)
print(f"{len(recs)} samples in {path}")
print("family / strategy / turn kind: samples")
for k, v in sorted(by.items()):
    print(" ", *k, v)
print("aggregation final turns per template:")
for k, v in sorted(final_by_template.items(), key=str):
    print(" ", *k, v)
print("tokens (prompt + completion, ~chat template) per family: min / median / max")
for f, ls in sorted(lengths.items()):
    ls.sort()
    print(f"  {f}: {ls[0]} / {ls[len(ls) // 2]} / {ls[-1]}  (n={len(ls)})")
allv = sorted(x for ls in lengths.values() for x in ls)
print(f"  all: {allv[0]} / {allv[len(allv) // 2]} / {allv[-1]}; over 2048: {sum(x > 2048 for x in allv)}")

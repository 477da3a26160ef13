"""issue 13, session 15: the SFT mix from the teacher's export (sft-all.jsonl, reward 1), weighted
toward the literal strategies and the aggregation's last steps, sized for about an hour of CPU
(~100 steps at batch 1). Seeded; quotas per bucket, spread over templates.
usage: python mix.py sft-all.jsonl sft-mix.jsonl [DB]"""

import json
import random
import sqlite3
import sys
from collections import defaultdict

src, dst = sys.argv[1:3]
db = sys.argv[3] if len(sys.argv) > 3 else "/work/s15/t/home/rlmd.db"
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
tasks = {}
for s in ("0", "1"):
    for line in open(f"/work/s15/t/tasks/train-m{s}/tasks.jsonl"):
        r = json.loads(line)
        tasks[f"teacher-s15-m{s}", r["id"]] = r["params"].get("template")
for line in open("/work/s15/t/tasks/train-pairs-x/tasks.jsonl"):
    r = json.loads(line)
    tasks["teacher-s15-px", r["id"]] = r["params"].get("template")
strategy, template = {}, {}
for run_id, rset, tid, details in c.execute("select run_id, rollout_set, task_id, details from rollouts"):
    strategy[run_id] = json.loads(details).get("strategy")
    template[run_id] = tasks.get((rset, tid))


def bucket(r: dict) -> tuple | None:
    text = r["completion"][0]["content"]
    fam, strat, tpl = r["family"], strategy.get(r["run_id"]), template.get(r["run_id"])
    final = "FINAL(" in text
    if r.get("repair"):
        return None  # literal plays make no mistakes; repairs of the others left out
    if fam == "sniah":
        return None if strat == "regex" else ("sniah", "final" if final else "step")
    if fam == "codeqa":
        if strat == "ast":
            return ("codeqa", "ast-param_default") if tpl == "param_default" else None
        return ("codeqa", "final" if final else "step")
    if "records = []" in text:
        return (fam, "parse")
    if "llm_query_batched" in text:
        return (fam, "label")
    if "answer =" in text:
        return (fam, "compute", tpl)
    if final:
        return (fam, "final_only", tpl)
    return None


QUOTA = {
    ("sniah", "final"): 24, ("sniah", "step"): 16,
    ("codeqa", "final"): 24, ("codeqa", "step"): 16, ("codeqa", "ast-param_default"): 4,
    ("oolong", "parse"): 6, ("oolong", "label"): 8, ("oolong", "compute"): 8, ("oolong", "final_only"): 2,
    ("pairs", "parse"): 2, ("pairs", "label"): 2, ("pairs", "compute"): 2, ("pairs", "final_only"): 1,
}  # compute / final_only: per template
recs = [json.loads(line) for line in open(src)]
groups = defaultdict(list)
for r in recs:
    b = bucket(r)
    if b:
        groups[b].append(r)
rng = random.Random(15)
out = []
for b in sorted(groups, key=str):
    q = QUOTA[b[:2]]
    pick = rng.sample(groups[b], min(q, len(groups[b])))
    out += pick
    print(*b, f"{len(pick)} of {len(groups[b])}")
rng.shuffle(out)
with open(dst, "w") as f:
    for r in out:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(len(out), "samples in", dst)

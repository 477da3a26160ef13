"""issue 13, session 16: a small balanced SFT mix from the teacher's export, sized for one full epoch
in the hour (~95 samples at 30-35 s a step). Whole trajectories (every turn of a run, so each
family's openings and reading turns come in proportion), seeded, spread over templates:
  sniah   6 runs of find, 5 of find_lower (2 turns each); no regex needles
  codeqa  where defined 4 (find_definition 2, grep 2), call count 3, subclasses 1, importers 1,
          module constant 1 (grep, 2 turns each), parameter default 1 (ast, 3 turns)
  oolong  6 runs, one per template and one more (parse, label, compute, read: 4 turns each)
  pairs   6 runs, one per template and one more (4 turns each)
  repairs 2 aggregation repair turns (one raw_lines, one no_import)
so the aggregation openings (parse + label, 24) outnumber the needle openings (11). It also checks
the whole export: every final target is FINAL('...') (a quoted literal), and no two families'
final turns share their opening words (rlmd.train.teacher_literal.opening), then prints samples
per family / strategy / turn kind and token lengths of the export and of the mix.
usage: python mix.py EXPORT.jsonl MIX.jsonl DB TASKSETS (TASKSETS: set=folder,...)"""

import json
import random
import re
import sqlite3
import sys
from collections import Counter, defaultdict

from tokenizers import Tokenizer

from rlmd.train.teacher_literal import opening

src, dst, db, sets = sys.argv[1:5]
TOKENIZER = (
    "/work/s16/t/home/cache/train-base/qwen2.5-coder-0.5b-instruct-q4_k_m-1d9614638d18-"
    "33202c483d4133c9/tokenizer.json"
)
template = {}
for pair in sets.split(","):
    name, folder = pair.split("=")
    for line in open(f"{folder}/tasks.jsonl"):
        r = json.loads(line)
        template[name, r["id"]] = r["params"].get("template")
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
run = {}
for run_id, rset, tid, details, iters in c.execute(
    "select run_id, rollout_set, task_id, details, iterations from rollouts"
):
    d = json.loads(details)
    run[run_id] = {
        "strategy": d.get("strategy"),
        "mistake": d.get("mistake"),
        "template": template.get((rset, tid)),
        "iterations": iters,
    }
recs = [json.loads(line) for line in open(src)]
for r in recs:
    r["_code"] = r["completion"][0]["content"].split("```repl\n", 1)[-1].rsplit("```", 1)[0].strip()
    r["_note"] = r["completion"][0]["content"].split("\n```repl", 1)[0]


def kind(r: dict) -> str:
    code = r["_code"]
    if r.get("repair"):
        return "repair"
    if "FINAL" in code:
        return "final"
    if "records = []" in code:
        return "parse"
    if "llm_query_batched" in code:
        return "label"
    return "step"


# checks over the whole export
finals = [r for r in recs if kind(r) == "final"]
bad = [r["_code"] for r in finals if not re.fullmatch(r"FINAL\((['\"]).*\1\)", r["_code"], re.S)]
openings = defaultdict(Counter)
for r in finals:
    openings[r["family"]][opening(r["_note"])] += 1
shared = {
    f: set(o) & set().union(*(set(v) for g, v in openings.items() if g != f))
    for f, o in openings.items()
}
print(
    f"export: {len(recs)} samples, {len(finals)} final targets; not FINAL('...'): {len(bad)} {bad[:3]}"
)
print("final-turn openings per family:", {f: dict(o) for f, o in sorted(openings.items())})
print(
    "openings shared with another family:", {f: sorted(s) for f, s in shared.items() if s} or "none"
)

by_run = defaultdict(list)
for r in recs:
    by_run[r["run_id"]].append(r)
complete = {}  # runs whose every turn is a sample (the export's dedupe drops repeated turns)
for rid, rs in by_run.items():
    info = run[rid]
    if info["mistake"] is None and len(rs) == info["iterations"]:
        complete[rid] = sorted(rs, key=lambda r: r["turn"])
rng = random.Random(16)


def pick(fam: str, n: int, strategies: tuple, templates: tuple | None = None) -> list:
    pool = sorted(
        rid
        for rid, rs in complete.items()
        if rs[0]["family"] == fam
        and run[rid]["strategy"] in strategies
        and (templates is None or run[rid]["template"] in templates)
    )
    rng.shuffle(pool)
    if templates is None:
        return pool[:n]
    chosen, seen = [], Counter()
    while len(chosen) < n and pool:  # round robin over the templates
        for rid in list(pool):
            if (
                seen[run[rid]["template"]] == min(seen[t] for t in templates)
                or len(chosen) + len(pool) <= n
            ):
                chosen.append(rid)
                seen[run[rid]["template"]] += 1
                pool.remove(rid)
                break
        else:
            chosen.append(pool.pop(0))
    return chosen


runs = []
runs += pick("sniah", 6, ("find",)) + pick("sniah", 5, ("find_lower",))
runs += pick("codeqa", 2, ("find_definition",), ("where_defined",))
runs += pick("codeqa", 2, ("grep",), ("where_defined",))
runs += pick("codeqa", 3, ("grep",), ("call_count",))
for t in ("subclasses", "importers", "module_constant"):
    runs += pick("codeqa", 1, ("grep",), (t,))
runs += pick("codeqa", 1, ("ast",), ("param_default",))
oolong_t = ("most_common", "least_common", "count_label", "compare", "user_count")
pairs_t = ("one_each", "both_have", "both_have_either", "both_none", "both_exactly_one")
runs += pick("oolong", 6, ("labels",), oolong_t)
runs += pick("pairs", 6, ("labels",), pairs_t)
mix = [r for rid in runs for r in complete[rid]]
repairs = [r for r in recs if r.get("repair") and r["family"] in ("oolong", "pairs")]
for mistake in ("raw_lines", "no_import"):
    pool = sorted(
        (r for r in repairs if run[r["run_id"]]["mistake"] == mistake), key=lambda r: r["run_id"]
    )
    mix += rng.sample(pool, 1)
rng.shuffle(mix)
with open(dst, "w") as f:
    for r in mix:
        f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")

tok = Tokenizer.from_file(TOKENIZER)


def stats(name: str, rs: list) -> None:
    by, lengths, tpl = Counter(), defaultdict(list), Counter()
    for r in rs:
        info = run[r["run_id"]]
        by[r["family"], info["strategy"], kind(r)] += 1
        if kind(r) == "final":
            tpl[r["family"], info["template"]] += 1
        lengths[r["family"]].append(
            sum(len(tok.encode(m["content"]).ids) + 5 for m in r["prompt"] + r["completion"])
        )
    print(f"\n{name}: {len(rs)} samples")
    print("family / strategy / turn kind: samples")
    for k, v in sorted(by.items()):
        print("  ", *k, v)
    print(
        "final turns per family / template:",
        ", ".join(f"{f} {t} {v}" for (f, t), v in sorted(tpl.items(), key=str)),
    )
    print("tokens (prompt + completion, ~chat template) per family: min / median / max (n)")
    for fam, ls in sorted(lengths.items()):
        ls.sort()
        print(f"  {fam}: {ls[0]} / {ls[len(ls) // 2]} / {ls[-1]} ({len(ls)})")
    allv = sorted(x for ls in lengths.values() for x in ls)
    print(
        f"  all: {allv[0]} / {allv[len(allv) // 2]} / {allv[-1]}; total {sum(allv)}; over 2048: {sum(x > 2048 for x in allv)}"
    )


stats("export " + src, recs)
stats("mix " + dst, mix)

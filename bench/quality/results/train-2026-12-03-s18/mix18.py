"""issue 13, session 18: the SFT mix for the shared compute turn, sized for ~100 steps at about one
epoch (session 17: 111 samples, 120 steps, loss 0.14 at 1.08 epochs). Whole teacher runs (every
turn of a run that made no mistake; a turn the export's dedupe dropped is restored from the kept
identical turn), drawn with seed 18:
  oolong  two runs per template (six; user_most from `train-um`), 4 turns each
  pairs   one run per template (five), 4 turns each
  repairs one aggregation repair turn per mistake (`raw_lines`, `no_import`)
  sniah   6 runs (3 `find`, 3 `find_lower`)
  codeqa  8 runs: where defined 3 (find_definition 2, grep 1), call count, subclasses, importers,
          module constant (grep) and parameter default (ast) 1 each
Prints samples per family / strategy / turn kind, the aggregation runs whose labelling output shows
`unknown`, the compute turns' openings and skeletons (one each expected), the final-turn checks and
token lengths (Qwen2.5 tokenizer, + 5 per message for the chat template).
usage: python mix18.py EXPORT.jsonl MIX.jsonl DB TOKENIZER.json SET=FOLDER [SET=FOLDER ...]"""

import json
import random
import re
import sqlite3
import sys
from collections import Counter, defaultdict

from tokenizers import Tokenizer

from rlmd.train.teacher import COMPUTE_OPENING

export_path, out_path, db, tokenizer_path, *set_folders = sys.argv[1:]
template_of = {}
for arg in set_folders:
    name, folder = arg.split("=", 1)
    for line in open(f"{folder}/tasks.jsonl"):
        task = json.loads(line)
        template_of[name, task["id"]] = task["params"].get("template")

con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
run = {}
for rid, set_name, task_id, details, iterations in con.execute(
    "select run_id, rollout_set, task_id, details, iterations from rollouts"
):
    d = json.loads(details)
    run[rid] = {"strategy": d.get("strategy"), "mistake": d.get("mistake"),
                "turns": iterations, "template": template_of.get((set_name, task_id))}  # fmt: skip
samples = [json.loads(line) for line in open(export_path)]


def code(s):
    return s["completion"][0]["content"].split("```repl\n", 1)[-1].rsplit("```", 1)[0].strip()


def note(s):
    return s["completion"][0]["content"].split("\n```repl", 1)[0]


def kind(s):
    c = code(s)
    if s.get("repair"):
        return "repair"
    for k, mark in (("final", "FINAL"), ("parse", "records = []"), ("label", "llm_query_batched")):
        if mark in c:
            return k
    return "compute" if note(s).startswith(COMPUTE_OPENING) else "other"


by_run = defaultdict(dict)
for s in samples:
    by_run[s["run_id"]][s["turn"]] = s


def whole(rid):
    """All turns of a run without a mistake, restored from identical kept turns; else None."""
    if run[rid]["mistake"] is not None:
        return None
    turns = dict(by_run[rid])
    for t in range(run[rid]["turns"] - 1, -1, -1):  # from the end: a restored turn's prompt
        if t in turns:
            continue
        nxt = turns.get(t + 1)
        if nxt is None:
            return None
        twin = next((s for s in samples if s["turn"] == t and s["task_id"] == nxt["task_id"]
                     and nxt["prompt"][: len(s["prompt"]) + 1] == s["prompt"] + s["completion"]),
                    None)  # fmt: skip
        if twin is None:
            return None
        turns[t] = twin
    return [turns[t] for t in sorted(turns)]


runs_whole = {rid: rows for rid in by_run if (rows := whole(rid))}
rng = random.Random(18)


def pick(family, strategy, template=None, n=1):
    pool = sorted(r for r, rows in runs_whole.items() if rows[0]["family"] == family
                  and run[r]["strategy"] == strategy
                  and (template is None or run[r]["template"] == template))  # fmt: skip
    rng.shuffle(pool)
    if len(pool) < n:
        print(f"!! {family}/{strategy}/{template}: {len(pool)} whole runs of {n}")
    return pool[:n]


chosen = pick("sniah", "find", n=3) + pick("sniah", "find_lower", n=3)
chosen += pick("codeqa", "find_definition", "where_defined", 2) + pick("codeqa", "grep", "where_defined")
for t in ("call_count", "subclasses", "importers", "module_constant"):
    chosen += pick("codeqa", "grep", t)
chosen += pick("codeqa", "ast", "param_default")
for t in ("most_common", "least_common", "count_label", "compare", "user_count", "user_most"):
    chosen += pick("oolong", "labels", t, 2)
for t in ("one_each", "both_have", "both_have_either", "both_none", "both_exactly_one"):
    chosen += pick("pairs", "labels", t)
mix = [s for rid in chosen for s in runs_whole[rid]]
repairs = sorted((s for s in samples if s.get("repair") and s["family"] in ("oolong", "pairs")),
                 key=lambda s: (s["run_id"], s["turn"]))  # fmt: skip
for mistake in ("raw_lines", "no_import"):
    mix.append(rng.choice([s for s in repairs if run[s["run_id"]]["mistake"] == mistake]))
rng.shuffle(mix)
with open(out_path, "w") as f:
    for s in mix:
        f.write(json.dumps(s) + "\n")

tok = Tokenizer.from_file(tokenizer_path)


def report(name, rows):
    print(f"\n== {name}: {len(rows)} samples, {len({s['run_id'] for s in rows})} runs")
    kinds = Counter((s["family"], run[s["run_id"]]["strategy"], kind(s)) for s in rows)
    for k, v in sorted(kinds.items()):
        print("  ", *k, v)
    finals = [s for s in rows if kind(s) == "final"]
    bad = [code(s) for s in finals if not re.fullmatch(r"FINAL\((['\"]).*\1\)", code(s), re.S)]
    print(f"final targets not FINAL('...'): {len(bad)} {bad[:3]}")
    compute = [s for s in rows if kind(s) == "compute"]
    heads = Counter("\n".join(code(s).splitlines()[:5]) for s in compute)
    tails = Counter(code(s).splitlines()[-1] for s in compute)
    print(f"compute turns: {len(compute)}; skeletons (first 5 lines) {len(heads)}, last lines "
          f"{dict(tails)}; templates {dict(Counter(run[s['run_id']]['template'] for s in compute))}")  # fmt: skip
    shown = [s["prompt"][-1]["content"] for s in compute]
    unknown = [int(m.group(1)) if (m := re.search(r"'unknown': (\d+)", t)) else 0 for t in shown]
    print(f"compute turns whose labelling output shows 'unknown': {sum(u > 0 for u in unknown)}"
          f" of {len(unknown)} (unknown per run: {sorted(unknown)})")  # fmt: skip
    lengths = defaultdict(list)
    for s in rows:
        n = sum(len(tok.encode(m["content"]).ids) + 5 for m in s["prompt"] + s["completion"])
        lengths[s["family"]].append(n)
    for fam, ls in sorted(lengths.items()):
        ls.sort()
        print(f"  tokens {fam}: min {ls[0]} / median {ls[len(ls) // 2]} / max {ls[-1]} ({len(ls)})")
    every = sorted(x for ls in lengths.values() for x in ls)
    print(f"  tokens all: median {every[len(every) // 2]}, max {every[-1]}, "
          f"over 2048: {sum(x > 2048 for x in every)}")  # fmt: skip


report(export_path, samples)
report(out_path, mix)

"""issue 13, session 19: the SFT mix after the labelling cell stopped printing counts (it prints
`N labels, K unknown`; the compute turn is the only place an answer is printed). Sized for ~100
steps in a 58-minute window (session 18: 99 samples, 98 steps in 56 min at load 1.4-3.4), near one
epoch. Whole teacher runs (every turn of a run that made no mistake; a turn the export's dedupe
dropped is restored from the kept identical turn), drawn with seed 19:
  oolong  two runs per template (six; user_most from `train-um`), 4 turns each (as session 18)
  pairs   one run per template (five), 4 turns each (as session 18)
  repairs one aggregation repair turn per mistake (`raw_lines`, `no_import`)
  sniah   11 runs (6 `find`, 5 `find_lower`: session 17's needle share, which lost no needle;
          session 18's 6 runs lost 2 of 6)
  codeqa  8 runs: where defined 3 (find_definition 2, grep 1), call count, subclasses, importers,
          module constant (grep) and parameter default (ast) 1 each (as session 18)
Prints samples per family / strategy / turn kind, the labelling checks each compute turn was shown
(`unknown` per run, and that no per-category count is on screen), the compute turns' openings and
skeletons (one each expected), every aggregation run's turn order, the final-turn checks and token
lengths (Qwen2.5 tokenizer, + 5 per message for the chat template).
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
rng = random.Random(19)


def pick(family, strategy, template=None, n=1):
    pool = sorted(r for r, rows in runs_whole.items() if rows[0]["family"] == family
                  and run[r]["strategy"] == strategy
                  and (template is None or run[r]["template"] == template))  # fmt: skip
    rng.shuffle(pool)
    if len(pool) < n:
        print(f"!! {family}/{strategy}/{template}: {len(pool)} whole runs of {n}")
    return pool[:n]


chosen = pick("sniah", "find", n=6) + pick("sniah", "find_lower", n=5)
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
    unknown = [int(m.group(1)) if (m := re.search(r"\d+ labels, (\d+) unknown", t)) else -1
               for t in shown]  # fmt: skip
    print(f"compute turns shown the labelling checks: {sum(u >= 0 for u in unknown)} of "
          f"{len(unknown)}; with 'unknown' > 0: {sum(u > 0 for u in unknown)} "
          f"(unknown per run: {sorted(unknown)})")  # fmt: skip
    counted = [t for t in shown if "Counter(" in t or re.search(r"'[a-z ]+': \d+", t)]
    print(f"compute turns shown a count per category: {len(counted)}")
    labels_out = [s for s in rows if kind(s) == "label"]
    print(f"labelling targets that print counts: "
          f"{sum('Counter' in code(s) or 'print(counts)' in code(s) for s in labels_out)} "
          f"of {len(labels_out)}")  # fmt: skip
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
# a whole run's turns in order (a restored turn carries its twin's run_id, so by `chosen`)
order = Counter(" > ".join(kind(s) for s in runs_whole[rid]) for rid in chosen
                if runs_whole[rid][0]["family"] in ("oolong", "pairs"))  # fmt: skip
print(f"\nmix: aggregation runs by turn order: {dict(order)}")

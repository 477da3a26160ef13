"""issue 13, session 17: the SFT mix, balanced towards aggregation's openings. Whole teacher runs
(every turn of a run that made no mistake), seeded draws spread over templates:
  sniah   11 runs: 6 `find`, 5 `find_lower` (2 turns each), as in session 16
  codeqa  10 runs: where defined 4 (find_definition 3, grep 1: one whole grep run), call count 3, subclasses,
          importers, module constant 1 each (grep, 2 turns), parameter default 1 (ast, 3 turns)
  oolong  TWO runs per template (all six, user_most from the `train-um` set), 4 turns each
  pairs   ONE run per template (five), 4 turns each
  repairs one aggregation repair turn per mistake (`raw_lines`, `no_import`)
Checks over the whole export and the mix: every final target is FINAL('...'); no two families'
final turns share their opening words; a codebase final note's only backticked literal is the
value written out; aggregation's first turns share no two opening words with another family's
first turns. Prints samples per family / strategy / turn kind, the labelling cell's length and
token lengths (Qwen2.5 tokenizer, + 5 per message for the chat template).
usage: python mix17.py EXPORT.jsonl MIX.jsonl DB TOKENIZER.json SET=FOLDER [SET=FOLDER ...]"""

import ast
import json
import random
import re
import sqlite3
import sys
from collections import Counter, defaultdict

from tokenizers import Tokenizer

from rlmd.train.teacher_literal import opening

export, out, db, tokenizer, *folders = sys.argv[1:]
templates = {}  # (set, task id) -> template
for arg in folders:
    set_name, folder = arg.split("=", 1)
    with open(f"{folder}/tasks.jsonl") as f:
        for line in f:
            task = json.loads(line)
            templates[set_name, task["id"]] = task["params"].get("template")
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
runs = {}
for run_id, set_name, task_id, details, iterations in con.execute(
    "select run_id, rollout_set, task_id, details, iterations from rollouts"
):
    d = json.loads(details)
    runs[run_id] = dict(
        strategy=d.get("strategy"), mistake=d.get("mistake"), iterations=iterations,
        template=templates.get((set_name, task_id)),
    )  # fmt: skip

with open(export) as f:
    samples = [json.loads(line) for line in f]


def code_of(s: dict) -> str:
    return s["completion"][0]["content"].split("```repl\n", 1)[-1].rsplit("```", 1)[0].strip()


def note_of(s: dict) -> str:
    return s["completion"][0]["content"].split("\n```repl", 1)[0]


def kind(s: dict) -> str:
    code = code_of(s)
    if s.get("repair"):
        return "repair"
    if "FINAL" in code:
        return "final"
    if "records = []" in code:
        return "parse"
    if "llm_query_batched" in code:
        return "label"
    return "step"


def check(name: str, rows: list) -> None:
    finals = [s for s in rows if kind(s) == "final"]
    literal = re.compile(r"FINAL\((['\"]).*\1\)", re.S)
    not_literal = [code_of(s) for s in finals if not literal.fullmatch(code_of(s))]
    by_family = defaultdict(Counter)
    for s in finals:
        by_family[s["family"]][opening(note_of(s))] += 1
    shared = {
        f: sorted(set(o) & {x for g, v in by_family.items() if g != f for x in v})
        for f, o in by_family.items()
    }
    bad_codeqa = []
    for s in finals:
        if s["family"] == "codeqa" and literal.fullmatch(code_of(s)):
            value = ast.literal_eval(code_of(s)[len("FINAL(") : -1])
            if re.findall(r"`([^`]*)`", note_of(s)) != [value]:
                bad_codeqa.append(note_of(s))
    first = defaultdict(Counter)
    for s in rows:
        if s["turn"] == 0:
            group = "aggregation" if s["family"] in ("oolong", "pairs") else "other"
            first[group][opening(note_of(s), 2)] += 1
    print(f"\n== checks, {name}: {len(rows)} samples, {len(finals)} final targets")
    print(f"final targets not FINAL('...'): {len(not_literal)} {not_literal[:3]}")
    print("final-turn openings:", {f: dict(o) for f, o in sorted(by_family.items())})
    print("shared with another family:", {f: v for f, v in shared.items() if v} or "none")
    print(
        f"codebase notes whose only backticked literal is not the value: {len(bad_codeqa)} {bad_codeqa[:3]}"
    )
    print("first-turn openings (2 words):", {g: dict(o) for g, o in sorted(first.items())})
    print("aggregation first turns sharing them with others:",
          sorted(set(first["aggregation"]) & set(first["other"])) or "none")  # fmt: skip


check(export, samples)

per_run = defaultdict(list)
for s in samples:
    per_run[s["run_id"]].append(s)


def filled(rid: str) -> list | None:
    """Every turn of run ``rid`` (no mistake), a turn the export's dedupe dropped taken from
    the run whose identical turn it kept (the next turn's prompt shows it verbatim); ``None``
    when a turn cannot be restored."""
    rows = {s["turn"]: s for s in per_run[rid]}
    if runs[rid]["mistake"] is not None:
        return None
    for t in range(runs[rid]["iterations"]):
        if t in rows:
            continue
        after = rows.get(t + 1)
        if after is None:
            return None
        same = [s for s in samples if s["task_id"] == after["task_id"] and s["turn"] == t
                and after["prompt"][: len(s["prompt"]) + 1] == s["prompt"] + s["completion"]]  # fmt: skip
        if not same:
            return None
        rows[t] = same[0]
    return [rows[t] for t in sorted(rows)]


whole = {rid: rows for rid in per_run if (rows := filled(rid)) is not None}
print(f"whole runs: {len(whole)}, of them with a deduped turn restored: "
      f"{sum(len(rows) != len(per_run[rid]) for rid, rows in whole.items())}")  # fmt: skip
rng = random.Random(17)


def draw(family: str, strategies: tuple, per_template: dict | None = None, n: int = 0) -> list:
    """``n`` runs of ``family`` played with one of ``strategies``; with ``per_template``
    ({template: count}), that many runs of each template."""
    pool = sorted(r for r, rows in whole.items()
                  if rows[0]["family"] == family and runs[r]["strategy"] in strategies)  # fmt: skip
    rng.shuffle(pool)
    if per_template is None:
        return pool[:n]
    chosen = []
    for t, count in per_template.items():
        mine = [r for r in pool if runs[r]["template"] == t][:count]
        if len(mine) < count:
            print(f"!! {family} {strategies} {t}: {len(mine)} runs of {count}")
        chosen += mine
    return chosen


OOLONG = ("most_common", "least_common", "count_label", "compare", "user_count", "user_most")
PAIRS = ("one_each", "both_have", "both_have_either", "both_none", "both_exactly_one")
chosen = draw("sniah", ("find",), n=6) + draw("sniah", ("find_lower",), n=5)
chosen += draw("codeqa", ("find_definition",), {"where_defined": 3})
chosen += draw("codeqa", ("grep",), {"where_defined": 2, "call_count": 3, "subclasses": 1,
                                    "importers": 1, "module_constant": 1})  # fmt: skip
chosen += draw("codeqa", ("ast",), {"param_default": 1})
chosen += draw("oolong", ("labels",), {t: 2 for t in OOLONG})
chosen += draw("pairs", ("labels",), {t: 1 for t in PAIRS})
mix = [s for rid in chosen for s in whole[rid]]
repairs = sorted((s for s in samples if s.get("repair") and s["family"] in ("oolong", "pairs")),
                 key=lambda s: (s["run_id"], s["turn"]))  # fmt: skip
for mistake in ("raw_lines", "no_import"):
    mix.append(rng.choice([s for s in repairs if runs[s["run_id"]]["mistake"] == mistake]))
rng.shuffle(mix)
with open(out, "w") as f:
    for s in mix:
        f.write(json.dumps(s) + "\n")

tok = Tokenizer.from_file(tokenizer)


def report(name: str, rows: list) -> None:
    kinds, per_template, lengths = Counter(), Counter(), defaultdict(list)
    for s in rows:
        info = runs[s["run_id"]]
        kinds[s["family"], info["strategy"], kind(s)] += 1
        if kind(s) == "final":
            per_template[s["family"], str(info["template"])] += 1
        n = sum(len(tok.encode(m["content"]).ids) + 5 for m in s["prompt"] + s["completion"])
        lengths[s["family"]].append(n)
    print(f"\n== {name}: {len(rows)} samples")
    for k, v in sorted(kinds.items()):
        print("  ", *k, v)
    print("final turns per family / template:",
          ", ".join(f"{f} {t} {v}" for (f, t), v in sorted(per_template.items())))  # fmt: skip
    label = sorted({len(s["completion"][0]["content"]) for s in rows if kind(s) == "label"})
    if label:
        print(f"labelling turns: {label[0]}-{label[-1]} characters")
    longest = max(rows, key=lambda s: len(s["completion"][0]["content"]))
    print(f"longest target: {len(longest['completion'][0]['content'])} characters "
          f"({longest['family']}, {kind(longest)})")  # fmt: skip
    print("tokens per family: min / median / max (n)")
    for fam, ls in sorted(lengths.items()):
        ls.sort()
        print(f"  {fam}: {ls[0]} / {ls[len(ls) // 2]} / {ls[-1]} ({len(ls)})")
    every = sorted(x for ls in lengths.values() for x in ls)
    print(f"  all: {every[0]} / {every[len(every) // 2]} / {every[-1]}; "
          f"over 2048: {sum(x > 2048 for x in every)}")  # fmt: skip


report(export, samples)
report(out, mix)
check(out, mix)

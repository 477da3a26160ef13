"""issue 13, session 20: the section's tables, read-only. Per held-out set and task: session 17's
base, session 18's tuned (seed 0), session 19's tuned (another mix) and session 20's tuned
(session 18's mix, seed 1; its rows and its store), from the rows committed in each results folder: reward / turns / cells raised / sub-calls / end; for session 20 also the labels
`unknown` (from the labelling cell's checks `N labels, K unknown`, or a printed Counter) and its root
replies in order (parse, label, compute, final, other). Then per family across the sets, and
aggregation (oolong + pairs) and needles per set.
usage: python tables20.py S17_RESULTS S18_RESULTS S19_RESULTS S20_RESULTS S20_DIR SET [SET ...]   (sets: a b c)"""

import json
import re
import sqlite3
import sys
from collections import defaultdict

s17, s18, s19, s20, s20dir, *sets = sys.argv[1:]
db = sqlite3.connect(f"file:{s20dir}/home/rlmd.db?mode=ro", uri=True)


def rows(path):
    got = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return got
    for line in lines:
        name, _, rest = line.partition(" ")
        if rest.startswith("{"):
            r = json.loads(rest)
            got[name, r["task"]] = r
    return got


def run_id(set_name, task):
    row = db.execute(
        "select run_id from rollouts where rollout_set=? and task_id=?", (set_name, task)
    ).fetchone()
    return row[0] if row else None


def unknown(rid):
    """'unknown' / labels from the run's first labelling output, or '-'."""
    for (out,) in db.execute(
        "select stdout from nodes where run_id=? and kind='cell' and depth=0 order by seq", (rid,)
    ):
        if m := re.search(r"(\d+) labels, (\d+) unknown", out or ""):
            return f"{m.group(2)}/{m.group(1)}"
        if m := re.search(r"Counter\(\{([^}]*)\}\)", out or ""):
            counts = {k: int(v) for k, v in re.findall(r"'([^']*)': (\d+)", m.group(1))}
            return f"{counts.get('unknown', 0)}/{sum(counts.values())} (Counter)"
    return "-"


def replies(rid):
    kinds = []
    for (d,) in db.execute(
        "select data from nodes where run_id=? and kind='model_call' order by seq", (rid,)
    ):
        c = json.loads(d or "{}")
        if c.get("role") != "root" or c.get("depth") != 0:
            continue
        r = c.get("response") or ""
        kinds.append(
            "parse" if "split(\"||\")" in r or "split('||')" in r
            else "label" if "llm_query" in r
            else "compute" if "known = [" in r or "I count the listed" in r
            else "final" if "FINAL" in r else "other"
        )  # fmt: skip
    return " > ".join(kinds) or "-"


def cell(r, detail=False):
    if r is None:
        return "not run"
    end = r["answer"] if r["status"] == "completed" else f"none ({r['status']})"
    end = (end[:24] + "…") if len(end) > 25 else end
    misuse = "yes" if r["misuse"] else "no"
    unk = ""
    if detail:
        rid = run_id(f"tuned-s20{X}", r["task"])
        unk = f" / {unknown(rid) if r['subs'] and rid else '-'}"
    return f"{r['reward']:.3g} / {r['iters']} / {r['errs']} / {r['subs']}{unk} / {misuse} / `{end}`"


names = ["s17 base", "s18 tuned", "s19 tuned", "s20 tuned"]
fam = defaultdict(lambda: defaultdict(list))
per_set = defaultdict(lambda: defaultdict(list))
gold = {}
for X in sets:
    old, mid, prev = rows(f"{s17}/rows-{X}.txt"), rows(f"{s18}/rows-{X}.txt"), rows(f"{s19}/rows-{X}.txt")
    new = rows(f"{s20}/rows-{X}.txt")
    who = [("s17 base", old, f"base-s17{X}"), ("s18 tuned", mid, f"tuned-s18{X}"),
           ("s19 tuned", prev, f"tuned-s19{X}"), ("s20 tuned", new, f"tuned-s20{X}")]  # fmt: skip
    print(f"\n| task (set {X.upper()}) | " + " | ".join(w for w, *_ in who) + " | s20 tuned's replies |")
    print("|---" * (len(who) + 2) + "|")
    for t in sorted({t for _, t in old}):
        cells = [cell(got.get((s, t)), w == "s20 tuned") for w, got, s in who]
        rid = run_id(f"tuned-s20{X}", t)
        print(f"| {t.removeprefix('heldout-')} | " + " | ".join(cells)
              + f" | {replies(rid) if rid else '-'} |")  # fmt: skip
        f = t.split("-")[1]
        group = "aggregation" if f in ("oolong", "pairs") else f
        for w, got, s in who:
            if (s, t) in got:
                fam[f][w].append(got[s, t]["reward"])
                per_set[X, group][w].append(got[s, t]["reward"])
                gold.setdefault((X, t), set()).add(json.dumps(got[s, t]["gold"]))
    for w, got, s in who:
        rs = [r for (n, _), r in got.items() if n == s]
        if rs:
            print(f"set {X.upper()} {w}: mean {sum(r['reward'] for r in rs) / len(rs):.3f} over "
                  f"{len(rs)}, solved {sum(r['reward'] == 1 for r in rs)}, misuse "
                  f"{sum(bool(r['misuse']) for r in rs)}, sub-calls {sum(r['subs'] for r in rs)}")  # fmt: skip

print("\n| family | " + " | ".join(f"{n} (n)" for n in names) + " |")
print("|---" * (len(names) + 1) + "|")
for f, by in sorted(fam.items()):
    vals = [f"{sum(by[n]) / len(by[n]):.3f} ({len(by[n])})" if by[n] else "—" for n in names]
    print(f"| {f} | " + " | ".join(vals) + " |")
print("\n| set, group | " + " | ".join(f"{n} (n)" for n in names) + " |")
print("|---" * (len(names) + 1) + "|")
for (x, g), by in sorted(per_set.items()):
    vals = [f"{sum(by[n]) / len(by[n]):.3f} ({len(by[n])})" if by[n] else "—" for n in names]
    print(f"| {x.upper()} {g} | " + " | ".join(vals) + " |")
differ = {k: v for k, v in gold.items() if len(v) > 1}
print(f"\ntasks whose gold answer differs between the sessions' rows: {len(differ)} {differ}")

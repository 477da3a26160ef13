"""issue 13, session 18: the section's per-task tables, read-only. Per held-out set and task:
session 17's base, session 17's tuned (sub-calls on itself), session 17's tuned with the base as
sub-model (the coordinator's tsub runs, aggregation only) and session 18's tuned (sub-calls on the
base, rlmd's default for an adapter): reward / turns / cells raised / sub-calls / labels `unknown`
(in the first printed Counter of labels) / FINAL misuse / end; then session 18's root replies in
order (parse, label, compute, final, other) and per-family means across the sets.
Rows come from bench.quality.rollout_report's files (rows-X.txt; the tsub rows from tsub-X.txt).
usage: python tables18.py S17_DIR S18_DIR SET [SET ...]   (sets: a b c)"""

import json
import re
import sqlite3
import sys
from collections import defaultdict

s17, s18, *sets = sys.argv[1:]
dbs = {d: sqlite3.connect(f"file:{d}/home/rlmd.db?mode=ro", uri=True) for d in (s17, s18)}


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


def run_id(db, set_name, task):
    row = db.execute(
        "select run_id from rollouts where rollout_set=? and task_id=?", (set_name, task)
    ).fetchone()
    return row[0] if row else None


def unknown(db, rid):
    """'unknown' count / labels in the run's first printed Counter of labels, or '-'."""
    for (out,) in db.execute(
        "select stdout from nodes where run_id=? and kind='cell' and depth=0 order by seq", (rid,)
    ):
        m = re.search(r"Counter\(\{([^}]*)\}\)", out or "")
        if m:
            counts = {k: int(v) for k, v in re.findall(r"'([^']*)': (\d+)", m.group(1))}
            return f"{counts.get('unknown', 0)}/{sum(counts.values())}"
    return "-"


def replies(db, rid):
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


def cell(r, db, set_name):
    if r is None:
        return "not run"
    end = r["answer"] if r["status"] == "completed" else f"none ({r['status']})"
    end = (end[:24] + "…") if len(end) > 25 else end
    unk = unknown(db, run_id(db, set_name, r["task"])) if r["subs"] else "-"
    misuse = "yes" if r["misuse"] else "no"
    return f"{r['reward']:.3g} / {r['iters']} / {r['errs']} / {r['subs']} / {unk} / {misuse} / `{end}`"


fam = defaultdict(lambda: defaultdict(list))
for x in sets:
    old, new, tsub = rows(f"{s17}/rows-{x}.txt"), rows(f"{s18}/rows-{x}.txt"), rows(f"{s18}/tsub-{x}.txt")
    who = [("s17 base", old, s17, f"base-s17{x}"), ("s17 tuned", old, s17, f"tuned-s17{x}"),
           ("s17 tuned + base sub", tsub, s17, f"tsub-s17{x}"), ("s18 tuned", new, s18, f"tuned-s18{x}")]  # fmt: skip
    print(f"\n| task (set {x.upper()}) | " + " | ".join(w for w, *_ in who) + " | s18 tuned's replies |")
    print("|---" * (len(who) + 2) + "|")
    for t in sorted({t for _, t in old}):
        cells = [cell(got.get((s, t)), dbs[d], s) if got.get((s, t)) or "tsub" not in s else "—"
                 for _, got, d, s in who]  # fmt: skip
        rid = run_id(dbs[s18], f"tuned-s18{x}", t)
        print(f"| {t.removeprefix('heldout-')} | " + " | ".join(cells)
              + f" | {replies(dbs[s18], rid) if rid else '-'} |")  # fmt: skip
        for w, got, _, s in who:
            if (s, t) in got:
                fam[t.split("-")[1]][w].append(got[s, t]["reward"])
    for w, got, _, s in who:
        rs = [r for (n, _), r in got.items() if n == s]
        if rs:
            print(f"set {x.upper()} {w}: mean {sum(r['reward'] for r in rs) / len(rs):.3f} over "
                  f"{len(rs)}, solved {sum(r['reward'] == 1 for r in rs)}, misuse "
                  f"{sum(bool(r['misuse']) for r in rs)}, sub-calls {sum(r['subs'] for r in rs)}")  # fmt: skip

names = ["s17 base", "s17 tuned", "s17 tuned + base sub", "s18 tuned"]
print("\n| family | " + " | ".join(f"{n} (n)" for n in names) + " |")
print("|---" * (len(names) + 1) + "|")
for f, by in sorted(fam.items()):
    vals = [f"{sum(by[n]) / len(by[n]):.3f} ({len(by[n])})" if by[n] else "—" for n in names]
    print(f"| {f} | " + " | ".join(vals) + " |")

"""issue 13, session 17: the section's tables from the eval's rows (bench.quality.rollout_report's
rows-X.txt) and the store: per task and set, base vs tuned reward / turns / cells raised /
sub-calls / FINAL misuse / end, and for aggregation tasks whether the run took the taught path
(a parse cell, then llm_query_batched, read from the root replies); then per-family means across
the sets. Read-only; run in /work/s17/t. usage: python tables17.py SET [SET ...] (a, b, c)"""

import json
import sqlite3
import sys
from collections import defaultdict

db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)


def rows(path: str) -> dict:
    got = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(" ")
            if rest.startswith("{"):
                r = json.loads(rest)
                got[name, r["task"]] = r
    return got


def path_taken(set_name: str, task: str) -> str:
    """How the run opened: the kinds of its root cells in order (parse / label / other)."""
    row = db.execute(
        "select run_id from rollouts where rollout_set=? and task_id=?", (set_name, task)
    ).fetchone()
    if row is None:
        return "-"
    kinds = []
    for (d,) in db.execute(
        "select data from nodes where run_id=? and kind='model_call' order by seq", row
    ):
        c = json.loads(d)
        if c.get("role") != "root" or c.get("depth") != 0:
            continue
        r = c.get("response") or ""
        kinds.append(
            "parse" if "split(\"||\")" in r or "split('||')" in r
            else "label" if "llm_query_batched" in r or "llm_query(" in r or "llm_map" in r
            else "final" if "FINAL" in r else "other"
        )  # fmt: skip
    return " > ".join(kinds)


def cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    end = r["answer"] if r["status"] == "completed" else f"none ({r['status']})"
    end = (end[:28] + "…") if len(end) > 29 else end
    misuse = "yes" if r["misuse"] else "no"
    return f"{r['reward']:g} / {r['iters']} / {r['errs']} / {r['subs']} / {misuse} / `{end}` ({r['source']})"


fam = defaultdict(lambda: defaultdict(list))
for x in sys.argv[1:]:
    got = rows(f"rows-{x}.txt")
    tasks = sorted({t for _, t in got})
    print(
        f"\n| task (set {x.upper()}) | base: reward / turns / raised / sub-calls / misuse / end | tuned | tuned's cells |"
    )
    print("|---|---|---|---|")
    for t in tasks:
        b, u = got.get((f"base-s17{x}", t)), got.get((f"tuned-s17{x}", t))
        print(
            f"| {t.removeprefix('heldout-')} | {cell(b)} | {cell(u)} | {path_taken(f'tuned-s17{x}', t)} |"
        )
        f = t.split("-")[1]
        for who, r in (("base", b), ("tuned", u)):
            if r is not None:
                fam[f][who].append(r)
    for who in ("base", "tuned"):
        rs = [r for (n, _), r in got.items() if n == f"{who}-s17{x}"]
        if rs:
            mean = sum(r["reward"] for r in rs) / len(rs)
            print(f"set {x.upper()} {who}: mean {mean:.3f} over {len(rs)}, solved "
                  f"{sum(r['reward'] == 1 for r in rs)}, misuse {sum(bool(r['misuse']) for r in rs)}, "
                  f"sub-calls {sum(r['subs'] for r in rs)}")  # fmt: skip
print("\n| family | n | base mean | tuned mean | tuned runs with sub-calls |")
print("|---|---|---|---|---|")
for f, by in sorted(fam.items()):
    b, u = by["base"], by["tuned"]
    mb = sum(r["reward"] for r in b) / len(b) if b else float("nan")
    mu = sum(r["reward"] for r in u) / len(u) if u else float("nan")
    print(f"| {f} | {len(u)} | {mb:.3f} | {mu:.3f} | {sum(r['subs'] > 0 for r in u)}/{len(u)} |")

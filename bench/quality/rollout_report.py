"""Held-out metrics per rollout set, read-only from a rollout store: per task family and
overall, reward, iterations, cells that raised, FINAL misuse (``fix_final``'s template fixes
needed), sub-calls and seconds per run (the training write-ups in ``bench/RESULTS.md``).

    python -m bench.quality.rollout_report [--db HOME/rlmd.db] SET [SET ...]
"""

import argparse
import json
import sqlite3
from collections import defaultdict

from rlmd.engine import parsing
from rlmd.train.export import fix_final


def report(db: sqlite3.Connection, sets: list[str]) -> None:
    """Print one JSON row per rollout, then a ``|``-separated table per set."""
    for s in sets:
        fam = defaultdict(list)
        for run_id, task, family, reward, iters, subs, errs, details in db.execute(
            "select run_id, task_id, family, reward, iterations, subcalls, cell_errors, details "
            "from rollouts where rollout_set=? order by task_id",
            (s,),
        ):
            d = json.loads(details or "{}")
            turns = [
                json.loads(x).get("response") or ""
                for (x,) in db.execute(
                    "select data from nodes where run_id=? and kind='model_call' and role='root' and "
                    "json_extract(data,'$.depth')=0 order by seq",
                    (run_id,),
                )
            ]
            misuse, code = [], ""
            for t in turns:
                _, fx = fix_final(t, code)
                misuse += fx
                code += "\n" + "\n".join(parsing.find_code_blocks(t))
            rec = dict(
                misuse=misuse,
                task=task,
                reward=reward,
                iters=iters,
                subs=subs,
                errs=errs,
                source=d.get("answer_source"),
                status=d.get("status"),
                secs=d.get("seconds"),
                answer=str(d.get("answer"))[:40],
                gold=str(d.get("gold"))[:40],
                calls=len(turns),
                repl=sum("```repl" in t for t in turns),
                python=sum("```python" in t for t in turns),
                final=sum("FINAL" in t for t in turns),
                copies=sum(
                    1 for a, b in zip(turns, turns[1:], strict=False) if a.strip() == b.strip()
                ),
            )
            fam[family].append(rec)
            print(s, json.dumps(rec))
        print(
            f"\n{s}: family | n | mean reward | solved | root calls | ```repl | ```python | with FINAL | copies prev | cells raised | sub-calls | answer from final | FINAL misuse runs | s/run"
        )
        allr = [r for v in fam.values() for r in v]
        for name, rs in sorted(fam.items()) + [("all", allr)]:
            n = len(rs)
            print(
                f"{name} | {n} | {sum(r['reward'] for r in rs) / n:.3f} | {sum(r['reward'] >= 1 for r in rs)}/{n} | "
                f"{sum(r['calls'] for r in rs)} | {sum(r['repl'] for r in rs)} | {sum(r['python'] for r in rs)} | "
                f"{sum(r['final'] for r in rs)} | {sum(r['copies'] for r in rs)} | {sum(r['errs'] or 0 for r in rs)} | "
                f"{sum(r['subs'] or 0 for r in rs)} | {sum(r['source'] == 'final' for r in rs)}/{n} | {sum(bool(r['misuse']) for r in rs)}/{n} | "
                f"{sum(r['secs'] or 0 for r in rs) / n:.0f}"
            )
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="home/rlmd.db", help="the rollout store (default: %(default)s)")
    ap.add_argument("sets", nargs="+", help="rollout set names (rlmd train rollout --set)")
    args = ap.parse_args()
    report(sqlite3.connect(f"file:{args.db}?mode=ro", uri=True), args.sets)


if __name__ == "__main__":
    main()

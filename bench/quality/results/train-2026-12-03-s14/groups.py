"""issue 13 item 6, session 14 (t14): what a GRPO export holds, per group (task): rewards, how
many are all-equal (no signal), whether every sample's first root prompt is the one the export
scores them against, how many distinct first turns, completion lengths in characters, and each
run's answer and status from the store.
usage: python groups.py STORE_DB GROUPS_JSONL (an export made with --keep-zero-advantage)"""

import json
import sqlite3
import sys
from statistics import mean, pstdev

db, path = sys.argv[1:3]
sys.path[:0] = ["/work/wt-t14"]
from rlmd.store import Store  # noqa: E402
from rlmd.train.export import root_turns  # noqa: E402

groups = [json.loads(x) for x in open(path)]
equal = 0
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
with Store(db) as store:
    for g in groups:
        rewards = g["rewards"]
        same = len(set(rewards)) == 1
        equal += same
        prompts = [root_turns(store, r, 0)[0]["prompt"] for r in g["run_ids"]]
        same_prompt = all(p == g["prompt"] for p in prompts)
        texts = [c[0]["content"] for c in g["completions"]]
        rows = []
        for rid in g["run_ids"]:
            det = c.execute(
                "select details, iterations, subcalls from rollouts where run_id=?", (rid,)
            ).fetchone()
            d = json.loads(det[0])
            rows.append(f"{str(d.get('answer'))[:24]!r}/{d.get('status')}/{det[1]}it/{det[2]}sub")
        print(
            f"{g['task_id']}: rewards {[round(r, 3) for r in rewards]} mean {mean(rewards):.3f} "
            f"sd {pstdev(rewards):.3f}{' ALL EQUAL' if same else ''}; first prompt same for all "
            f"samples: {same_prompt}; distinct first turns {len(set(texts))}/{len(texts)}; "
            f"first-turn chars {[len(t) for t in texts]}"
        )
        print("    answers:", "; ".join(rows))
print(f"{len(groups)} groups, {equal} with all-equal rewards (no signal), "
      f"{len(groups) - equal} with a spread")

"""issue 13, session 13: per rollout set and task, the root calls and which of them the repetition
guard ended (finish_reason "repetition", rlmd/models/repetition.py), with how each call finished.
Read-only on home/rlmd.db; run in /work/s13/t. usage: python guard.py SET [SET ...]"""

import json
import sqlite3
import sys

db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
for set_name in sys.argv[1:]:
    rows = db.execute(
        "select task_id, run_id from rollouts where rollout_set=? order by task_id", (set_name,)
    ).fetchall()
    ended = total = 0
    for task, rid in rows:
        calls = [
            json.loads(d)
            for (d,) in db.execute(
                "select data from nodes where run_id=? and kind='model_call' order by seq", (rid,)
            )
        ]
        root = [c for c in calls if c.get("role") == "root" and c.get("depth") == 0]
        finishes = [c.get("finish_reason") or ("error" if c.get("error") else None) for c in root]
        hit = finishes.count("repetition")
        ended += hit
        total += len(root)
        print(f"{set_name} {task}: {len(root)} root calls, finish {finishes}, guard ended {hit}")
        for c in root:
            if c.get("finish_reason") == "repetition":
                tail = (c.get("response") or "")[-300:]
                print(f"    kept reply ends: {tail!r}")
    print(f"{set_name}: guard ended {ended} of {total} root calls\n")

"""(session 12's script, unchanged; run in /work/s13/t) A run's root history as the model saw it last: each turn's code and the REPL's reply
(first lines). usage: python traj2.py SET TASK"""

import json
import sqlite3
import sys

db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
(rid,) = db.execute(
    "select run_id from rollouts where rollout_set=? and task_id=?",
    (sys.argv[1], sys.argv[2]),
).fetchone()
calls = [
    json.loads(d)
    for (d,) in db.execute(
        "select data from nodes where run_id=? and kind='model_call' order by seq",
        (rid,),
    )
]
root = [c for c in calls if c.get("role") == "root" and c.get("depth") == 0]
print("run", rid, "root calls", len(root))
for m in (root[-1].get("messages") or [])[2:]:
    print(f"== {m['role']}\n{m['content'][:500]}")
print("== last response\n" + (root[-1].get("response") or "")[:500])

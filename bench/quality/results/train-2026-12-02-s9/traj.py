import json
import sqlite3
import sys

db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
s, task = sys.argv[1], sys.argv[2]
(run_id,) = db.execute(
    "select run_id from rollouts where rollout_set=? and task_id=?", (s, task)
).fetchone()
for kind, data in db.execute("select kind, data from nodes where run_id=? order by seq", (run_id,)):
    d = json.loads(data)
    if kind == "model_call" and d.get("role") == "root" and d.get("depth") == 0:
        print("--- ROOT TURN\n" + (d.get("response") or "")[:900])
    elif kind in ("cell", "repl_cell", "code"):
        print("--- CELL", kind, json.dumps(d)[:600])

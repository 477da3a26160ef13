"""issue 13, session 14 (run in /work/s13/t): every model call of one rollout with its finish
reason, length (characters) and latency, and the head and tail of each reply.
usage: python calls.py SET TASK"""

import json
import sqlite3
import sys

db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
(rid,) = db.execute(
    "select run_id from rollouts where rollout_set=? and task_id=?", (sys.argv[1], sys.argv[2])
).fetchone()
print("run", rid, db.execute("select status, answer from runs where id=?", (rid,)).fetchone())
for (d,) in db.execute(
    "select data from nodes where run_id=? and kind='model_call' order by seq", (rid,)
):
    c = json.loads(d)
    r = c.get("response") or ""
    print(f"-- {c.get('role')} finish={c.get('finish_reason')} chars={len(r)} s={c.get('latency_s') or 0:.1f}")
    print(r[:400])
    print("   ... " + r[-120:])

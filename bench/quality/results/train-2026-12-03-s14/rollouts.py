"""issue 13 item 6, session 14 (t14): the rollout rows of one or more sets from the store (the run's
own progress lines were lost: two llama.cpp loads at once left the process's stderr on /dev/null,
fixed in rlmd/models/local.py after this run's code was archived): task, sample, reward, root turns,
sub-calls, cells raised, answer, status, answer source, seconds, start (UTC), and per set the mean.
usage: python rollouts.py STORE_DB SET [SET ...]"""

import json
import sqlite3
import sys
import time

db, sets = sys.argv[1], sys.argv[2:]
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
for s in sets:
    rows = c.execute(
        "select r.task_id, r.sample_index, r.reward, r.iterations, r.subcalls, r.cell_errors,"
        " r.details, u.started_at from rollouts r join runs u on u.id = r.run_id"
        " where r.rollout_set = ? order by r.task_id, r.sample_index", (s,)
    ).fetchall()
    print(f"## {s}: {len(rows)} rollouts")
    print("| task | k | reward | turns | sub-calls | cells raised | answer | status | source | s | start |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t, k, rew, it, sub, err, det, start in rows:
        d = json.loads(det)
        ans = str(d.get("answer"))[:28].replace("|", "/").replace("\n", " ")
        print(f"| {t} | {k} | {rew:.3f} | {it} | {sub} | {err} | {ans!r} | {d.get('status')} | "
              f"{d.get('answer_source')} | {d.get('seconds', 0):.0f} | "
              f"{time.strftime('%H:%M:%S', time.gmtime(start))} |")
    if rows:
        n = len(rows)
        print(f"mean reward {sum(r[2] for r in rows) / n:.3f}, solved (1.0) {sum(r[2] == 1 for r in rows)}/{n}, "
              f"any credit {sum(r[2] > 0 for r in rows)}/{n}, turns {sum(r[3] for r in rows) / n:.1f}, "
              f"sub-calls {sum(r[4] for r in rows) / n:.1f}, cells raised {sum(r[5] for r in rows)}, "
              f"s/run {sum(json.loads(r[6]).get('seconds', 0) for r in rows) / n:.0f}\n")

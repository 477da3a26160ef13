"""Loss per step: steps 1-32 (sessions 6-7, session 6's teacher data) and 33+ (session 9, the
repair data), from the two log.jsonl files; writes loss.png and log.jsonl (both runs) here."""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

old = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
new = [json.loads(x) for x in open(sys.argv[2]) if x.strip()]
with open(sys.argv[3] + "/log.jsonl", "w") as f:
    for r in old:
        f.write(json.dumps({**r, "data": "s6-teacher"}) + "\n")
    for r in new:
        f.write(json.dumps({**r, "data": "s9-repair"}) + "\n")
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(
    [r["step"] for r in old],
    [r["loss"] for r in old],
    "o-",
    label="steps 1-32: session 6 teacher data (s6/s7)",
)
ax.plot(
    [r["step"] for r in new],
    [r["loss"] for r in new],
    "s-",
    color="C3",
    label="steps 33+: repair data (s9)",
)
ax.set_xlabel("step (batch 1, lr 2e-4)")
ax.set_ylabel("loss")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[3] + "/loss.png", dpi=100)

import json, sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
d = {}
for r in rows:
    j = json.loads(" ".join(r[r.index("load") + 4:])); d[(r[0], r[1])] = j
idx = sorted({k[1] for k in d}, key=int)
pc = [d[("after", i)]["cpu_ms"] / d[("before", i)]["cpu_ms"] for i in idx]
pa = [d[("after", i)]["to_answer_ms"] / d[("before", i)]["to_answer_ms"] for i in idx]
for side in ("before", "after"):
    print(side, "cpu median %.2f ms, to answer median %.2f ms, min-answer median %.2f" % (
        st.median(d[(side, i)]["cpu_ms"] for i in idx), st.median(d[(side, i)]["to_answer_ms"] for i in idx),
        st.median(d[(side, i)]["min_answer_ms"] for i in idx)))
print("paired after/before: cpu median %.3f (%s), answer median %.3f" % (st.median(pc), " ".join(f"{x:.2f}" for x in pc), st.median(pa)))

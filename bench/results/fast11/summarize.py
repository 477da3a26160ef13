"""Issue 16 item 3, session 11: the bench-3 rows of the A/B harness outputs, one line each."""
import re, sys, glob
rows = ["rlmd subprocess + store", "rlmd subprocess, no store ", "rlmd inprocess + store", "rlms local "]
for f in sorted(glob.glob(sys.argv[1])):
    t = open(f).read()
    load = re.search(r"load average: ([\d.]+)", t).group(1)
    out = [f.split("/")[-1], "load " + load]
    for r in rows:
        m = re.search(re.escape(r) + r".*?\s{2}([\d.]+) ms\s+[\d.]+\s*$", t, re.M)
        out.append(f"{r.strip()} {m.group(1) if m else '?'}")
    m = re.search(r"to answer \(inprocess \+ store\).*?([\d.]+)\s+rlmd <= 0.7x", t)
    out.append("inproc/rlms " + (m.group(1) if m else "?"))
    m = re.search(r"to answer \(subprocess \+ store\).*?([\d.]+)\s+rlmd <= rlms", t)
    out.append("subproc/rlms " + (m.group(1) if m else "?"))
    m = re.search(r"loop overhead per iteration \(inprocess \+ store\)\s+([\d.]+) ms", t)
    out.append("per-iter " + (m.group(1) if m else "?"))
    out.append(re.search(r"rc=(\d+)", t).group(0) if "rc=" in t else "rc?")
    print(" | ".join(out))

"""Bench 3 medians (to answer) from bench/harness.py --only 3 outputs, with the load at the
start: python h3sum.py FILE... -> one line per file."""
import re, sys
ROWS = ("rlmd inprocess + store", "rlmd subprocess + store", "rlmd subprocess, no store", "rlms local")
for f in sys.argv[1:]:
    text = open(f).read()
    load = re.search(r"load average: ([\d.]+)", text).group(1)
    out = [f.split("/")[-1], f"load {load}"]
    for name in ROWS:
        m = re.search(r"^" + re.escape(name) + r"\s{2,}.*?([\d.]+) ms\s+([\d.]+)\s*$", text, re.M)
        out.append(f"{name.replace('rlmd ', '')} {m.group(1)} ms ({m.group(2)})" if m else f"{name} ?")
    per = re.search(r"loop overhead per iteration \(inprocess \+ store\)\s+([\d.]+) ms", text)
    out.append(f"per iteration {per.group(1)} ms" if per else "")
    print(" | ".join(out))

import sys, re, statistics
rows = [l for l in open(sys.argv[1]) if l.startswith("round")]
by = {}
for l in rows:
    r = int(l.split()[1]); s = l.split()[3]
    ans = float(re.search(r"to answer median ([\d.]+)", l).group(1)); cpu = float(re.search(r"cpu median ([\d.]+)", l).group(1))
    load = float(l.split()[5])
    by.setdefault(r, {})[s] = (ans, cpu, load)
ra, rc = [], []
for r, d in sorted(by.items()):
    if "A" in d and "B" in d:
        ra.append(d["B"][0]/d["A"][0]); rc.append(d["B"][1]/d["A"][1])
        print(f"round {r}: A {d['A'][0]:.2f} ms ({d['A'][0]/20:.3f}/it) B {d['B'][0]:.2f} ms ({d['B'][0]/20:.3f}/it)  B/A answer {ra[-1]:.3f} cpu {rc[-1]:.3f}  load {d['A'][2]}-{d['B'][2]}")
print(f"paired median B/A: answer {statistics.median(ra):.3f}  cpu {statistics.median(rc):.3f}  (n={len(ra)})")
print(f"A median per-iter {statistics.median([d['A'][0] for d in by.values() if 'A' in d])/20:.3f} ms, B {statistics.median([d['B'][0] for d in by.values() if 'B' in d])/20:.3f} ms")

"""Paired bench-3 harness runs (h3.sh's files DIR/h3<tag>-{base,new}-<i>.txt): per pair the
time-to-answer medians of in-process + store and subprocess + store, new / base, each side's
ratio to rlms local in its own run, the loop overhead per iteration; then the medians.
    python h3pairs.py DIR TAG"""
import re, statistics, sys
from pathlib import Path

ROWS = {"in": "rlmd inprocess + store", "sub": "rlmd subprocess + store", "nostore": "rlmd subprocess, no store", "rlms": "rlms local"}

def parse(f: Path) -> dict:
    text = f.read_text()
    out = {"load": float(re.search(r"load average: ([\d.]+)", text).group(1)), "at": re.search(r"\d\d:\d\d:\d\d", text).group(0)}
    for k, name in ROWS.items():
        m = re.search(r"^" + re.escape(name) + r"\s{2,}.*?([\d.]+) ms\s+([\d.]+)\s*$", text, re.M)
        out[k] = float(m.group(1))
    out["per_it"] = float(re.search(r"loop overhead per iteration \(inprocess \+ store\)\s+([\d.]+) ms", text).group(1))
    return out

d, tag = Path(sys.argv[1]), sys.argv[2]
pairs = []
i = 1
while (d / f"h3{tag}-base-{i}.txt").exists() and (d / f"h3{tag}-new-{i}.txt").exists():
    b, n = parse(d / f"h3{tag}-base-{i}.txt"), parse(d / f"h3{tag}-new-{i}.txt")
    pairs.append((b, n))
    print(f"pair {i} {b['at']} load {b['load']:.2f}/{n['load']:.2f} | in+store base {b['in']:.1f} new {n['in']:.1f} ms = {n['in']/b['in']:.3f} "
          f"| sub+store base {b['sub']:.1f} new {n['sub']:.1f} = {n['sub']/b['sub']:.3f} | /rlms in {b['in']/b['rlms']:.2f}->{n['in']/n['rlms']:.2f} "
          f"sub {b['sub']/b['rlms']:.2f}->{n['sub']/n['rlms']:.2f} | per it {b['per_it']:.2f}->{n['per_it']:.2f} ms")
    i += 1
m = statistics.median
print(f"n={len(pairs)} medians: in+store new/base {m([n['in']/b['in'] for b, n in pairs]):.3f}, "
      f"sub+store new/base {m([n['sub']/b['sub'] for b, n in pairs]):.3f}, sub no store new/base {m([n['nostore']/b['nostore'] for b, n in pairs]):.3f} (same code: noise) | "
      f"in/rlms base {m([b['in']/b['rlms'] for b, n in pairs]):.2f} new {m([n['in']/n['rlms'] for b, n in pairs]):.2f} | "
      f"sub/rlms base {m([b['sub']/b['rlms'] for b, n in pairs]):.2f} new {m([n['sub']/n['rlms'] for b, n in pairs]):.2f} | "
      f"per it base {m([b['per_it'] for b, n in pairs]):.2f} new {m([n['per_it'] for b, n in pairs]):.2f} ms "
      f"(<= 2 ms: base {sum(b['per_it'] <= 2 for b, n in pairs)}, new {sum(n['per_it'] <= 2 for b, n in pairs)} of {len(pairs)})")

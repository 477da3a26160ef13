import sys, re, collections
path = sys.argv[1]; top = int(sys.argv[2])
excl = ["Store.flush", "Store.close", "_find_and_load", "Store._flush_due"]
self_c = collections.Counter(); incl = collections.Counter(); total = 0; thr = collections.Counter()
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); frames = stack.split(";")
    if not any("rlmd_whole_run" in f or "_Worker._serve" in f for f in frames): continue
    if any(e in f for f in frames for e in excl): continue
    total += n
    ks = [re.sub(r":\d+\)", ")", f) for f in frames]
    thr["worker" if any("_Worker" in k for k in ks) else "main"] += n
    self_c[ks[-1]] += n
    for k in set(ks): incl[k] += n
print("total", total, "per run ms", total/2000/int(sys.argv[3]), dict(thr))
print("--- self")
for k, v in self_c.most_common(top): print(f"{v/total*100:6.2f}% {k}")
print("--- inclusive")
for k, v in incl.most_common(top): print(f"{v/total*100:6.2f}% {k}")

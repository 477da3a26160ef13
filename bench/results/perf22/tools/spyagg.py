import sys, re, collections
path = sys.argv[1]; top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
filt = sys.argv[3] if len(sys.argv) > 3 else None
self_c = collections.Counter(); incl = collections.Counter(); total = 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n)
    frames = stack.split(";")
    if filt and not any(filt in f for f in frames):
        continue
    total += n
    def key(f):
        f = re.sub(r":\d+\)", ")", f)
        return f
    ks = [key(f) for f in frames]
    self_c[ks[-1]] += n
    for k in set(ks):
        incl[k] += n
print("total", total)
print("--- self")
for k, v in self_c.most_common(top): print(f"{v/total*100:6.2f}% {k}")
print("--- inclusive")
for k, v in incl.most_common(top): print(f"{v/total*100:6.2f}% {k}")

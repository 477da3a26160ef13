import sys, collections
self_c = collections.Counter(); incl = collections.Counter(); tot = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); tot += n
    frames = stack.split(";")
    self_c[frames[-1]] += n
    seen = set()
    for f in frames:
        key = f.split(" (")[0] + " " + f.split("/")[-1].split(":")[0] if "(" in f else f
        if key not in seen:
            seen.add(key); incl[key] += n
print("total", tot)
print("== self")
for k, v in self_c.most_common(40): print(f"{v/tot*100:5.1f}% {k[:150]}")
print("== inclusive")
for k, v in incl.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 70): print(f"{v/tot*100:5.1f}% {k[:150]}")

import sys, collections
tot = 0; incl = collections.Counter(); selfc = collections.Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n)
    frames = stack.split(";")
    if "rlmd_whole_run" not in stack and "_run_once" not in stack: continue
    tot += n
    seen = set()
    for f in frames:
        key = f.split(" (")[0] + " " + (f.split("/")[-1].split(":")[0] if "/" in f else "")
        if key not in seen:
            incl[key] += n; seen.add(key)
    selfc[frames[-1].split(" (")[0] + " " + frames[-1].split("/")[-1]] += n
print("total samples in loop", tot)
for k, v in incl.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60):
    print(f"{100*v/tot:6.1f}% {k}")
print("--- self")
for k, v in selfc.most_common(30):
    print(f"{100*v/tot:6.1f}% {k}")

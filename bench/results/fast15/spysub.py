import sys, collections
must, mustnot = sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None
selfc = collections.Counter(); incl = collections.Counter(); tot = 0; all_ = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" "); n = int(n); all_ += n
    if must not in stack or (mustnot and mustnot in stack): continue
    tot += n
    frames = stack.split(";"); i = max(j for j, f in enumerate(frames) if must in f)
    sub = frames[i+1:]
    selfc[frames[-1]] += n
    seen = set()
    for f in sub:
        k = f.split(" (")[0]
        if k not in seen: seen.add(k); incl[k] += n
print(f"{must}: {tot} samples = {tot/all_*100:.1f}% of all")
print("== inclusive below"); [print(f"{v/tot*100:5.1f}% {k[:120]}") for k, v in incl.most_common(45)]
print("== self"); [print(f"{v/tot*100:5.1f}% {k[:120]}") for k, v in selfc.most_common(25)]

"""issue 13, session 13 (t13): what the repetition guard (rlmd/models/repetition.py) costs per
streamed piece, against its peer, the time llama.cpp takes to write one token of the 0.5B at one
thread (session 12's diagnosis call: 1,024 tokens in 149 s, bench/RESULTS.md). A reply of ~1,000
pieces of 4 characters that never repeats (the guard checks every line, never fires); best of 20.
Target: under 0.1 % of a token's time. Exit 1 when missed. usage: python guard_cost.py"""

import os
import sys
import time

from rlmd.models.repetition import GuardSettings, RepeatGuard

TOKEN_S = 149 / 1024  # peer: seconds per token of the 0.5B at one thread (session 12)
text = "```repl\n" + "".join(f"print(repr(context[{i}: {i} + 150]))\n" for i in range(110))
pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
best = float("inf")
for _ in range(20):
    guard = RepeatGuard(GuardSettings())
    t0 = time.perf_counter()
    for p in pieces:
        guard.feed(p)
    best = min(best, time.perf_counter() - t0)
    assert guard.kept is None
per = best / len(pieces)
ratio = per / TOKEN_S
print(
    f"{len(pieces)} pieces ({len(text)} chars): {best * 1e3:.2f} ms, {per * 1e6:.2f} us a piece; "
    f"peer (a 0.5B token at one thread) {TOKEN_S * 1e3:.0f} ms; ratio {ratio:.1e} "
    f"(target < 1e-3); load {os.getloadavg()[0]:.1f}"
)
sys.exit(0 if ratio < 1e-3 else 1)

import sys, os, gc, time
sys.path.insert(0, os.environ.get("ROOT", "."))
from rlmd.kernel import core
k = core.Kernel(lambda fn, a: None, capture="global")
k.bind_context("The quick brown fox. " * 400)
CELL = "x = sum(range(100)); print(x)"
for _ in range(1000): k.exec_cell(CELL)
for label in ("gc on", "gc off", "gc on"):
    if label == "gc off": gc.disable()
    else: gc.enable()
    s0 = [d["collections"] for d in gc.get_stats()]
    t = time.process_time()
    for _ in range(10000): k.exec_cell(CELL)
    dt = (time.process_time() - t) / 10000
    s1 = [d["collections"] for d in gc.get_stats()]
    print(label, f"{dt*1e6:.1f} us/cell", "collections per 1000 cells", [(b - a) / 10 for a, b in zip(s0, s1)], "tracked", len(gc.get_objects()))

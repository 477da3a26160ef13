import asyncio, sys, tempfile, time, statistics, collections
from pathlib import Path
import harness as h
from rlmd.engine import events as ev
async def main(n, store):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    marks = collections.defaultdict(list)
    orig = h.CellFinished
    for i in range(n + 3):
        t0 = time.perf_counter(); seen = []
        oemit = ev.EventBus.emit
        def emit(self, e, seen=seen):
            seen.append((type(e).__name__, time.perf_counter())); oemit(self, e)
        ev.EventBus.emit = emit
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db if store else None)
        ev.EventBus.emit = oemit
        if i < 3: continue
        first = {}
        for k, t in seen:
            first.setdefault(k, t)
        its = [t for k, t in seen if k == "IterationStarted"]
        marks["RunStarted"].append(first["RunStarted"] - t0)
        marks["first iteration"].append(its[0] - t0)
        marks["iter 2..20 each"].append((its[-1] - its[1]) / 18)
        marks["last cell end -> answer"].append(r.to_answer_s - ([t for k, t in seen if k == "CellFinished"][-1] - t0))
        marks["answer"].append(r.to_answer_s)
        marks["last iteration to answer"].append(r.to_answer_s - (its[-1] - t0))
    for k, v in marks.items():
        print(f"{k:28s} {statistics.median(v)*1000:7.3f} ms")
asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "store"))

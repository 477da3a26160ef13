"""Bench 3's in-process (or subprocess) + store run, N runs in this process, this checkout's
store: medians of time to answer (start of the call to the last cell's end), the whole call
(store opened and closed), and process CPU; the load at the end.
    [NO_STORE=1] PYTHONPATH=<checkout>:<checkout>/bench python loop_ab.py N [inprocess|subprocess] [LABEL]"""
import asyncio, os, statistics, sys, tempfile, time
from pathlib import Path
import harness as h

N = int(sys.argv[1]); SANDBOX = sys.argv[2] if len(sys.argv) > 2 else "inprocess"
STORE = os.environ.get("NO_STORE") is None
LABEL = sys.argv[3] if len(sys.argv) > 3 else ""

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    rows = []
    for i in range(N + 3):
        c, w = time.process_time(), time.perf_counter()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=db if STORE else None)
        rows.append((r.to_answer_s, time.perf_counter() - w, time.process_time() - c))
        assert not r.store_errors and r.result.status == "completed", r.store_errors
    rows = rows[3:]
    m = lambda j: statistics.median(x[j] for x in rows) * 1000
    print(f"{LABEL} {SANDBOX} n={N} answer {m(0):.2f} ms | call {m(1):.2f} ms | cpu {m(2):.2f} ms "
          f"| load {open('/proc/loadavg').read().split()[0]}", flush=True)
asyncio.run(main())

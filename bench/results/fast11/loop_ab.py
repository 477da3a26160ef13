"""Issue 16 item 3, session 11: the in-process whole run with the store (bench 3's
``rlmd inprocess + store`` row), timed alone: to answer / 20 and the process CPU per run.

    PYTHONPATH=<checkout>:<checkout>/bench python loop_ab.py N [--rlms]

Prints one JSON line: medians of to-answer (ms), process CPU (ms) per run; with --rlms the
rlms local run's to-answer too, alternating with rlmd's.
"""
import asyncio, json, statistics, sys, tempfile, time, gc
from pathlib import Path

import harness as h

async def main(n: int, rlms: bool) -> None:
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    rscript, _ = h.make_script(calls, "rlms")
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "w.db"
    ans, cpu, peer = [], [], []
    for i in range(n + 2):
        gc.collect()
        c0 = time.process_time()
        run = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
        c1 = time.process_time()
        assert run.result.status == "completed", run.result
        assert not run.store_errors
        if i >= 2:
            ans.append(run.to_answer_s * 1000)
            cpu.append((c1 - c0) * 1000)
        if rlms:
            gc.collect()
            res = h.rlms_whole_run(rscript, h.SMALL_CONTEXT)
            if i >= 2:
                peer.append(res[0].execution_time * 1000)
    out = {"n": n, "to_answer_ms": statistics.median(ans), "cpu_ms": statistics.median(cpu),
           "min_answer_ms": min(ans)}
    if rlms:
        out["rlms_ms"] = statistics.median(peer)
        out["ratio"] = out["to_answer_ms"] / out["rlms_ms"]
    print(json.dumps(out))

if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), "--rlms" in sys.argv))

"""Issue 16 item 3, session 14 (after session 11's loop_ab.py): N whole runs of bench 3's
script (20 iterations, 50 llm_query) in one process; prints one JSON line with the medians
of to-answer (ms) and process CPU per run (ms).

    PYTHONPATH=<checkout>:<checkout>/bench python loop_ab.py N SANDBOX store|nostore
"""
import asyncio, gc, json, statistics, sys, tempfile, time
from pathlib import Path

import harness as h


async def main(n: int, sandbox: str, store: bool) -> None:
    calls = [3] * 10 + [2] * 10
    script, _ = h.make_script(calls, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    ans, cpu = [], []
    for i in range(n + 2):
        gc.collect()
        c0 = time.process_time()
        run = await h.rlmd_whole_run(
            script, h.SMALL_CONTEXT, sandbox=sandbox, store_path=db if store else None
        )
        c1 = time.process_time()
        assert run.result.status == "completed", run.result
        assert not run.store_errors
        if i >= 2:
            ans.append(run.to_answer_s * 1000)
            cpu.append((c1 - c0) * 1000)
    print(json.dumps({"n": n, "sandbox": sandbox, "store": store,
                      "to_answer_ms": round(statistics.median(ans), 2),
                      "cpu_ms": round(statistics.median(cpu), 2),
                      "min_answer_ms": round(min(ans), 2)}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3] == "store"))

"""Whole run against the reference over one OpenAI-compatible server (issue 16 item 3).

Run: ``.venv/bin/python bench/whole_run_server.py [--reps 12]`` (about a minute on 2
cores). The issue's comparison: rlmd and the reference library ``rlms`` (0.1.3) answer the
same question over the same scripted server (``bench/script_server.py``, its own process,
HTTP/1.1 keep-alive; rlmd streams, as it does with every ``base_url`` server, rlms does
not): 20 root turns and 50 sub-calls, benchmark 3's script (``bench/harness.py``). Each
library makes its own client per run, as a one-off ``rlmd run`` or ``RLM.completion()``
does. Runs alternate in rounds (order reversed every round) in this one process.

**Time to answer**: rlmd from the call (store opened first, as ``rlmd run`` does) to the end
of the cell that gives the answer; rlms its own ``execution_time`` (from the start of
``completion()`` to the answer, before its teardown). The server is checked to have seen
exactly 20 root turns and 50 sub-calls per run; rlmd's store is checked to hold the run.

**Targets** (issue 16 item 3): rlmd with the hardened subprocess sandbox and its store <=
1.0x rlms in-process, rlmd in-process with its store <= 0.7x (medians). Exits 1 when
missed. Benchmark 3 of ``bench/harness.py`` measures the same runs with instant in-process
models (no HTTP): the harness's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rlm.clients  # noqa: E402
import rlm.core.rlm as rlms_core  # noqa: E402
from rlm import RLM  # noqa: E402

from bench.harness import (  # noqa: E402
    QUESTION,
    SMALL_CONTEXT,
    SUB_REPLY,
    Impl,
    check_store_run,
    engine_config,
    make_script,
    measure,
    summarize,
)
from rlmd.engine import run_task  # noqa: E402
from rlmd.engine.events import CellFinished  # noqa: E402
from rlmd.models.base import ModelSpec  # noqa: E402
from rlmd.models.registry import create_model  # noqa: E402
from rlmd.store import Store  # noqa: E402

rlms_core.get_client = rlm.clients.get_client  # bench.harness swaps in its instant client

SUBPROCESS_TARGET = 1.0
INPROCESS_TARGET = 0.7
KEY_ENV = "RLMD_BENCH_SERVER_KEY"


class Server:
    """``bench/script_server.py`` in its own process."""

    def __init__(self, scripts: dict[str, list[str]], folder: Path) -> None:
        config = folder / "scripts.json"
        config.write_text(json.dumps({"scripts": scripts, "sub_reply": SUB_REPLY}))
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "script_server.py"), str(config)],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/v1"

    def stats(self) -> dict[str, int]:
        """Requests since the last call: ``{"root": n, "sub": n}``."""
        with urllib.request.urlopen(self.url + "/stats", timeout=30) as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def rlmd_run(url: str, sandbox: str, db: Path, n_iter: int) -> tuple[Any, float]:
    """One ``run_task`` over the server with the store (opened and closed inside, as ``rlmd
    run`` does): ``(result, seconds to the answer)``."""
    t0 = time.perf_counter()
    done = {"at": t0}

    def tracker(event: Any) -> None:
        if isinstance(event, CellFinished):
            done["at"] = time.perf_counter()

    models = {
        name: create_model(
            ModelSpec(name=name, provider="openai", model=model, base_url=url, api_key_env=KEY_ENV)
        )
        for name, model in (("root", "root-rlmd"), ("sub", "sub"))
    }
    store = Store(db)
    try:
        result = await run_task(
            QUESTION,
            SMALL_CONTEXT,
            engine_config(n_iter, sandbox),
            get_model=models.__getitem__,
            sinks=(store.record_batched, tracker),
        )
        assert not store.errors, store.errors
    finally:
        store.close()
        for model in models.values():
            await model.aclose()
    return result, done["at"] - t0


def rlms_run(url: str, n_iter: int) -> Any:
    rlm = RLM(
        backend="openai",
        backend_kwargs={"model_name": "root-rlms", "base_url": url, "api_key": "bench"},
        environment="local",
        max_iterations=n_iter,
    )
    return rlm.completion(SMALL_CONTEXT, root_prompt=QUESTION)


async def main_async(args: argparse.Namespace) -> int:
    os.environ[KEY_ENV] = "bench"
    load0 = os.getloadavg()[0]
    calls = [3] * 10 + [2] * 10
    rlmd_script, n_sub = make_script(calls, "rlmd")
    rlms_script, _ = make_script(calls, "rlms")
    n_iter = len(calls)
    expected = f"answer-{len(SMALL_CONTEXT)}"
    tmp = Path(tempfile.mkdtemp(prefix="rlmd-wrs-"))
    db = tmp / "runs.db"
    server = Server({"root-rlmd": rlmd_script, "root-rlms": rlms_script}, tmp)

    def served() -> None:
        seen = server.stats()
        assert seen == {"root": n_iter, "sub": n_sub}, seen

    def rlmd_impl(name: str, sandbox: str) -> Impl:
        def check(out: tuple[Any, float]) -> float:
            result, to_answer = out
            assert result.status == "completed" and result.answer == expected, result
            check_store_run(db, result.run_id, n_iter, n_sub, expected)
            served()
            return to_answer

        return Impl(name, lambda: rlmd_run(server.url, sandbox, db, n_iter), True, check)

    def rlms_check(result: Any) -> float:
        assert result.response == expected, result.response
        served()
        return float(result.execution_time)

    impls = [
        rlmd_impl("rlmd subprocess + store", "subprocess"),
        rlmd_impl("rlmd inprocess + store", "inprocess"),
        Impl("rlms local", lambda: rlms_run(server.url, n_iter), False, rlms_check),
    ]
    try:
        server.stats()  # reset
        await measure(impls, args.reps, args.warmup, rounds=args.reps)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the store and the server's script
    load1 = os.getloadavg()[0]
    answer = {i.name: summarize(i.to_answer) for i in impls}
    wall = {i.name: summarize(i.samples) for i in impls}
    peer = answer["rlms local"]["median"]
    print(
        f"== whole run over one OpenAI-compatible server: {n_iter} root turns, {n_sub} "
        f"sub-calls; {args.reps} runs each; load average {load0:.2f} -> {load1:.2f} on "
        f"{os.cpu_count()} cores"
    )
    print(f"{'implementation':<26} {'to answer':>10} {'min':>9} {'/ rlms':>7} {'wall':>10}")
    for impl in impls:
        a, w = answer[impl.name], wall[impl.name]
        print(
            f"{impl.name:<26} {a['median'] * 1e3:8.1f} ms {a['min'] * 1e3:6.1f} ms "
            f"{a['median'] / peer:6.2f}x {w['median'] * 1e3:7.1f} ms"
        )
    missed = []
    for name, target in (
        ("rlmd subprocess + store", SUBPROCESS_TARGET),
        ("rlmd inprocess + store", INPROCESS_TARGET),
    ):
        ratio = answer[name]["median"] / peer
        met = ratio <= target
        print(
            f"target {name} <= {target:g}x rlms local: {ratio:.2f}x, {'met' if met else 'MISSED'}"
        )
        if not met:
            missed.append(name)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    report = {"to_answer": answer, "wall": wall, "load": [load0, load1], "reps": args.reps}
    (out / "whole_run_server.json").write_text(json.dumps(report, indent=1))
    if missed:
        print(f"MISSED TARGETS: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=12, help="timed runs of each")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs of each first")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

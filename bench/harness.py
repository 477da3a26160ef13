"""rlmd benchmarks: rlmd and a peer measured in the same run, on the same machine.

    .venv/bin/python bench/harness.py [--quick] [--only 1,3]

Four benchmarks (bench/README.md says what each number means):

1. cell round trip: one trivial cell in rlmd's sandboxes vs the reference's in-process
   ``LocalREPL`` vs a raw pipe floor (a child process echoing length-prefixed JSON);
2. llm_query round trip: a cell calling ``llm_query('hi')`` answered by an instant model;
3. whole run: 20 iterations with 50 sub-calls from the same script of responses, rlmd's
   ``run_task`` (subprocess sandbox, SQLite store) vs ``rlm.RLM(...).completion()``; and
   the loop's overhead per iteration: rlmd's in-process run with its store, time to answer
   / 20 (target 2 ms);
4. trajectory size: store bytes per iteration over a 10 MB context vs the reference's JSONL.

Latencies are ``time.perf_counter`` samples after warm-ups; implementations are measured in
interleaved rounds (order reversed every round) so drift on a busy machine hits all alike.
Results also go to ``bench/out/harness.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rlm.core.rlm as rlms_core
from rlm import RLM
from rlm.clients.base_lm import BaseLM
from rlm.core.lm_handler import LMHandler
from rlm.core.types import ModelUsageSummary, UsageSummary
from rlm.environments.local_repl import LocalREPL
from rlm.logger import RLMLogger

from rlmd.context import load_context
from rlmd.engine import Budget, RunConfig, run_task
from rlmd.engine.budget import Ledger
from rlmd.engine.events import CellFinished, EventBus
from rlmd.engine.executor import StarterExecutor
from rlmd.engine.loop import RLMRun, Runtime, prepare_sandbox
from rlmd.models.base import ModelSpec
from rlmd.models.scripted import ScriptedModel
from rlmd.sandbox import CallError, Sandbox, create_sandbox
from rlmd.sandbox.process.launch import SPARES
from rlmd.store import Store

HERE = Path(__file__).resolve().parent
OUT_FILE = HERE / "out" / "harness.json"

CELL = "x = sum(range(100)); print(x)"
CELL_STDOUT = "4950\n"
LLM_CELL = "print(llm_query('hi'))"
SUB_REPLY = "ok"
SMALL_CONTEXT = "The quick brown fox jumps over the lazy dog. " * 200  # 9 KB
QUESTION = "How long is the context, in characters?"

PROFILES: dict[str, dict[str, Any]] = {
    "default": {
        "cell_n": 3000,
        "cell_warmup": 200,
        "llm_n": 1500,
        "llm_warmup": 100,
        "run_reps": 15,
        "run_warmup": 2,
        "traj_chars": 10_000_000,
        "traj_iters": (10, 20, 30),
    },
    "quick": {
        "cell_n": 400,
        "cell_warmup": 50,
        "llm_n": 200,
        "llm_warmup": 30,
        "run_reps": 3,
        "run_warmup": 1,
        "traj_chars": 2_000_000,
        "traj_iters": (10, 20, 30),
    },
}
ROUNDS = 5
LOOP_TARGET_S = 0.002
"""Issue 16: rlmd's cost per iteration with the scripted model (benchmark 3, in-process)."""


# --------------------------------------------------------------------------- statistics


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, p95 (nearest rank), min, max and mean of ``samples`` (seconds)."""
    s = sorted(samples)
    n = len(s)
    return {
        "n": n,
        "median": statistics.median(s),
        "p95": s[max(0, math.ceil(0.95 * n) - 1)],
        "min": s[0],
        "max": s[-1],
        "mean": statistics.fmean(s),
    }


@dataclass
class Impl:
    """One implementation under test: ``step()`` is one timed repetition."""

    name: str
    step: Callable[[], Any]
    is_async: bool
    # verifies a step's result outside the timing; may return a whole run's time to answer
    check: Callable[[Any], float | None] | None = None
    samples: list[float] = field(default_factory=list)
    to_answer: list[float] = field(default_factory=list)  # whole runs: start to final answer


def _settle() -> None:
    """Outside the timing, after each repetition: wait for the spare kernel a subprocess run
    started in the background (its start-up, ~30-60 ms of CPU, would otherwise land in
    whichever run comes next on 2 cores)."""
    SPARES.settle(30.0)


async def _timed(impl: Impl, n: int, record: bool) -> None:
    perf = time.perf_counter
    out = impl.samples
    step = impl.step
    check = impl.check
    if impl.is_async:
        for _ in range(n):
            t0 = perf()
            res = await step()
            dt = perf() - t0
            _settle()
            extra = check(res) if check is not None else None
            if record:
                out.append(dt)
                if extra is not None:
                    impl.to_answer.append(extra)
    else:
        for _ in range(n):
            t0 = perf()
            res = step()
            dt = perf() - t0
            _settle()
            extra = check(res) if check is not None else None
            if record:
                out.append(dt)
                if extra is not None:
                    impl.to_answer.append(extra)


async def measure(impls: list[Impl], n: int, warmup: int, rounds: int = ROUNDS) -> None:
    """Warm every implementation up, then take ``n`` samples of each in interleaved rounds."""
    for impl in impls:
        await _timed(impl, warmup, record=False)
    rounds = max(1, min(rounds, n))
    per_round = [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]
    for r, count in enumerate(per_round):
        order = impls if r % 2 == 0 else list(reversed(impls))
        for impl in order:
            gc.collect()
            await _timed(impl, count, record=True)


# --------------------------------------------------------------------------- the pipe floor

FLOOR_CHILD = r"""
import json, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    msg = json.loads(inp.read(int.from_bytes(head, "big")))
    body = json.dumps({"op": "done", "id": msg["id"], "ok": True, "result": msg}).encode()
    out.write(len(body).to_bytes(4, "big") + body)
    out.flush()
"""


def _frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return len(body).to_bytes(4, "big") + body


class PipeFloor:
    """The raw floor: a persistent child echoing 4-byte-length-prefixed JSON over pipes,
    driven with blocking reads and writes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", FLOOR_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._w = self.proc.stdin.fileno()
        self._r = self.proc.stdout.fileno()
        self._id = 0

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = os.read(self._r, n - len(buf))
            if not chunk:
                raise EOFError("the floor child closed its pipe")
            buf += chunk
        return buf

    def call(self, code: str) -> dict[str, Any]:
        self._id += 1
        os.write(self._w, _frame({"op": "exec", "id": self._id, "code": code}))
        reply = json.loads(self._read(int.from_bytes(self._read(4), "big")))
        assert reply["id"] == self._id
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(5)


class AsyncPipeFloor:
    """The same child driven from asyncio streams (rlmd's host is asyncio): the floor
    including one event-loop wake-up per reply."""

    proc: asyncio.subprocess.Process

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            FLOOR_CHILD,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._id = 0

    async def call(self, code: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._id += 1
        self.proc.stdin.write(_frame({"op": "exec", "id": self._id, "code": code}))
        head = await self.proc.stdout.readexactly(4)
        reply = json.loads(await self.proc.stdout.readexactly(int.from_bytes(head, "big")))
        assert reply["id"] == self._id
        return reply

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.wait()


# --------------------------------------------------------------------------- models


class ScriptLM(BaseLM):
    """An instant in-process client for the reference ``rlms``.

    Root turns (the prompt is a message list) replay ``script`` in order and fail once it is
    used up; sub-calls (a ``str`` prompt from ``llm_query``) get ``sub_reply``. Calls are
    counted. ``on_root(i)`` runs before root turn ``i`` (0-based).
    """

    def __init__(
        self,
        script: list[str] | None = None,
        sub_reply: str = SUB_REPLY,
        on_root: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(model_name="bench-script")
        self.script = list(script or [])
        self.sub_reply = sub_reply
        self.on_root = on_root
        self.root_calls = 0
        self.sub_calls = 0

    def completion(self, prompt: str | dict[str, Any]) -> str:
        if isinstance(prompt, str):
            self.sub_calls += 1
            return self.sub_reply
        if self.on_root is not None:
            self.on_root(self.root_calls)
        self.root_calls += 1
        if self.root_calls > len(self.script):
            raise RuntimeError(f"script exhausted after {len(self.script)} root turns")
        return self.script[self.root_calls - 1]

    async def acompletion(self, prompt: str | dict[str, Any]) -> str:
        return self.completion(prompt)

    def get_usage_summary(self) -> UsageSummary:
        return UsageSummary(model_usage_summaries={self.model_name: self.get_last_usage()})

    def get_last_usage(self) -> ModelUsageSummary:
        return ModelUsageSummary(
            total_calls=self.root_calls + self.sub_calls,
            total_input_tokens=0,
            total_output_tokens=0,
        )


_rlms_client: ScriptLM | None = None


def _patched_get_client(backend: str, backend_kwargs: dict[str, Any]) -> BaseLM:
    assert _rlms_client is not None, "set _rlms_client before RLM.completion()"
    return _rlms_client


rlms_core.get_client = _patched_get_client  # every RLM in this process uses the script


class RlmdScript:
    """Instant scripted-callable models for rlmd: ``root`` replays ``script``, ``sub``
    answers ``sub_reply``; both count their calls."""

    def __init__(self, script: list[str] | None = None, sub_reply: str = SUB_REPLY) -> None:
        self.script = list(script or [])
        self.sub_reply = sub_reply
        self.root_calls = 0
        self.sub_calls = 0
        self.models = {
            "root": _scripted("root", self._root),
            "sub": _scripted("sub", self._sub),
        }

    def _root(self, messages: list[dict[str, str]]) -> str:
        self.root_calls += 1
        if self.root_calls > len(self.script):
            raise RuntimeError(f"script exhausted after {len(self.script)} root turns")
        return self.script[self.root_calls - 1]

    def _sub(self, messages: list[dict[str, str]]) -> str:
        self.sub_calls += 1
        return self.sub_reply

    def get_model(self, name: str) -> ScriptedModel:
        return self.models[name]


def _scripted(name: str, fn: Callable[[list[dict[str, str]]], str]) -> ScriptedModel:
    return ScriptedModel(
        ModelSpec(name=name, provider="scripted", model=name, options={"callable": fn})
    )


# --------------------------------------------------------------------------- scripts


def make_script(calls_per_iteration: list[int], final: str) -> tuple[list[str], int]:
    """Root responses, one ```repl block each: read a slice of ``context``, make the given
    number of ``llm_query`` calls, print. The last block also ends the run: ``final="rlmd"``
    with ``FINAL(...)``, ``final="rlms"`` with the reference's ``answer`` dict.

    Returns the responses and the total number of sub-calls they make.
    """
    responses = []
    last = len(calls_per_iteration) - 1
    for i, k in enumerate(calls_per_iteration):
        lines = [f"part = context[{i * 100}:{i * 100 + 100}]"]
        lines += [f'a{j} = llm_query("Question {i}.{j} about: " + part)' for j in range(k)]
        lines.append(f'print("iteration {i}", len(part), {", ".join(f"a{j}" for j in range(k))})')
        if i == last:
            value = '"answer-" + str(len(context))'
            if final == "rlmd":
                lines.append(f"FINAL({value})")
            else:
                lines += [f'answer["content"] = {value}', 'answer["ready"] = True']
        body = "\n".join(lines)
        responses.append(f"Step {i + 1}: looking at the next part.\n```repl\n{body}\n```")
    return responses, sum(calls_per_iteration)


def make_context(chars: int) -> str:
    """A deterministic text of exactly ``chars`` characters (numbered log-like lines)."""
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    lines, size, i = [], 0, 0
    while size < chars:
        line = f"{i:08d} {words[i % 8]} {words[(i * 7) % 8]} value={(i * 2654435761) % 100003}\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)[:chars]


# --------------------------------------------------------------------------- rlmd / rlms runs


def engine_config(max_iterations: int, sandbox: str) -> RunConfig:
    return RunConfig(
        root_model="root",
        sub_model="sub",
        sandbox=sandbox,
        budget=Budget(max_iterations=max_iterations),
    )


@dataclass
class RlmdRun:
    """What one rlmd whole run gave: the result, the models' call counts, the store's
    recording errors, the number of events emitted and the seconds from the start of the
    call to the end of the last cell (the answer is known there; sandbox close follows)."""

    result: Any
    models: RlmdScript
    store_errors: list[str]
    events: int
    to_answer_s: float


async def rlmd_whole_run(
    script: list[str],
    context: str,
    *,
    sandbox: str,
    store_path: Path | None,
    warm: Sandbox | None = None,
) -> RlmdRun:
    """One ``run_task`` (store opened and closed inside, as ``rlmd run`` does); ``warm``: a
    sandbox kept across runs (a workspace's persistent REPL) instead of a fresh one."""
    t0 = time.perf_counter()
    models = RlmdScript(script)
    seen = {"events": 0, "last_cell": t0}

    def tracker(event: Any) -> None:
        seen["events"] += 1
        if isinstance(event, CellFinished):
            seen["last_cell"] = time.perf_counter()

    store = Store(store_path) if store_path is not None else None
    sinks = (store.record_batched, tracker) if store is not None else (tracker,)
    if warm is not None:  # the owner of a kept REPL binds each run's context
        await prepare_sandbox(warm, load_context(context))
    try:
        result = await run_task(
            QUESTION,
            context,
            engine_config(len(script), sandbox),
            get_model=models.get_model,
            sinks=sinks,
            sandbox=warm,
        )
    finally:
        errors = list(store.errors) if store is not None else []
        if store is not None:
            store.close()
    return RlmdRun(result, models, errors, seen["events"], seen["last_cell"] - t0)


def rlms_whole_run(script: list[str], context: str, *, log_dir: str | None = None, on_root=None):
    """One ``RLM(...).completion()`` with the script client and environment "local"."""
    global _rlms_client
    client = ScriptLM(script, on_root=on_root)
    _rlms_client = client
    logger = RLMLogger(log_dir=log_dir) if log_dir is not None else None
    rlm = RLM(
        backend="openai",
        backend_kwargs={"model_name": "bench-script"},
        environment="local",
        max_iterations=len(script),
        logger=logger,
    )
    result = rlm.completion(context, root_prompt=QUESTION)
    return result, client, logger


def store_bytes(path: Path) -> int:
    """Bytes of a SQLite database with its WAL and shared-memory files, if present."""
    return sum(
        os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )


def payload_bytes(path: Path) -> int | None:
    """Bytes of row payload in every table and index (SQLite's ``dbstat``), or ``None`` when
    this SQLite lacks ``dbstat``: the store's logical size, without page-allocation steps."""
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT SUM(payload) FROM dbstat").fetchone()[0])
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


def check_store_run(path: Path, run_id: str, iterations: int, subcalls: int, answer: str) -> None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT status, iterations, subcalls, answer FROM runs WHERE id = ?", [run_id]
        ).fetchone()
        cells = conn.execute(
            "SELECT COUNT(*) FROM nodes WHERE run_id = ? AND kind = 'cell'", [run_id]
        ).fetchone()[0]
    finally:
        conn.close()
    assert row == ("completed", iterations, subcalls, answer), f"store recorded {row}"
    assert cells == iterations, f"store recorded {cells} cells"


# --------------------------------------------------------------------------- benchmark 1


async def _no_calls(fn: str, args: dict[str, Any]) -> Any:
    raise CallError("this benchmark makes no host calls")


async def _no_child_runs(request: Any) -> Any:
    raise CallError("this benchmark starts no child runs")


async def _started(kind: str, handler, context: str) -> tuple[Sandbox, float]:
    sandbox = create_sandbox(kind)
    t0 = time.perf_counter()
    await sandbox.start(handler)
    await sandbox.load_context(context)
    return sandbox, time.perf_counter() - t0


async def bench_cell(p: dict[str, Any]) -> dict[str, Any]:
    floor = PipeFloor()
    afloor = AsyncPipeFloor()
    await afloor.start()
    repl = LocalREPL(context_payload=SMALL_CONTEXT)
    sub, sub_start = await _started("subprocess", _no_calls, SMALL_CONTEXT)
    inp, inp_start = await _started("inprocess", _no_calls, SMALL_CONTEXT)
    try:
        for sb in (sub, inp):
            res = await sb.execute(CELL)
            assert res.stdout == CELL_STDOUT and res.error is None, res
        res = repl.execute_code(CELL)
        assert res.stdout == CELL_STDOUT and not res.stderr, res
        assert floor.call(CELL)["result"]["code"] == CELL
        assert (await afloor.call(CELL))["result"]["code"] == CELL

        impls = [
            Impl("rlmd subprocess", lambda: sub.execute(CELL), True),
            Impl("rlmd inprocess", lambda: inp.execute(CELL), True),
            Impl("rlms LocalREPL", lambda: repl.execute_code(CELL), False),
            Impl("pipe floor (blocking)", lambda: floor.call(CELL), False),
            Impl("pipe floor (asyncio)", lambda: afloor.call(CELL), True),
        ]
        await measure(impls, p["cell_n"], p["cell_warmup"])
        # still correct after thousands of cells
        assert (await sub.execute(CELL)).stdout == CELL_STDOUT
    finally:
        await sub.close()
        await inp.close()
        repl.cleanup()
        floor.close()
        await afloor.close()
    return {
        "cell": CELL,
        "impls": {i.name: summarize(i.samples) for i in impls},
        "startup_s": {"rlmd subprocess": sub_start, "rlmd inprocess": inp_start},
    }


# --------------------------------------------------------------------------- benchmark 2


async def bench_llm_query(p: dict[str, Any]) -> dict[str, Any]:
    # rlmd: the engine's host path (RLMRun.host: budget check, events, usage,
    # window check, the scripted model) behind each sandbox, and a bare handler that only
    # calls the model, to separate the engine's share from the transport's.
    models = RlmdScript()
    runs = []
    for _ in range(2):
        config = engine_config(10, "subprocess")
        rt = Runtime(
            config,
            models.get_model,
            lambda: create_sandbox("subprocess"),
            EventBus(),
            Ledger(config.budget),
            StarterExecutor(_no_child_runs),
        )
        runs.append(RLMRun(rt, QUESTION, load_context(SMALL_CONTEXT)))
    sub_model = models.models["sub"]
    bare_calls = 0

    async def bare(fn: str, args: dict[str, Any]) -> Any:
        nonlocal bare_calls
        bare_calls += 1
        c = await sub_model.complete([{"role": "user", "content": args["prompt"]}])
        return c.text

    sub, _ = await _started("subprocess", runs[0].host, SMALL_CONTEXT)
    inp, _ = await _started("inprocess", runs[1].host, SMALL_CONTEXT)
    sub_bare, _ = await _started("subprocess", bare, SMALL_CONTEXT)

    global _rlms_client
    client = ScriptLM()
    _rlms_client = client
    handler = LMHandler(client)
    handler.start()
    repl = LocalREPL(lm_handler_address=handler.address, context_payload=SMALL_CONTEXT)
    try:
        for sb in (sub, inp, sub_bare):
            res = await sb.execute(LLM_CELL)
            assert res.stdout == SUB_REPLY + "\n" and res.error is None, res
        res = repl.execute_code(LLM_CELL)
        assert res.stdout == SUB_REPLY + "\n" and not res.stderr, res
        impls = [
            Impl("rlmd subprocess (engine)", lambda: sub.execute(LLM_CELL), True),
            Impl("rlmd inprocess (engine)", lambda: inp.execute(LLM_CELL), True),
            Impl("rlmd subprocess (bare handler)", lambda: sub_bare.execute(LLM_CELL), True),
            Impl("rlms LocalREPL + LMHandler", lambda: repl.execute_code(LLM_CELL), False),
        ]
        await measure(impls, p["llm_n"], p["llm_warmup"])
        done = 1 + p["llm_n"] + p["llm_warmup"]
        # every timed cell really made its sub-call
        # the two engine sandboxes and the bare handler all ask the same "sub" model
        assert models.sub_calls == 3 * done, models.sub_calls
        assert bare_calls == done and client.sub_calls == done, (bare_calls, client.sub_calls)
        assert runs[0].rt.ledger.subcalls == done
    finally:
        await sub.close()
        await inp.close()
        await sub_bare.close()
        repl.cleanup()
        handler.stop()
    return {"cell": LLM_CELL, "impls": {i.name: summarize(i.samples) for i in impls}}


# --------------------------------------------------------------------------- benchmark 3


async def bench_whole_run(p: dict[str, Any], tmp: Path) -> dict[str, Any]:
    calls = [3] * 10 + [2] * 10
    rlmd_script, n_sub = make_script(calls, "rlmd")
    rlms_script, _ = make_script(calls, "rlms")
    n_iter = len(calls)
    assert (n_iter, n_sub) == (20, 50)
    expected = f"answer-{len(SMALL_CONTEXT)}"
    db = tmp / "whole-run.db"
    log_dir = tmp / "whole-run-logs"

    def rlmd_impl(name: str, sandbox: str, store: bool, warm: Sandbox | None = None) -> Impl:
        def step() -> Awaitable[RlmdRun]:
            path = db if store else None
            return rlmd_whole_run(
                rlmd_script, SMALL_CONTEXT, sandbox=sandbox, store_path=path, warm=warm
            )

        def check(run: RlmdRun) -> float:
            result = run.result
            assert result.status == "completed" and result.answer == expected, result
            assert result.iterations == n_iter, result.iterations
            assert (run.models.root_calls, run.models.sub_calls) == (n_iter, n_sub)
            assert not run.store_errors, run.store_errors
            if store:
                check_store_run(db, result.run_id, n_iter, n_sub, expected)
            events.add(run.events)
            return run.to_answer_s

        return Impl(name, step, True, check)

    def rlms_impl(name: str, log: bool) -> Impl:
        def step() -> Any:
            return rlms_whole_run(rlms_script, SMALL_CONTEXT, log_dir=str(log_dir) if log else None)

        def check(res: Any) -> float:
            result, client, logger = res
            assert result.response == expected, result.response
            assert (client.root_calls, client.sub_calls) == (n_iter, n_sub)
            if logger is not None:
                assert logger.iteration_count == n_iter
            # rlms measures completion() from its start to the final answer, before the
            # teardown (LMHandler.stop() waits for socketserver's 0.5 s poll to notice)
            return result.execution_time

        return Impl(name, step, False, check)

    events: set[int] = set()
    # A sandbox reused by every run (started by the first warm-up): the loop's own cost,
    # without the kernel spawn. Attribution only; rlms gets a fresh LocalREPL per completion.
    warm = create_sandbox("subprocess")
    impls = [
        rlmd_impl("rlmd subprocess + store", "subprocess", True),
        rlmd_impl("rlmd subprocess, no store", "subprocess", False),
        rlmd_impl("rlmd subprocess, no store, warm sandbox", "subprocess", False, warm),
        rlmd_impl("rlmd inprocess + store", "inprocess", True),
        rlms_impl("rlms local", False),
        rlms_impl("rlms local + JSONL logger", True),
    ]
    try:
        await measure(impls, p["run_reps"], p["run_warmup"], rounds=p["run_reps"])
    finally:
        await warm.close()
    assert len(events) == 1, events  # every rlmd run emitted the same events
    return {
        "iterations": n_iter,
        "subcalls": n_sub,
        "context_chars": len(SMALL_CONTEXT),
        "rlmd_events_per_run": events.pop(),
        "impls": {i.name: summarize(i.samples) for i in impls},
        "to_answer": {i.name: summarize(i.to_answer) for i in impls},
    }


# --------------------------------------------------------------------------- benchmark 4


async def bench_trajectory(p: dict[str, Any], tmp: Path) -> dict[str, Any]:
    context = make_context(p["traj_chars"])
    marks = tuple(p["traj_iters"])
    top = max(marks)
    expected = f"answer-{len(context)}"

    empty = tmp / "empty.db"
    Store(empty).close()
    rlmd_sizes: dict[int, int] = {}
    rlmd_payload: dict[int, int | None] = {}
    rlmd_seconds: dict[int, float] = {}
    for n in marks:
        script, n_sub = make_script([2] * n, "rlmd")
        path = tmp / f"traj-{n}.db"
        t0 = time.perf_counter()
        run = await rlmd_whole_run(script, context, sandbox="subprocess", store_path=path)
        rlmd_seconds[n] = time.perf_counter() - t0
        result = run.result
        assert result.status == "completed" and result.answer == expected, result
        assert (run.models.root_calls, run.models.sub_calls) == (n, n_sub)
        assert not run.store_errors, run.store_errors
        check_store_run(path, result.run_id, n, n_sub, expected)
        rlmd_sizes[n] = store_bytes(path)
        rlmd_payload[n] = payload_bytes(path)
        path.unlink()

    # rlms appends one JSONL line per iteration: sizes after 10 and 20 iterations are read
    # during the 30-iteration run (before root turn 11 and 21), the last after it.
    log_dir = tmp / "traj-logs"
    script, n_sub = make_script([2] * top, "rlms")
    rlms_sizes: dict[int, int] = {}
    holder: dict[str, RLMLogger] = {}

    def on_root(i: int) -> None:
        if i in marks:
            rlms_sizes[i] = os.path.getsize(holder["logger"].log_file_path)

    global _rlms_client
    client = ScriptLM(script, on_root=on_root)
    _rlms_client = client
    logger = RLMLogger(log_dir=str(log_dir))
    holder["logger"] = logger
    t0 = time.perf_counter()
    rlm = RLM(
        backend="openai",
        backend_kwargs={"model_name": "bench-script"},
        environment="local",
        max_iterations=top,
        logger=logger,
    )
    result = rlm.completion(context, root_prompt=QUESTION)
    rlms_seconds = time.perf_counter() - t0
    assert result.response == expected and (client.root_calls, client.sub_calls) == (top, n_sub)
    rlms_sizes[top] = os.path.getsize(logger.log_file_path)
    shutil.rmtree(log_dir)

    rlmd = growth(rlmd_sizes, marks, LINEAR_FILE_SPREAD)
    rlms = growth(rlms_sizes, marks, LINEAR_FILE_SPREAD)
    if None not in rlmd_payload.values():
        rlmd["payload"] = growth(rlmd_payload, marks, LINEAR_PAYLOAD_SPREAD)  # type: ignore[arg-type]
        rlmd["linear"] = rlmd["payload"]["linear"]
    return {
        "context_chars": len(context),
        "subcalls_per_iteration": 2,
        "rlmd_empty_store_bytes": store_bytes(empty),
        "rlmd": rlmd,
        "rlms": rlms,
        "rlmd_run_seconds": rlmd_seconds,  # by number of iterations
        "rlms_run_seconds": rlms_seconds,
    }


LINEAR_PAYLOAD_SPREAD = 1.10
"""Largest allowed ratio between the growth of two equal spans of iterations (10→20 vs
20→30) for the row payload to count as linear (it grows by whole rows, so it is smooth)."""
LINEAR_FILE_SPREAD = 2.0
"""The same for file bytes, which grow in 4 KiB pages and b-tree/FTS segment splits."""


def growth(sizes: dict[int, int], marks: tuple[int, ...], tolerance: float) -> dict[str, Any]:
    """Bytes at each mark, per iteration (total / last mark), marginal per iteration (first
    to last mark) and whether equal spans grew by about the same amount."""
    top = marks[-1]
    steps = [sizes[b] - sizes[a] for a, b in zip(marks, marks[1:], strict=False)]
    spread = max(steps) / min(steps) if min(steps) > 0 else math.inf
    return {
        "bytes": {str(k): sizes[k] for k in marks},
        "bytes_per_iteration": sizes[top] / top,
        "marginal_bytes_per_iteration": (sizes[top] - sizes[marks[0]]) / (top - marks[0]),
        "step_bytes": steps,
        "step_spread": spread,
        "linear": spread <= tolerance,
    }


# --------------------------------------------------------------------------- output


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.3f} s"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(out)


def latency_table(title: str, res: dict[str, Any], peer: str) -> str:
    base = res["impls"][peer]["median"]
    to_answer = res.get("to_answer")
    rows = []
    for name, s in res["impls"].items():
        row = [name, ms(s["median"]), ms(s["p95"]), ms(s["min"]), str(s["n"])]
        row.append(f"{s['median'] / base:.2f}")
        if to_answer:
            a = to_answer[name]
            row += [ms(a["median"]), f"{a['median'] / to_answer[peer]['median']:.2f}"]
        rows.append(row)
    head = ["implementation", "median", "p95", "min", "n", f"/ {peer}"]
    if to_answer:
        head += ["to answer (median)", f"/ {peer}"]
    return f"\n== {title}\n" + table(head, rows)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "inf"


def row(benchmark: str, rlmd: str, peer: str, r: str, target: str = "-", met: bool | None = None):
    return {
        "benchmark": benchmark,
        "rlmd": rlmd,
        "peer": peer,
        "ratio": r,
        "target": target,
        "met": met,
    }


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    if "cell" in results:
        r = results["cell"]["impls"]
        a, b = r["rlmd subprocess"]["median"], r["rlms LocalREPL"]["median"]
        f = r["pipe floor (blocking)"]["median"]
        rows.append(
            row(
                "1 cell round trip",
                ms(a),
                f"rlms LocalREPL {ms(b)}",
                ratio(a, b),
                "rlmd subprocess < 1 ms",
                a < 1e-3,
            )
        )
        rows.append(
            row("1 cell round trip vs raw pipe floor", ms(a), f"pipe floor {ms(f)}", ratio(a, f))
        )
    if "llm_query" in results:
        r = results["llm_query"]["impls"]
        a, b = r["rlmd subprocess (engine)"]["median"], r["rlms LocalREPL + LMHandler"]["median"]
        rows.append(
            row("2 llm_query round trip", ms(a), f"rlms LocalREPL+LMHandler {ms(b)}", ratio(a, b))
        )
    if "whole_run" in results:
        w = results["whole_run"]
        r, t = w["impls"], w["to_answer"]
        a, b = r["rlmd subprocess + store"]["median"], r["rlms local"]["median"]
        rows.append(
            row(
                "3 whole run, wall clock (subprocess + store)",
                ms(a),
                f"rlms local {ms(b)}",
                ratio(a, b),
                "rlmd <= rlms",
                a <= b,
            )
        )
        # Issue 16's ratio targets are for a run over one OpenAI-compatible server
        # (bench/whole_run_server.py); with instant in-process models the ratios below are
        # rlmd's fixed costs (store, kernel start) against rlms' none: shown, not targets.
        a, b = t["rlmd subprocess + store"]["median"], t["rlms local"]["median"]
        rows.append(
            row(
                "3 whole run, to answer (subprocess + store)",
                ms(a),
                f"rlms local {ms(b)}",
                ratio(a, b),
            )
        )
        a = t["rlmd subprocess, no store"]["median"]
        rows.append(
            row(
                "3 whole run, to answer (subprocess, no store)",
                ms(a),
                f"rlms local {ms(b)}",
                ratio(a, b),
            )
        )
        a = t["rlmd inprocess + store"]["median"]
        rows.append(
            row(
                "3 whole run, to answer (inprocess + store)",
                ms(a),
                f"rlms local {ms(b)}",
                ratio(a, b),
            )
        )
        # Everything rlmd does per iteration with an instant model and no isolation: the
        # engine, events, the store, the in-process kernel and 2.5 sub-calls through the host
        # (the run's start-up included). The isolated sandbox's round trips are benchmark 1's.
        n = w["iterations"]
        a, b = t["rlmd inprocess + store"]["median"] / n, t["rlms local"]["median"] / n
        rows.append(
            row(
                "3 loop overhead per iteration (inprocess + store)",
                ms(a),
                f"rlms local {ms(b)}",
                ratio(a, b),
                f"rlmd <= {ms(LOOP_TARGET_S)}",
                a <= LOOP_TARGET_S,
            )
        )
    if "trajectory" in results:
        t = results["trajectory"]
        a, b = t["rlmd"]["bytes_per_iteration"], t["rlms"]["bytes_per_iteration"]
        rows.append(
            row(
                f"4 trajectory bytes/iteration ({t['context_chars'] / 1e6:g} MB context)",
                f"{a / 1e3:.1f} kB",
                f"rlms JSONL {b / 1e6:.2f} MB",
                f"{a / b:.4f}",
                "rlmd growth linear",
                t["rlmd"]["linear"],
            )
        )
    return rows


def trajectory_table(t: dict[str, Any]) -> str:
    series = [("rlmd store file", t["rlmd"]), ("rlms JSONL file", t["rlms"])]
    if "payload" in t["rlmd"]:
        series.insert(1, ("rlmd store row payload", t["rlmd"]["payload"]))
    rows = []
    for name, g in series:
        linear = "yes" if g["linear"] else "no"
        if name == "rlmd store file" and "payload" in g:
            linear = "(pages: see payload)"
        rows.append(
            [
                name,
                *[f"{v / 1e6:.3f} MB" for v in g["bytes"].values()],
                f"{g['bytes_per_iteration'] / 1e3:.1f} kB",
                f"{g['marginal_bytes_per_iteration'] / 1e3:.1f} kB",
                f"{g['step_spread']:.2f}",
                linear,
            ]
        )
    marks = list(t["rlmd"]["bytes"])
    head = [
        "bytes",
        *[f"after {m} it" for m in marks],
        "per it",
        "marginal/it",
        "step spread",
        "linear",
    ]
    top = marks[-1]
    return (
        f"\n== 4 trajectory size ({t['context_chars']:,}-char context, "
        f"{t['subcalls_per_iteration']} sub-calls/iteration; empty rlmd store "
        f"{t['rlmd_empty_store_bytes'] / 1e3:.1f} kB)\n"
        + table(head, rows)
        + f"\n   {top}-iteration run: rlmd {t['rlmd_run_seconds'][int(top)]:.2f} s, "
        f"rlms {t['rlms_run_seconds']:.2f} s"
    )


# --------------------------------------------------------------------------- main


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    p = PROFILES["quick" if args.quick else "default"]
    only = {s.strip() for s in args.only.split(",")} if args.only else {"1", "2", "3", "4"}
    results: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="rlmd-bench-"))
    t_start = time.perf_counter()
    try:
        if "1" in only:
            results["cell"] = await bench_cell(p)
            print(latency_table("1 cell round trip: " + CELL, results["cell"], "rlms LocalREPL"))
            st = results["cell"]["startup_s"]
            print(
                "   sandbox start + load_context: "
                + ", ".join(f"{k} {ms(v)}" for k, v in st.items())
            )
        if "2" in only:
            results["llm_query"] = await bench_llm_query(p)
            print(
                latency_table(
                    "2 llm_query round trip: " + LLM_CELL,
                    results["llm_query"],
                    "rlms LocalREPL + LMHandler",
                )
            )
        if "3" in only:
            results["whole_run"] = await bench_whole_run(p, tmp)
            w = results["whole_run"]
            print(
                latency_table(
                    "3 whole run: 20 iterations, 50 sub-calls, instant models", w, "rlms local"
                )
            )
            rec = (
                w["to_answer"]["rlmd subprocess + store"]["median"]
                - w["to_answer"]["rlmd subprocess, no store"]["median"]
            )
            print(
                f"   rlmd emits {w['rlmd_events_per_run']} events per run; recording them "
                f"costs {ms(rec)} (~{ms(rec / w['rlmd_events_per_run'])} per event)"
            )
        if "4" in only:
            results["trajectory"] = await bench_trajectory(p, tmp)
            print(trajectory_table(results["trajectory"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summary_rows(results)
    print("\n== summary (ratio = rlmd / peer; latencies are medians)")
    print(
        table(
            ["benchmark", "rlmd", "peer", "ratio", "target", "met?"],
            [
                [
                    r["benchmark"],
                    r["rlmd"],
                    r["peer"],
                    r["ratio"],
                    r["target"],
                    "-" if r["met"] is None else ("yes" if r["met"] else "NO"),
                ]
                for r in summary
            ],
        )
    )
    elapsed = time.perf_counter() - t_start
    print(
        f"\n{'quick' if args.quick else 'default'} profile, {elapsed:.1f} s; results in {OUT_FILE}"
    )
    return {
        "profile": "quick" if args.quick else "default",
        "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()},
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "sqlite": sqlite3.sqlite_version,
        },
        "elapsed_s": elapsed,
        "results": results,
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, smaller context (< 30 s)"
    )
    parser.add_argument("--only", help="comma-separated benchmark numbers, e.g. 1,3")
    args = parser.parse_args(argv)
    report = asyncio.run(main_async(args))
    OUT_FILE.parent.mkdir(parents=True, exist_ok=True)
    OUT_FILE.write_text(json.dumps(report, indent=2) + "\n")
    missed = [r["benchmark"] for r in report["summary"] if r["met"] is False]
    if missed:  # a CI smoke run must see a regression, not a table with "NO" in it
        print(f"MISSED TARGETS: {'; '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

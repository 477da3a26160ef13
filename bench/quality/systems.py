"""The systems compared on each task, all driven through one OpenAI-compatible endpoint.

* ``plain``: one chat call with the context cut to the model's window (its head: the
  usual baseline), the question after it.
* ``rlmd-d1`` / ``rlmd-d2``: :func:`rlmd.runner.run_question` with the endpoint as an
  ``openai`` model (``base_url``), ``max_depth`` 1 or 2, the subprocess sandbox, recorded
  in rlmd's store (``rlmd show RUN_ID`` reads a trajectory). A codebase context is passed
  as its folder, so the codebase helpers (``grep``, ``list_files``...) are there.
* ``rlms``: the reference ``rlms==0.1.3`` with ``backend="openai"`` at the same endpoint,
  ``environment="local"``, its default ``max_depth=1``, run in a child process
  (:mod:`bench.quality.rlms_worker`); its JSONL trajectory is saved in the output folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.quality.tasks import Task, TaskSet, render_codebase
from bench.quality.tokenizer import Tokenizer


@dataclass
class Endpoint:
    """The OpenAI-compatible endpoint every system uses."""

    base_url: str
    model_name: str
    n_ctx: int
    api_key: str = "x"


@dataclass
class Limits:
    max_iterations: int = 6
    task_timeout_s: float = 300.0
    max_output_tokens: int = 1024
    plain_answer_tokens: int = 256


@dataclass
class TaskResult:
    task_id: str
    system: str
    family: str
    length_tokens: int
    score: float = 0.0
    score_detail: str = ""
    parsed: Any = None
    answer: str | None = None
    status: str = ""
    answer_source: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    subcalls: int = 0
    iterations: int = 0
    wall_s: float = 0.0
    trajectory: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["parsed"] is not None:
            d["parsed"] = json.loads(json.dumps(d["parsed"], default=str))
        return d


def finish(result: TaskResult, task: Task) -> TaskResult:
    s = task.score(result.answer)
    result.score, result.score_detail, result.parsed = s.value, s.detail, s.parsed
    return result


PLAIN_TIMEOUT_S = 1800.0
"""The plain baseline is one call: it is not cut by the per-task budget of the RLM loops."""


class PlainSystem:
    name = "plain"

    PROMPT = "Read the text below and answer the question after it.\n\n<text>\n{context}\n</text>\n\nQuestion: {question}"

    def __init__(self, endpoint: Endpoint, tokenizer: Tokenizer, limits: Limits) -> None:
        self.ep, self.tok, self.limits = endpoint, tokenizer, limits

    def prompt(self, task: Task, context: Any) -> tuple[str, bool]:
        """The one user message, and whether the context had to be cut."""
        text = render_codebase(context) if isinstance(context, dict) else context
        frame = self.PROMPT.format(context="", question=task.question)
        # 32 tokens for the chat template around one user message.
        budget = self.ep.n_ctx - self.limits.plain_answer_tokens - self.tok.count(frame) - 32
        head = self.tok.head(text, budget)
        return self.PROMPT.format(context=head, question=task.question), len(head) < len(text)

    def run(self, task: Task, tasks: TaskSet, out_dir: Path) -> TaskResult:
        import openai

        r = TaskResult(task.id, self.name, task.family, task.length_tokens)
        prompt, cut = self.prompt(task, tasks.context(task))
        r.extra["truncated"] = cut
        client = openai.OpenAI(
            base_url=self.ep.base_url,
            api_key=self.ep.api_key,
            timeout=PLAIN_TIMEOUT_S,
            max_retries=0,
        )
        start = time.perf_counter()
        try:
            resp = client.chat.completions.create(
                model=self.ep.model_name,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=self.limits.plain_answer_tokens,
                temperature=0,
            )
            r.answer = resp.choices[0].message.content
            r.status = "completed"
            r.answer_source = "reply"
            if resp.usage:
                r.input_tokens, r.output_tokens = (
                    resp.usage.prompt_tokens,
                    resp.usage.completion_tokens,
                )
            r.calls = 1
        except Exception as exc:
            r.status, r.error = "failed", f"{type(exc).__name__}: {exc}"[:1000]
        r.wall_s = time.perf_counter() - start
        return finish(r, task)


class RlmdSystem:
    def __init__(
        self,
        endpoint: Endpoint,
        limits: Limits,
        depth: int,
        system_prompt: str | None = None,
        label: str | None = None,
    ) -> None:
        self.ep, self.limits, self.depth = endpoint, limits, depth
        self.system_prompt = system_prompt
        self.name = label or f"rlmd-d{depth}"

    def _registry(self):
        from rlmd.models.base import ModelSpec
        from rlmd.models.registry import Registry

        registry = Registry()
        registry.add(
            ModelSpec(
                name="bench-model",
                provider="openai",
                model=self.ep.model_name,
                base_url=self.ep.base_url,
                context_window=self.ep.n_ctx,
                max_output_tokens=self.limits.max_output_tokens,
                sampling={"temperature": 0},
                timeout_s=self.limits.task_timeout_s,
                max_retries=1,
            )
        )
        return registry

    def run(self, task: Task, tasks: TaskSet, out_dir: Path) -> TaskResult:
        from rlmd.config import Settings, build_run_config
        from rlmd.runner import run_question

        r = TaskResult(task.id, self.name, task.family, task.length_tokens)
        registry = self._registry()
        options = {"system_prompt": self.system_prompt} if self.system_prompt else {}
        config = build_run_config(
            Settings(),
            model="bench-model",
            sandbox="subprocess",
            budget={
                "max_iterations": self.limits.max_iterations,
                "max_depth": self.depth,
                "max_seconds": self.limits.task_timeout_s,
            },
            **options,
        )
        context: Any = (
            tasks.context_path(task) if task.context_kind == "codebase" else tasks.context(task)
        )

        async def go():
            try:
                return await run_question(
                    task.question, context, config, registry=registry, record=True
                )
            finally:
                await registry.aclose()

        start = time.perf_counter()
        try:
            res = asyncio.run(go())
        except Exception as exc:
            r.status, r.error = "failed", f"{type(exc).__name__}: {exc}"[:1000]
            r.wall_s = time.perf_counter() - start
            return finish(r, task)
        r.wall_s = time.perf_counter() - start
        total = res.usage.get("total", {})
        r.answer, r.status, r.answer_source = res.answer, res.status, res.answer_source
        r.input_tokens, r.output_tokens = (
            total.get("input_tokens", 0),
            total.get("output_tokens", 0),
        )
        r.calls = total.get("calls", 0)
        r.subcalls = sum(
            t.get("calls", 0) for d, t in res.usage.get("by_depth", {}).items() if d != "0"
        )
        r.iterations = res.iterations
        r.trajectory = res.run_id
        r.error = res.error
        r.extra["export"] = _export_trajectory(res.run_id, out_dir)
        return finish(r, task)


def _export_trajectory(run_id: str, out_dir: Path) -> str | None:
    """Copy a recorded run out of rlmd's store into ``out_dir/rlmd/RUN.json`` (``rlmd
    export`` format), so the results folder alone shows every trajectory."""
    try:
        from rlmd import paths
        from rlmd.store import Store
        from rlmd.store.export import export_run

        store = Store(paths.store_path())
        try:
            text = export_run(store, run_id, "json", indent=1)
        finally:
            store.close()
    except Exception:  # the store is optional for scoring; the run id is still reported
        return None
    target = out_dir / "rlmd" / f"{run_id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return str(target.relative_to(out_dir))


class RlmsSystem:
    name = "rlms"

    def __init__(self, endpoint: Endpoint, limits: Limits, max_depth: int = 1) -> None:
        self.ep, self.limits, self.max_depth = endpoint, limits, max_depth

    def run(self, task: Task, tasks: TaskSet, out_dir: Path) -> TaskResult:
        r = TaskResult(task.id, self.name, task.family, task.length_tokens)
        work = out_dir / "rlms"
        work.mkdir(parents=True, exist_ok=True)
        spec = {
            "task_id": task.id,
            "model_name": self.ep.model_name,
            "base_url": self.ep.base_url,
            "context_path": str(tasks.context_path(task).resolve()),
            "context_kind": task.context_kind,
            "question": task.question,
            "max_iterations": self.limits.max_iterations,
            "max_depth": self.max_depth,
            "timeout_s": self.limits.task_timeout_s,
            "max_tokens": self.limits.max_output_tokens,
            "log_dir": str(work.resolve()),
        }
        spec_path, out_path = work / f"{task.id}.spec.json", work / f"{task.id}.result.json"
        spec_path.write_text(json.dumps(spec))
        out_path.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.quality.rlms_worker", str(spec_path), str(out_path)],
            cwd=str(Path(__file__).resolve().parents[2]),
            stdout=open(work / f"{task.id}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        # The reference checks its timeout between iterations only: give it one more turn.
        hard = self.limits.task_timeout_s + 90
        try:
            proc.wait(timeout=hard)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            r.status, r.error = "killed", f"no result after {hard:g} s; killed"
        r.wall_s = time.perf_counter() - start
        if out_path.is_file():
            data = json.loads(out_path.read_text())
            r.answer, r.status, r.error = (
                data.get("answer"),
                data.get("status", ""),
                data.get("error"),
            )
            r.answer_source = "answer" if r.status == "completed" else "partial"
            r.input_tokens = data.get("input_tokens", 0) or 0
            r.output_tokens = data.get("output_tokens", 0) or 0
            r.calls = data.get("calls", 0) or 0
            r.iterations = data.get("iterations", 0) or 0
            r.subcalls = max(0, r.calls - r.iterations)
            log = data.get("log_file")
            r.trajectory = os.path.relpath(log, out_dir) if log else None
        elif not r.status:
            r.status, r.error = (
                "failed",
                f"worker exited with {proc.returncode}; see rlms/{task.id}.log",
            )
        return finish(r, task)

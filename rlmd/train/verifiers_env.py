"""A `verifiers` 0.4.0 environment over rlmd: each rollout is a real rlmd run, scored by
:mod:`rlmd.train.rewards`, so trainers built on verifiers (prime-rl) can train an RLM's root.

Only this module imports verifiers; it needs the separate virtual environment that
``scripts/verifiers-venv.sh`` makes (verifiers 0.4.0 pins ``mcp==2.0.0``, rlmd's ``mcp``
extra needs ``mcp>=2.3``; docs/training.md).

How verifiers loads it (verifiers 0.4.0, ``verifiers/v1/utils/loaders.py``): a taskset id is
a top-level module name (``_import_plugin``, line 70: the id ``rlmd-verifiers`` imports the
package :mod:`rlmd_verifiers`, which re-exports this module's classes); ``_plugin_class``
(line 99) takes the one ``Taskset`` subclass it exports in ``__all__``;
``default_harness_id`` (line 153) makes the ``Harness`` subclass it also exports the
taskset's default harness; ``environment_class`` (line 168) takes the ``Env`` subclass it
exports (:class:`RlmdEnv`: one seat, whose runtime defaults to verifiers' local subprocess
instead of a Prime cloud sandbox, as nothing runs in it); ``load_environment`` (line 184)
builds it. So ``vf-eval rlmd-verifiers --env.taskset.tasks FILE ...`` and
prime-rl's ``[env] taskset.id = "rlmd-verifiers"`` load it by name.

One rollout (:meth:`RlmdHarness.launch`): the task's question and context go to
:func:`rlmd.engine.run_task` with rlmd's own sandbox (subprocess by default); the root
model is the policy, registered as an rlmd model of provider ``openai`` at verifiers'
interception endpoint, so every root turn verifiers records is the request rlmd sent
(system prompt, context metadata, history) and the reply it got. Sub-calls and child runs
go to the policy's own server directly (not recorded: the RLM paper trains the root only,
arXiv:2512.24601 App. A), or to an rlmd registry model named by ``sub_model``. The run is
recorded in rlmd's store like any other; its facts go to ``trace.info["rlmd"]`` and
:meth:`RlmdTask.rlmd_reward` scores them with the reward ``rlmd train rollout`` uses.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, model_validator

from rlmd import config as rlmd_config
from rlmd import paths
from rlmd.config import Settings, build_run_config
from rlmd.engine import run_task
from rlmd.models.base import ModelSpec
from rlmd.runner import check_models
from rlmd.sandbox import BACKENDS
from rlmd.store import Store
from rlmd.store.schema import StoreError
from rlmd.train.rewards import RewardTerms, RunFacts, correctness, reward
from rlmd.train.rollout import failed_before_any_reply, run_facts, training_run_config
from rlmd.train.tasks import TrainTask, load_tasks

__all__ = ["RlmdTaskset", "RlmdHarness", "RlmdEnv"]

POLICY = "verifiers-policy"
"""The registry name of the root model (the policy at the interception endpoint)."""
POLICY_DIRECT = "verifiers-policy-direct"
"""The registry name of the policy at its own server, for sub-calls (not recorded)."""


class RlmdTaskConfig(vf.TaskConfig):
    """The reward's optional trajectory terms (:class:`rlmd.train.rewards.RewardTerms`,
    the same defaults as ``rlmd train rollout``), under ``--env.taskset.task.*``."""

    fallback_zero: bool = True
    error_penalty: float = Field(0.0, ge=0, allow_inf_nan=False)
    overrun_zero: bool = False
    min_iterations: int = Field(0, ge=0)
    min_subcalls: int = Field(0, ge=0)

    def terms(self) -> RewardTerms:
        return RewardTerms(
            fallback_zero=self.fallback_zero,
            error_penalty=self.error_penalty,
            overrun_zero=self.overrun_zero,
            min_iterations=self.min_iterations,
            min_subcalls=self.min_subcalls,
        )


class RlmdTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.tasks``: an ``rlmd train tasks`` folder or a user JSONL file of
    ``{question, context, answer, scorer}`` (:func:`rlmd.train.tasks.load_tasks`)."""

    tasks: str = ""
    task: RlmdTaskConfig = RlmdTaskConfig()


class RlmdTaskData(vf.TaskData):
    """A task as verifiers records it: the question is the prompt; the context stays in the
    task file (it can be megabytes) and is read again by id when a rollout starts."""

    tasks_file: str
    task_id: str
    family: str = ""
    answer: Any = None


@functools.lru_cache(maxsize=8)
def _tasks_by_id(path: str, mtime_ns: int) -> dict[str, TrainTask]:
    return {t.id: t for t in load_tasks(path)}


def train_task(data: RlmdTaskData) -> TrainTask:
    """The :class:`TrainTask` ``data`` names, read from its task file (cached per file
    version).

    Raises:
        rlmd.train.tasks.TaskFileError: the file is gone or no longer reads.
        KeyError: the file no longer holds ``data.task_id``.
    """
    path = Path(data.tasks_file)
    mtime = path.stat().st_mtime_ns if path.exists() else 0
    tasks = _tasks_by_id(str(path), mtime)
    if data.task_id not in tasks:
        raise KeyError(f"task {data.task_id!r} is no longer in {path}")
    return tasks[data.task_id]


class RlmdTask(vf.Task[RlmdTaskData, vf.State, RlmdTaskConfig]):
    """One rlmd task: scored by :func:`rlmd.train.rewards.reward` over the facts the harness
    put in ``trace.info["rlmd"]``."""

    def _facts(self, trace: vf.Trace) -> RunFacts:
        info = trace.info.get("rlmd")
        if not info:
            raise vf.TaskError(
                "the trace has no rlmd run (trace.info['rlmd']): was it played by the "
                "rlmd harness (--env.agent.harness.id rlmd-verifiers)?"
            )
        return RunFacts(**info["facts"])

    @vf.reward
    async def rlmd_reward(self, trace: vf.Trace) -> float:
        """``gate * (correctness - penalties)`` in ``[0, 1]`` (rlmd.train.rewards)."""
        parts = reward(train_task(self.data), self._facts(trace), self.config.terms())
        trace.info["rlmd"]["reward"] = parts
        return float(parts["reward"])

    @vf.metric
    async def rlmd_run(self, trace: vf.Trace) -> dict[str, float]:
        """The run's correctness (before gates), root turns, sub-calls, cells that raised."""
        facts = self._facts(trace)
        return {
            "correctness": correctness(train_task(self.data), facts.answer),
            "iterations": float(facts.iterations),
            "subcalls": float(facts.subcalls),
            "cell_errors": float(facts.cell_errors),
        }


class RlmdTaskset(vf.Taskset[RlmdTask, RlmdTasksetConfig]):
    """The tasks of ``config.tasks``, in file order, each checked before any runs."""

    def load(self) -> list[RlmdTask]:
        """One :class:`RlmdTask` per task of ``config.tasks``, its prompt the question.

        Raises:
            ValueError: ``--env.taskset.tasks`` is not set.
            rlmd.train.tasks.TaskFileError: the file or folder cannot be read, or a record
                is bad (the message names the file and line); nothing has run.
        """
        if not self.config.tasks:
            raise ValueError(
                "no rlmd task file: set --env.taskset.tasks to an `rlmd train tasks` folder "
                "or a JSONL file of {question, context, answer, scorer}"
            )
        path = str(Path(self.config.tasks).resolve())
        tasks = load_tasks(path)  # TaskFileError names the file and line
        return [
            RlmdTask(
                RlmdTaskData(
                    id=t.id,
                    name=t.id,
                    prompt=t.question,
                    tasks_file=path,
                    task_id=t.id,
                    family=t.family,
                    answer=t.answer,
                ),
                self.config.task,
            )
            for t in tasks
        ]


class RlmdHarnessConfig(vf.HarnessConfig):
    """How a rollout runs, under ``--env.agent.harness.*``; defaults as ``rlmd train
    rollout``'s (:class:`rlmd.train.rollout.RolloutOptions`)."""

    sandbox: str = "subprocess"
    """rlmd's sandbox backend for the model's code (``subprocess``, ``container``, ...)."""
    max_iterations: int = Field(6, ge=1)
    max_depth: int = Field(1, ge=1)
    max_seconds: float = Field(300.0, gt=0)
    sub_model: str | None = None
    """An rlmd registry model for sub-calls and child runs; unset: the policy at its own
    server (``client.base_url``, key from ``client.api_key_var``), not recorded."""
    max_output_tokens: int = Field(1024, ge=1)
    """Cap on each root reply's tokens (rlmd's ``ModelSpec.max_output_tokens``)."""
    context_window: int = Field(32_768, ge=1)
    fold_failed_turns: bool = True
    """Fold failed turns out of the root's view, as rlmd's inference does by default."""
    store: str | None = None
    """The rlmd store the runs are recorded in; unset: the rlmd home's (``rlmd tui``
    browses them)."""

    @model_validator(mode="after")
    def _check_run(self) -> RlmdHarnessConfig:
        """Refuse, when the config is read, what would fail every rollout: a sandbox rlmd
        does not have, a budget rlmd's :class:`~rlmd.engine.Budget` refuses (``max_depth``
        0, ``max_seconds`` infinite). pydantic reports the ``ValueError`` as a
        ``ValidationError``."""
        if self.sandbox not in BACKENDS:
            raise ValueError(
                f"unknown rlmd sandbox backend {self.sandbox!r}; choose one of: "
                f"{', '.join(BACKENDS)}"
            )
        budget = {"max_iterations": self.max_iterations, "max_depth": self.max_depth}
        build_run_config(Settings(), budget={**budget, "max_seconds": self.max_seconds})
        return self


class RlmdHarness(vf.Harness[RlmdHarnessConfig]):
    """Plays one task as an rlmd run in this process; every root model call goes through
    verifiers' interception endpoint (the contract ``Harness.launch`` documents: a harness
    may run its loop in-process as long as every model call goes through ``endpoint``)."""

    NEEDS_CONTAINER = False
    # The model's code runs in rlmd's own sandbox (bubblewrap-isolated subprocess by
    # default, or a container), not in verifiers' runtime: nothing executes there.
    EXECUTES_CODE = False

    def _specs(self, ctx: vf.ModelContext, endpoint: str, secret: str) -> list[ModelSpec]:
        cfg = self.config
        root = ModelSpec(
            POLICY,
            "openai",
            ctx.model,
            base_url=endpoint,
            context_window=cfg.context_window,
            max_output_tokens=cfg.max_output_tokens,
            options={"api_key": secret},  # per rollout; rlmd never records it
        )
        specs = [root]
        if cfg.sub_model is None:
            key = os.environ.get(ctx.client.api_key_var)
            specs.append(
                dataclasses.replace(
                    root,
                    name=POLICY_DIRECT,
                    base_url=ctx.client.base_url,
                    options={"api_key": key} if key else {},
                )
            )
        return specs

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        """Play ``data`` as one rlmd run, recorded in the rlmd store; its facts go to
        ``trace.info["rlmd"]`` (``run_id``, ``task_id``, ``facts``, ``error``) for the reward.

        Returns:
            Exit 0 with the answer (or ``""``) as stdout once the run ended, whatever its
            status (a budget overrun is the policy's doing: the reward scores it); exit 1
            when it failed before any model reply (sandbox, context or server), which
            verifiers turns into a ``HarnessError`` on the trace, as ``rlmd train rollout``
            stops with ``RolloutError`` there rather than score 0.

        Raises:
            vf.HarnessError: ``data`` is not an rlmd task.
            KeyError / rlmd.train.tasks.TaskFileError: the task file changed and no longer
                holds the task.
            rlmd.models.ModelNotAvailable / KeyError / ValueError: ``sub_model`` names no
                usable model (:func:`rlmd.runner.check_models`).
        """
        if not isinstance(data, RlmdTaskData):
            raise vf.HarnessError(
                f"the rlmd harness plays rlmd tasks (taskset rlmd-verifiers), "
                f"not {type(data).__name__}"
            )
        task = train_task(data)
        cfg = self.config
        registry = rlmd_config.load(None).registry()
        for spec in self._specs(ctx, endpoint, secret):
            registry.add(spec)
        budget = {
            "max_iterations": cfg.max_iterations,
            "max_depth": cfg.max_depth,
            "max_seconds": cfg.max_seconds,
        }
        run = training_run_config(
            POLICY, cfg.sub_model or POLICY_DIRECT, cfg.sandbox, budget, cfg.fold_failed_turns
        )
        check_models(registry, run)
        where = Path(cfg.store) if cfg.store else paths.store_path()
        try:
            store = Store(where)
        except (OSError, sqlite3.Error, StoreError) as exc:  # before any model call
            raise vf.HarnessError(
                f"rlmd's store {where} cannot be opened ({exc}): set "
                "--env.agent.harness.store to a writable SQLite file"
            ) from exc
        with store:
            try:
                result = await run_task(
                    task.question,
                    task.load_context(),
                    run,
                    get_model=registry.for_run(),
                    sinks=(store.record,),
                )
            finally:
                await registry.aclose()
            facts = run_facts(store, result.run_id, result)
        trace.info["rlmd"] = {
            "run_id": result.run_id,
            "task_id": task.id,
            "facts": dataclasses.asdict(facts),
            "error": result.error,
        }
        trace.root_reply = result.answer
        if failed_before_any_reply(result):  # rlmd.train.rollout raises RolloutError here
            return vf.ProgramResult(1, "", f"rlmd run {result.run_id} failed: {result.error}")
        return vf.ProgramResult(0, result.answer or "", "")


class RlmdEnvConfig(vf.SingleAgentEnvConfig):
    """verifiers' single seat, with a local runtime by default (``--env.agent.runtime.*``
    still chooses another): the harness runs rlmd in the environment's process, so the
    runtime verifiers provisions for it stays idle, and its default (a Prime sandbox)
    needs an account and a tunnel."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class RlmdEnv(vf.Env[RlmdEnvConfig]):
    """One seat playing an rlmd task (verifiers' ``SingleAgentEnv`` with :class:`RlmdEnvConfig`)."""

    async def run(self, task: vf.Task, agents: Any) -> None:
        await agents.agent.run(task)

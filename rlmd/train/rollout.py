"""Rollouts: run tasks through the engine, score them, and record them in the store.

Each rollout is one recorded run (whole prompts of root calls kept: ``record_prompts``) plus
one ``rollouts`` row (task id, sample index, reward; see :mod:`rlmd.store.schema`). A rollout
set is resumable: ``(rollout_set, task_id, sample_index)`` already recorded is skipped. The
set can be exported to one JSONL file (rollout rows with their trajectories) and imported
into another machine's store.

``model="teacher"`` plays :mod:`rlmd.train.teacher` (train split only); any other name is a
registry model (local GGUF, OpenAI-compatible, Anthropic, scripted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmd.engine import RunConfig, RunResult, run_task
from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry, adapter_sub_model
from rlmd.runner import check_models
from rlmd.store import Store
from rlmd.store.export import flatten_tree
from rlmd.train import teacher
from rlmd.train.rewards import RewardTerms, RunFacts, reward
from rlmd.train.tasks import TrainTask

TEACHER = "teacher"
"""The model name that selects the programmatic teacher."""

TEACHER_LABELLER = "teacher-labeller"
"""The teacher's default sub-model: :class:`rlmd.train.teacher.RealisticLabeller`, one per
rollout (``teacher-oracle`` names the generator's exact labels instead)."""

Progress = Callable[[dict[str, Any]], None]
"""Called after each rollout with ``{"done", "total", "task_id", "sample_index", "reward",
"iterations", "subcalls", "seconds", "skipped"}``."""


class RolloutError(RuntimeError):
    """A rollout's run failed before any model reply (its sandbox, context or model server
    could not serve it): the rollouts stop, and that one is not recorded."""


def training_run_config(
    model: str, sub_model: str, sandbox: str | None, budget: dict[str, Any], fold_failed_turns: bool
) -> RunConfig:
    """The :class:`~rlmd.engine.RunConfig` of a run recorded for training (``rlmd train
    rollout`` and the verifiers environment): ``[run]``'s config with ``model`` as root,
    ``sub_model`` for sub-calls, every prompt recorded as the model saw it, and failed turns
    folded out of the root's view or not (as inference does by default).

    Raises:
        ValueError: an unknown budget key or a budget the engine refuses."""
    from rlmd.config import Settings, build_run_config

    config = build_run_config(Settings(), model=model, sandbox=sandbox, budget=dict(budget))
    return dataclasses.replace(
        config, sub_model=sub_model, record_prompts=True, fold_failed_turns=fold_failed_turns
    )


def failed_before_any_reply(result: RunResult) -> bool:
    """Whether a run failed before the model replied once: its sandbox, context or model
    server failed, not the policy, so it is an error to report, not a reward of 0."""
    return result.status == "failed" and not result.usage["total"]["calls"]


@dataclasses.dataclass
class RolloutOptions:
    """How rollouts run.

    Attributes:
        model: a registry name, or :data:`TEACHER`.
        samples: rollouts per task (sample indices ``0 .. samples - 1``).
        temperature: sampling temperature; sample ``k`` gets seed ``seed + k``.
        rollout_set: the set's name (the resume key); default ``"<model>"``.
        parallel: rollouts at once (a local GGUF model still runs one call at a time).
        budget: :class:`rlmd.engine.budget.Budget` fields for every run.
        sandbox: sandbox backend.
        sub_model: model for sub-calls. Default: the root model, or for a LoRA adapter
            ``rlmd train sft`` registered its base model
            (:func:`rlmd.models.registry.adapter_sub_model`); for the teacher
            :data:`TEACHER_LABELLER`, a :class:`rlmd.train.teacher.RealisticLabeller` per
            rollout (``teacher-oracle``: the generator's exact labels).
        terms: reward terms.
        seed: base sampling seed.
        repair_share: the teacher's share of repair trajectories (0..1; see
            :mod:`rlmd.train.teacher`); ignored for other models.
        literal_share: the teacher's share of literal plays where a task has one (0..1;
            see :mod:`rlmd.train.teacher_literal`); ignored for other models.
        fold_failed_turns: fold failed turns out of the root model's view, as inference does
            by default (``[run] fold_failed_turns``); the recorded prompts, and so the SFT
            samples, are then what the model sees at inference. ``False`` (``--no-fold``)
            records every failed turn in the later prompts (sessions 8-9's teacher data).

    Raises:
        ValueError: ``rollout_set`` is empty or blank.
    """

    model: str
    samples: int = 1
    temperature: float = 0.0
    rollout_set: str | None = None
    parallel: int = 1
    budget: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"max_iterations": 6, "max_depth": 1, "max_seconds": 300.0}
    )
    sandbox: str = "subprocess"
    sub_model: str | None = None
    terms: RewardTerms = dataclasses.field(default_factory=RewardTerms)
    seed: int = 1234
    repair_share: float = teacher.REPAIR_SHARE
    literal_share: float = teacher.LITERAL_SHARE
    fold_failed_turns: bool = True

    def __post_init__(self) -> None:
        if self.rollout_set is not None and not self.rollout_set.strip():
            # `--set ""` (an unset shell variable) recorded a set no --set could name
            raise ValueError("the rollout set name is empty: leave --set out for the model's name")

    @property
    def set_name(self) -> str:
        return self.rollout_set or self.model


def _sample_spec(registry: Registry, name: str, opts: RolloutOptions, k: int) -> ModelSpec:
    base = registry.spec(name)
    sampling = {**base.sampling, "temperature": opts.temperature}
    if opts.temperature > 0:
        sampling["seed"] = opts.seed + k
    return dataclasses.replace(base, name=f"{name}#s{k}", sampling=sampling)


def _check_same_tasks(
    store: Store, set_name: str, tasks: list[TrainTask], recorded: list[dict[str, Any]]
) -> None:
    """Raise ``ValueError`` when ``set_name`` already holds a rollout of a task id of
    ``tasks`` whose run asked another question. A resumed set skips the (task id, sample)
    pairs it holds; a user file's ids default to ``user-<line>``, so a second file rolled
    out into the same set (its default name is the model's) was skipped as done, with
    the first file's rewards shown for it."""
    from rlmd.store.codec import text  # the question as the store keeps it (surrogates)

    questions = {t.id: text(t.question) for t in tasks}
    for row in recorded:
        question = questions.get(row["task_id"])
        if question is None:
            continue
        run = store.get_run(row["run_id"])
        if run is not None and run.get("question") != question:
            raise ValueError(
                f"rollout set {set_name!r} already has task {row['task_id']!r} with another "
                "question (another task file under the same ids?): pass --set NAME for a "
                "new set, or give the tasks unique ids"
            )


def _count_problem(name: str, value: Any, least: int) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return None
    return f"{name} must be an integer >= {least}, not {value!r}"


def _check_options(opts: RolloutOptions) -> None:
    """Raise ``ValueError`` for rollout options out of range. Found by review13: samples 0
    printed "no rollouts" and exited 0; an error penalty of NaN or infinity made every
    reward 0 (``nan * 0`` for a run without a failed cell) and a negative one raised the
    reward of runs whose cells raised; a NaN temperature reached the sampler."""
    terms = opts.terms
    problems = [
        _count_problem("samples", opts.samples, 1),
        _count_problem("parallel", opts.parallel, 1),
        _count_problem("min_iterations", terms.min_iterations, 0),
        _count_problem("min_subcalls", terms.min_subcalls, 0),
    ]
    for name, value in (("temperature", opts.temperature), ("error_penalty", terms.error_penalty)):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value >= 0):
            problems.append(f"{name} must be a finite number >= 0, not {value!r}")
    problem = next((p for p in problems if p), None)
    if problem:
        raise ValueError(problem)


def _check_teacher_plays(
    todo: list[tuple[TrainTask, int]], repair_share: float, literal_share: float
) -> None:
    """Raise ``ValueError`` naming the first task the teacher cannot play. Its plays come
    from the generator's params: a user's task claiming family ``oolong`` without them
    stopped the rollout at that task, the tasks before it done, with ``error: 'label'``."""
    for task, k in todo:
        try:
            teacher.policy(task, k, repair_share, literal_share)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            raise ValueError(
                f"the teacher cannot play task {task.id!r} (family {task.family!r}): {why}; "
                "it plays the generated train split (rlmd train tasks --split train)"
            ) from None


async def run_rollouts(
    tasks: list[TrainTask],
    opts: RolloutOptions,
    *,
    registry: Registry,
    store: Store,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Run every (task, sample) not yet in ``opts.set_name`` and record it.

    Returns:
        The rollout rows recorded now (skipped ones are not returned).

    Raises:
        ValueError: the teacher was asked to play a held-out task, ``repair_share`` or
            ``literal_share`` is not within 0..1, ``samples`` or ``parallel`` is below 1, ``temperature`` or the
            error penalty is negative or not finite, a reward gate is negative, or the set holds a rollout of a task with one of these ids
            but another question (see :func:`_check_same_tasks`).
        ModelNotAvailable / KeyError: the model cannot be used (checked before any run).
        RolloutError: a run failed before any model reply (a sandbox that cannot start, a
            model server that does not answer); the rollouts before it stay recorded.
    """
    if opts.model == TEACHER and any(t.split == "heldout" for t in tasks):
        raise ValueError("the teacher never plays held-out tasks: pass the train split")
    if not 0.0 <= opts.repair_share <= 1.0:
        raise ValueError(f"repair_share must be within 0..1, not {opts.repair_share}")
    if not 0.0 <= opts.literal_share <= 1.0:
        raise ValueError(f"literal_share must be within 0..1, not {opts.literal_share}")
    _check_options(opts)
    recorded = store.rollouts(opts.set_name)
    done = {(r["task_id"], r["sample_index"]) for r in recorded}
    _check_same_tasks(store, opts.set_name, tasks, recorded)
    todo = [(t, k) for t in tasks for k in range(opts.samples) if (t.id, k) not in done]
    if opts.model == TEACHER:
        _check_teacher_plays(todo, opts.repair_share, opts.literal_share)
    total, counter = len(tasks) * opts.samples, len(done)
    sem = asyncio.Semaphore(max(1, opts.parallel))
    rows: list[dict[str, Any]] = []
    added: set[str] = set()

    def sample_model(k: int) -> str:
        # Registered once per sample index: replacing the entry for every task dropped its
        # cached model, so a local GGUF loaded its weights again for each task and the old
        # copies stayed in memory (12 GB resident after 7 tasks with the 1.5B).
        spec = _sample_spec(registry, opts.model, opts, k)
        if spec.name not in added:
            registry.add(spec)
            added.add(spec.name)
        return spec.name

    async def one(task: TrainTask, k: int) -> None:
        nonlocal counter
        async with sem:
            play: teacher.Play | None = None
            if opts.model == TEACHER:
                root = f"teacher-{task.id}-{k}"
                play = teacher.policy(task, k, opts.repair_share, opts.literal_share)
                registry.add(ModelSpec(root, "scripted", root, options={"callable": play}))
                sub = opts.sub_model or TEACHER_LABELLER
                if sub == "teacher-oracle":
                    registry.add(
                        ModelSpec(
                            sub, "scripted", sub, options={"callable": teacher.oracle_labeller}
                        )
                    )
                elif sub == TEACHER_LABELLER:  # its own per rollout: seeded by (task, sample)
                    sub = f"{TEACHER_LABELLER}-{task.id}-{k}"
                    labeller = teacher.RealisticLabeller(f"{task.id}:{k}")
                    registry.add(ModelSpec(sub, "scripted", sub, options={"callable": labeller}))
            else:
                root = sample_model(k)
                # a LoRA adapter's sub-calls go to its base (rlmd.models.registry)
                sub = opts.sub_model or adapter_sub_model(opts.model) or root
            # Every model, the teacher too, records the view inference gives it: a repair's
            # prompt shows a mistake that raised as the fold's note (its exception line).
            config = training_run_config(
                root, sub, opts.sandbox, opts.budget, opts.fold_failed_turns
            )
            check_models(registry, config)
            started = time.monotonic()
            result = await run_task(
                task.question,
                task.load_context(),
                config,
                get_model=registry.for_run(),  # per-run models (scripts) start afresh
                sinks=(store.record,),
            )
            if failed_before_any_reply(result):
                # Recorded as reward 0, every later rollout failed alike and a resumed set
                # skipped them all as done (review17).
                raise RolloutError(
                    f"task {task.id!r} sample {k}: run {result.run_id} failed before any "
                    f"model reply ({result.error}); no rollout is recorded for it. Fix "
                    f"that and run again: set {opts.set_name!r} resumes where it stopped"
                )
            facts = run_facts(store, result.run_id, result)
            parts = reward(task, facts, opts.terms)
            row = {
                "run_id": result.run_id,
                "rollout_set": opts.set_name,
                "task_id": task.id,
                "family": task.family,
                "split": task.split,
                "sample_index": k,
                "model": opts.model,
                "temperature": opts.temperature,
                "reward": parts["reward"],
                "correctness": parts["correctness"],
                "gated": parts["gated"],
                "iterations": facts.iterations,
                "subcalls": facts.subcalls,
                "cell_errors": facts.cell_errors,
                "created_at": time.time(),
                "details": {
                    "terms": opts.terms.to_dict(),
                    "gold": task.answer,
                    "answer": facts.answer,
                    "status": facts.status,
                    "answer_source": facts.answer_source,
                    "seconds": round(time.monotonic() - started, 3),
                },
            }
            if play is not None:  # the marker the SFT export reads (rlmd.train.export)
                row["details"]["mistake"] = play.mistake
                row["details"]["mistake_turns"] = list(play.mistake_turns)
                row["details"]["strategy"] = play.strategy
            store.record_rollout(row)
            rows.append(row)
            counter += 1
            if progress:
                progress(
                    {
                        "done": counter,
                        "total": total,
                        "task_id": task.id,
                        "sample_index": k,
                        "reward": row["reward"],
                        "iterations": facts.iterations,
                        "subcalls": facts.subcalls,
                        "seconds": row["details"]["seconds"],
                    }
                )

    await asyncio.gather(*(one(t, k) for t, k in todo))
    return rows


def run_facts(store: Store, run_id: str, result: Any) -> RunFacts:
    """What a reward needs of a finished run: cells that raised are counted over the whole
    tree; sub-calls are ``llm_query`` calls plus child runs."""
    tree = store.tree(run_id)
    errors, subcalls = 0, 0
    stack = [tree]
    while stack:
        run = stack.pop()
        subcalls += int(run.get("subcalls") or 0) + len(run.get("runs") or [])
        stack.extend(run.get("runs") or [])
        nodes = list(run.get("nodes") or [])
        while nodes:
            node = nodes.pop()
            nodes.extend(node.get("children") or [])
            stack.extend(node.get("runs") or [])
            subcalls += len(node.get("runs") or [])
            if node.get("kind") == "cell" and node.get("status") in ("error", "timeout"):
                errors += 1
    return RunFacts(
        answer=result.answer,
        status=result.status,
        answer_source=result.answer_source,
        iterations=result.iterations,
        subcalls=subcalls,
        cell_errors=errors,
    )


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family (and ``"all"``): rollouts, mean reward, mean correctness, share with reward
    > 0, mean iterations, mean sub-calls, share using sub-calls, cells that raised."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["family"], []).append(r)
    if rows:
        groups["all"] = list(rows)
    out = []
    for fam, rs in groups.items():
        n = len(rs)
        out.append(
            {
                "family": fam,
                "rollouts": n,
                "reward": round(sum(r["reward"] for r in rs) / n, 3),
                "correctness": round(sum(r["correctness"] for r in rs) / n, 3),
                "solved": round(sum(1 for r in rs if r["reward"] > 0) / n, 3),
                "iterations": round(sum(r["iterations"] for r in rs) / n, 2),
                "subcalls": round(sum(r["subcalls"] for r in rs) / n, 2),
                "uses_subcalls": round(sum(1 for r in rs if r["subcalls"] > 0) / n, 3),
                "cell_errors": sum(r["cell_errors"] for r in rs),
            }
        )
    return out


def check_sets(store: Store, names: list[str] | tuple[str, ...]) -> None:
    """Refuse rollout set names the store does not hold.

    Raises:
        ValueError: a name is not a rollout set here; the message lists the sets there are
            (with their rollout counts) or says there are none.
    """
    sets = store.rollout_sets()
    missing = [name for name in dict.fromkeys(names) if name not in sets]
    if not missing:
        return
    there = ", ".join(f"{name!r} ({n})" for name, n in sets.items()) or "none yet"
    which = ", ".join(repr(name) for name in missing)
    raise ValueError(f"no rollout set {which} in this store; rollout sets: {there}")


def export_set(store: Store, rollout_set: str, path: str | Path) -> int:
    """Write a rollout set to one JSONL file: per rollout a ``{"type": "rollout", ...}`` line
    followed by its trajectory's run and node lines (:func:`rlmd.store.export.flatten_tree`).
    Returns the number of rollouts written.

    Raises:
        ValueError: the store holds no set ``rollout_set`` (:func:`check_sets`); ``path`` is
            then not created or changed.
        OSError: ``path`` cannot be written.
    """
    check_sets(store, [rollout_set])
    rows = store.rollouts(rollout_set)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"type": "rollout", **row}, ensure_ascii=False) + "\n")
            for rec in flatten_tree(store.tree(row["run_id"])):
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return len(rows)


def import_set(store: Store, path: str | Path) -> int:
    """Read a file written by :func:`export_set` into ``store``; rollouts already there (same
    set, task and sample) are skipped, and so is a rollout the file holds twice. Every line
    is checked before anything is written (:meth:`rlmd.store.Store.check_import`).
    Returns the number of rollouts added.

    Raises:
        ValueError: the file cannot be read or holds no record, a line is not a JSON
            object, or a record cannot be imported (an unknown type or field, a value of
            the wrong type, a rollout without its run...); the message names the file and
            line (:func:`rlmd.train.datafile.read_records`).
    """
    from rlmd.store.rollouts import ImportProblem
    from rlmd.train.datafile import read_records

    numbered = read_records(path, "exported record", error=ValueError)
    try:
        store.check_import(numbered)
    except ImportProblem as exc:
        raise ValueError(f"{path}:{exc.line}: {exc.why}") from None
    records = [rec for _, rec in numbered]
    store.import_records(records)
    have = {(r["rollout_set"], r["task_id"], r["sample_index"]) for r in store.rollouts()}
    added = 0
    for rec in records:
        if rec.get("type") != "rollout":
            continue
        row = {k: v for k, v in rec.items() if k != "type"}
        key = (row["rollout_set"], row["task_id"], row["sample_index"])
        if key in have:
            continue
        store.record_rollout(row)
        have.add(key)
        added += 1
    return added

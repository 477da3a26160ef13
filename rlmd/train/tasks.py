"""Training task sets: generated families with disjoint train / held-out splits, and a user's
JSONL.

A task set is either

* a folder in the benchmark format (``manifest.json``, ``tasks.jsonl``, ``contexts/``; see
  ``bench/quality/tasks.py``), written by :func:`generate_split` (``rlmd train tasks``), or
* a user's JSONL file, one task per line::

      {"question": str, "context": str | {"path": text, ...}, "answer": any,
       "scorer": "exact" | "numeric" | "f1" | "path" | "contains" | "pairs" | "module:fn",
       "id": str (optional, default "user-<line>"), "family": str (optional, "user"),
       "split": "user" | "train" | "heldout" (optional, "user"; held-out tasks are never
       exported nor played by the teacher)}

  The answer's type must suit the scorer (checked when the file is loaded, see
  :func:`load_tasks`); a ``module:fn`` scorer gets whatever the line holds.

The generated families come from the benchmark generators (``bench/quality``, so a source
checkout is needed): ``sniah`` (needle in essays), ``oolong`` (label + aggregate over WordNet
glosses), ``pairs`` (user pairs), ``codeqa`` (questions over a renamed stdlib package). The
two splits never share a seed **or** a source text: the train split uses essays and WordNet
glosses of hash partition 0 and the packages in :data:`SPLITS`; the held-out split uses
partition 1, another seed stream and other packages. A split's seed is the given one plus
its ``seed_offset``, and the given one must be below :data:`SEED_LIMIT` (the held-out
offset), so train seeds ``0 .. SEED_LIMIT - 1`` and held-out seeds ``SEED_LIMIT ..`` never
meet.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmd.train.datafile import read_records

SPLITS: dict[str, dict[str, Any]] = {
    # seed offset, source partition [k, n], stdlib packages for codeqa
    "train": {"seed_offset": 0, "partition": [0, 2], "packages": ["wsgiref", "json"]},
    "heldout": {"seed_offset": 1_000_003, "partition": [1, 2], "packages": ["tomllib"]},
}
USER_SPLITS = ("user", "train", "heldout")
"""What a user task's ``split`` may be: ``user`` (the default) and ``train`` tasks are
exported, ``heldout`` ones never (and the teacher never plays them)."""
SEED_LIMIT: int = SPLITS["heldout"]["seed_offset"]
"""``generate_split`` takes seeds ``0 <= seed < SEED_LIMIT``: with the held-out split's
offset of the same size, a train seed can never be a held-out one (train ``--seed
1000003`` was the held-out split's seed 0)."""

SIZES: dict[str, dict[str, Any]] = {
    # Short contexts on purpose: root turns see metadata, not the context, so what matters
    # for training is the strategy, and a CPU runs many of these.
    "tiny": {"sniah": [1_024], "sniah_n": 2, "oolong_windows": 1, "oolong_q": 2, "pairs_q": 1,
             "codeqa_q": 2},
    "small": {"sniah": [1_024, 2_048], "sniah_n": 4, "oolong_windows": 2, "oolong_q": 4,
              "pairs_q": 2, "codeqa_q": 4},
    "medium": {"sniah": [2_048, 4_096], "sniah_n": 10, "oolong_windows": 4, "oolong_q": 6,
               "pairs_q": 3, "codeqa_q": 10},
}  # fmt: skip


@dataclass
class TrainTask:
    """One question with a known answer.

    Attributes:
        id: unique in its set.
        family: ``sniah | oolong | pairs | codeqa | user`` (or the user's own label).
        question: the text the model is asked.
        answer: the gold answer (str, number, list).
        scorer: a metric of :mod:`rlmd.train.scoring` or ``"module:fn"``.
        context: a str, or ``{relative path: text}`` for a codebase; or ``None`` when
            ``context_path`` is set.
        context_path: a text file or codebase folder holding the context.
        split: ``train``, ``heldout`` or ``user``.
        choices / unique_basename / params: scoring options and how it was made.
    """

    id: str
    family: str
    question: str
    answer: Any
    scorer: str
    context: Any = None
    context_path: str | None = None
    split: str = "user"
    choices: list[str] | None = None
    unique_basename: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def load_context(self) -> Any:
        """The context value: a str, or a folder :class:`Path` for a codebase."""
        if self.context is not None:
            return self.context
        path = Path(self.context_path or "")
        return path if path.is_dir() else path.read_text(encoding="utf-8")


class TaskFileError(ValueError):
    """A task file or folder cannot be read; the message says where and why."""


def load_tasks(path: str | Path) -> list[TrainTask]:
    """The tasks of a task-set folder or a user JSONL file (see the module docstring).

    Every record is checked before any task runs (a bad line found after hours of rollouts
    cost every run before it).

    Raises:
        TaskFileError: missing or unreadable file, no task at all, text that is not
            UTF-8, a line that is not a JSON object, a record without ``question`` /
            ``context`` / ``answer``, a ``family`` that is not a non-empty string or a
            ``split`` not in :data:`USER_SPLITS`, or
            one whose question is not a string, whose context is not a string, list or
            object, whose scorer is neither a metric nor ``"module:fn"``, whose
            ``choices`` is not a list, whose ``id`` is not a string or integer or repeats an
            earlier one, or whose answer a built-in scorer cannot read (``exact`` / ``path``:
            a non-empty string or a number; ``numeric``: a finite number or a string of
            one; ``contains``: a non-empty string or list; ``f1``: a list of strings;
            ``pairs``: a list of ``[a, b]`` integers); in a task-set folder also a
            ``context_ref`` that does not exist. The message names the file and line.
    """
    path = Path(path)
    # no task at all is an error (`rollout` ran nothing, said "no rollouts" and exited 0)
    return _load_folder(path) if path.is_dir() else _load_file(path)


def _load_file(path: Path) -> list[TrainTask]:
    if not path.exists():
        raise TaskFileError(f"{path}: no such task file or task-set folder")
    tasks: list[TrainTask] = []
    lines_of: dict[str, int] = {}
    for n, rec in read_records(path, "task", error=TaskFileError):
        missing = [k for k in ("question", "context", "answer") if k not in rec]
        if missing:
            raise TaskFileError(f"{path}:{n}: missing {missing}")
        _check_record(rec, f"{path}:{n}")
        tasks.append(
            TrainTask(
                id=str(rec.get("id", f"user-{n}")),
                family=str(rec.get("family", "user")),
                question=str(rec["question"]),
                answer=rec["answer"],
                scorer=str(rec.get("scorer", "exact")),
                context=rec["context"],
                split=str(rec.get("split", "user")),
                choices=rec.get("choices"),
            )
        )
        if tasks[-1].id in lines_of:  # ids 1 and "1" are the same id
            raise TaskFileError(
                f"{path}:{n}: task id {tasks[-1].id!r} is already used on line "
                f"{lines_of[tasks[-1].id]}"
            )
        lines_of[tasks[-1].id] = n
    return tasks


def _check_record(rec: dict[str, Any], where: str) -> None:
    """Raise :class:`TaskFileError` (naming ``where``) for a user task whose fields have the
    wrong types (see :func:`load_tasks`)."""
    from rlmd.train.scoring import METRICS

    if not isinstance(rec["question"], str) or not rec["question"].strip():
        raise TaskFileError(f"{where}: question must be a non-empty string")
    if not isinstance(rec["context"], str | list | dict):
        raise TaskFileError(
            f"{where}: context must be a string or an object of {{path: text}}, "
            f"got {type(rec['context']).__name__}"
        )
    scorer = rec.get("scorer", "exact")
    module, _, fn = str(scorer).partition(":")
    if not isinstance(scorer, str) or (scorer not in METRICS and not (module and fn)):
        raise TaskFileError(
            f"{where}: unknown scorer {scorer!r}: use one of {', '.join(METRICS)} or 'module:fn'"
        )
    if rec.get("choices") is not None and not isinstance(rec["choices"], list):
        raise TaskFileError(f"{where}: choices must be a list")
    if "id" in rec and (isinstance(rec["id"], bool) or not isinstance(rec["id"], str | int)):
        raise TaskFileError(f"{where}: id must be a string or an integer")
    family = rec.get("family", "user")  # 3 became family "3", {} family "{}"
    if not isinstance(family, str) or not family.strip():
        raise TaskFileError(f"{where}: family must be a non-empty string, not {family!r}")
    split = rec.get("split", "user")  # any other split was dropped by every export
    if split not in USER_SPLITS:
        raise TaskFileError(
            f"{where}: split must be one of {', '.join(USER_SPLITS)} (or left out), not {split!r}"
        )
    if scorer in METRICS:
        why = _answer_problem(rec["answer"], scorer)
        if why:
            # Found only when the task's run had ended (a traceback, every task before it
            # done and the rest never run): "abc" for numeric, [] for contains, 5 for f1.
            raise TaskFileError(f"{where}: answer {why} for scorer {scorer!r}")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range: the numeric scorer could not use it
        return False


def _answer_problem(answer: Any, metric: str) -> str | None:
    """Why ``answer`` cannot be scored by the built-in ``metric``, or ``None`` when it can
    (see :func:`rlmd.train.scoring.score_answer` for the shapes each metric reads)."""
    scalar = isinstance(answer, str) or _is_number(answer)
    if metric in ("exact", "path"):
        return None if scalar and str(answer).strip() else "must be a non-empty string or a number"
    if metric == "numeric":
        if _is_number(answer):
            return None
        if isinstance(answer, str):
            with contextlib.suppress(ValueError):
                if math.isfinite(float(answer)):
                    return None
        return "must be a finite number"
    items_ok = isinstance(answer, list) and all(isinstance(a, str) or _is_number(a) for a in answer)
    if metric == "contains":
        if (isinstance(answer, str) and answer.strip()) or (items_ok and answer):
            return None
        return "must be a non-empty string or a non-empty list of strings"
    if metric == "f1":
        return None if items_ok else "must be a list of strings"

    # pairs
    def pair(p: Any) -> bool:
        if not isinstance(p, list) or len(p) != 2:
            return False
        try:
            return all(not isinstance(x, bool) and int(x) == float(x) for x in p)
        except (TypeError, ValueError, OverflowError):
            return False

    if isinstance(answer, list) and all(pair(p) for p in answer):
        return None
    return "must be a list of [a, b] integer pairs"


def _load_folder(root: Path) -> list[TrainTask]:
    from rlmd.train.scoring import METRICS

    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise TaskFileError(f"{root}: not a task-set folder ({exc})") from None
    if not isinstance(manifest, dict):
        raise TaskFileError(f"{root}/manifest.json: not a JSON object")
    if not (root / "tasks.jsonl").exists():
        raise TaskFileError(f"{root}: not a task-set folder (no tasks.jsonl)")
    split = manifest.get("split", "user")
    tasks: list[TrainTask] = []
    lines_of: dict[Any, int] = {}
    for n, rec in read_records(root / "tasks.jsonl", "task", error=TaskFileError):
        where = f"{root}/tasks.jsonl:{n}"
        try:
            tasks.append(
                TrainTask(
                    id=rec["id"],
                    family=rec["family"],
                    question=rec["question"],
                    answer=rec["answer"],
                    scorer=rec["metric"],
                    context_path=str(root / rec["context_ref"]),
                    split=split,
                    choices=rec.get("choices"),
                    unique_basename=bool(rec.get("unique_basename")),
                    params=rec.get("params") or {},
                )
            )
        except (KeyError, TypeError) as exc:
            raise TaskFileError(f"{where}: missing or wrong field {exc}") from None
        # As for a user's file: found after the runs before it, or never (review12b).
        task = tasks[-1]
        if isinstance(task.id, bool) or not isinstance(task.id, str | int):
            raise TaskFileError(f"{where}: id must be a string or an integer")
        if task.id in lines_of:
            raise TaskFileError(
                f"{where}: task id {task.id!r} is already used on line {lines_of[task.id]}"
            )
        lines_of[task.id] = n
        why = _answer_problem(task.answer, task.scorer) if task.scorer in METRICS else None
        if why:
            raise TaskFileError(f"{where}: answer {why} for scorer {task.scorer!r}")
        if not Path(task.context_path or "").exists():
            raise TaskFileError(f"{where}: context_ref {rec['context_ref']!r} does not exist")
    return tasks


def split_spec(split: str, size: str = "small") -> dict[str, Any]:
    """The benchmark-generator spec of one split (see :data:`SPLITS`, :data:`SIZES`)."""
    s, z = SPLITS[split], SIZES[size]
    return {
        "partition": s["partition"],
        "sniah": {"lengths": z["sniah"], "per_length": z["sniah_n"]},
        "oolong": {"lengths": [1_024], "windows": z["oolong_windows"], "questions": z["oolong_q"]},
        "pairs": {"lengths": [1_024], "windows": z["oolong_windows"], "questions": z["pairs_q"]},
        "codeqa": [
            {"package": p, "questions": 0, "renamed_questions": z["codeqa_q"]}
            for p in s["packages"]
        ],
    }


def bench_on_path() -> None:
    """Make the benchmark generators (``bench/quality``, not part of the installed package)
    importable from the source checkout rlmd runs from, whatever the working directory.

    Raises:
        ImportError: rlmd does not run from a source checkout holding ``bench/quality``.
    """
    try:
        import bench.quality  # noqa: F401
    except ImportError:
        checkout = Path(__file__).resolve().parents[2]
        if not (checkout / "bench" / "quality" / "__init__.py").is_file():
            raise ImportError(
                "the generated task families come from bench/quality in a source checkout of "
                "rlmd (git clone + scripts/setup.sh); with an installed rlmd use your own "
                "tasks JSONL (--tasks FILE)",
                name="bench",
            ) from None
        sys.path.append(str(checkout))


def _check_out(out: str | Path) -> None:
    """Refuse an ``out`` the task set would spill into: ``--out ""`` wrote ``manifest.json``,
    ``tasks.jsonl`` and ``contexts/`` into the current folder, and ``--out .`` (a project)
    over a ``manifest.json`` of its own. A new or empty folder, or an earlier task set, is
    fine."""
    if not str(out).strip():
        raise ValueError("--out is empty: name a new folder for the task set")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file: name a new folder for the task set")
    if out.is_dir() and any(out.iterdir()) and not (out / "tasks.jsonl").is_file():
        raise ValueError(
            f"{out} holds other files and is not a task set: name a new or empty folder "
            "(the set writes manifest.json, tasks.jsonl and contexts/ there)"
        )


def generate_split(
    split: str,
    out: str | Path,
    *,
    seed: int = 0,
    size: str = "small",
    families: tuple[str, ...] = ("sniah", "oolong", "pairs", "codeqa"),
) -> list[TrainTask]:
    """Write the ``split`` (``train`` / ``heldout``) task set of ``size`` to folder ``out``
    and return its tasks. Every task id is prefixed with the split, so ids of the two splits
    never collide.

    Raises:
        KeyError: unknown split or size.
        ValueError: ``seed`` is not an integer in ``0 .. SEED_LIMIT - 1``; ``out`` is empty
            text, a file, or a folder with files in it that is not a task set (see
            :func:`_check_out`).
        ImportError: the benchmark generators are not importable (run from a source checkout).
        bench.quality.sources.SourceUnavailable: a pinned source text could not be fetched.
    """
    _check_out(out)
    bench_on_path()
    from bench.quality import suites
    from bench.quality.tasks import TaskSet
    from bench.quality.tokenizer import estimate_tokenizer

    spec = split_spec(split, size)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(
            f"seed must be an integer from 0 to {SEED_LIMIT - 1}, not {seed!r}: the held-out "
            f"split adds {SEED_LIMIT} to its seed, so outside that range a train and a "
            "held-out split could share a seed"
        )
    seed = seed + SPLITS[split]["seed_offset"]
    tok = estimate_tokenizer()
    out = Path(out)
    base = {k: v for k, v in spec.items() if k != "codeqa"}
    fams = tuple(f for f in families if f != "codeqa")
    ts = suites.generate(base, out, seed=seed, count=tok.count, tokenizer=tok.name, families=fams)
    all_tasks = list(ts.tasks)
    manifest = ts.manifest
    if "codeqa" in families:
        for i, sub in enumerate(spec["codeqa"]):
            part = suites.generate(
                {"codeqa": sub},
                out / f".codeqa-{i}",
                seed=seed,
                count=tok.count,
                tokenizer=tok.name,
                families=("codeqa",),
            )
            for task in part.tasks:
                task.id = f"{task.id}-{sub['package']}"
                task.context_ref = f".codeqa-{i}/{task.context_ref}"
            all_tasks += part.tasks
    for task in all_tasks:
        task.id = f"{split}-{task.id}"
    merged = TaskSet(out)
    merged.tasks = all_tasks
    merged.manifest = {**manifest, "split": split, "size": size, "spec": spec, "seed": seed}
    merged.save()
    return load_tasks(out)

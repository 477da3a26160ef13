"""Rewards for a finished rollout: task correctness, then optional trajectory terms.

``reward = gate * (correctness - penalties)``, clipped to ``[0, 1]``:

* **correctness** (``[0, 1]``): the task's scorer on the answer. Built-in scorers are the
  metrics of :mod:`rlmd.train.scoring` (``exact``, ``numeric`` partial credit ``0.75^|Δ|``,
  ``f1`` set F1, ``path`` match, ``contains``, ``pairs``); ``"module:fn"`` imports a user
  function ``fn(answer: str | None, gold, task) -> float``.
* **trajectory terms** (:class:`RewardTerms`, all off by default):

  - ``fallback_zero``: an answer from the fallback extraction call (the run ran out of
    budget, ``answer_source == "extraction"``) scores 0: it was not the model's own FINAL.
  - ``error_penalty``: subtracted per cell that raised.
  - ``overrun_zero``: a run that ended on a budget limit (``status`` other than
    ``completed``) scores 0.
  - ``min_iterations`` / ``min_subcalls``: gates like the reference's rubric: a run with fewer
    root turns / sub-calls (``llm_query`` + child runs) than asked scores 0.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from typing import Any

from rlmd.train.scoring import METRICS, score_answer
from rlmd.train.tasks import TrainTask


@dataclass
class RewardTerms:
    """Optional trajectory terms (see the module docstring)."""

    fallback_zero: bool = True
    error_penalty: float = 0.0
    overrun_zero: bool = False
    min_iterations: int = 0
    min_subcalls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunFacts:
    """What a reward looks at in a finished run (from the engine result and the store)."""

    answer: str | None
    status: str
    answer_source: str | None
    iterations: int
    subcalls: int
    cell_errors: int


def correctness(task: TrainTask, answer: str | None) -> float:
    """The task's scorer on ``answer``, in ``[0, 1]``.

    Raises:
        ValueError: an unknown scorer name, or a user scorer that raised (its exception is
            the cause) or returned no number; the message names the scorer and the task.
        ImportError / AttributeError: a ``module:fn`` scorer that cannot be imported.
    """
    if task.scorer in METRICS:
        return score_answer(
            answer,
            task.answer,
            task.scorer,
            choices=task.choices,
            unique_basename=task.unique_basename,
        ).value
    if ":" not in task.scorer:
        raise ValueError(f"unknown scorer {task.scorer!r}: use one of {METRICS} or 'module:fn'")
    module, _, name = task.scorer.partition(":")
    fn = getattr(importlib.import_module(module), name)
    try:
        value = fn(answer, task.answer, task)
    except Exception as exc:  # a user's function: any bug, said once with the task's id
        raise ValueError(
            f"scorer {task.scorer} raised {type(exc).__name__}: {exc} (task {task.id}); "
            "its run is kept in the store, fix the scorer and run again to score it"
        ) from exc
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"scorer {task.scorer} returned {value!r}, not a number (task {task.id})")
    return min(1.0, max(0.0, float(value)))


def reward(task: TrainTask, facts: RunFacts, terms: RewardTerms | None = None) -> dict[str, Any]:
    """The reward of one rollout and its parts.

    Returns:
        ``{"reward": float, "correctness": float, "gated": str | None}``; ``gated`` names the
        term that zeroed the reward, if one did.
    """
    terms = terms or RewardTerms()
    score = correctness(task, facts.answer)
    gated = None
    if terms.fallback_zero and facts.answer_source == "extraction":
        gated = "fallback"
    elif terms.overrun_zero and facts.status != "completed":
        gated = "overrun"
    elif facts.iterations < terms.min_iterations:
        gated = "min_iterations"
    elif facts.subcalls < terms.min_subcalls:
        gated = "min_subcalls"
    value = 0.0 if gated else score - terms.error_penalty * facts.cell_errors
    return {"reward": round(min(1.0, max(0.0, value)), 6), "correctness": score, "gated": gated}

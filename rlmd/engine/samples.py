"""Self-consistency: K root trajectories of one task in parallel, their answers voted.

For users with fast models (or a sampling temperature above 0: greedy decoding repeats one
trajectory K times). Each sample is a full run with its own REPL, budget and trajectory in
the store; the context is loaded once and shared (so a codebase's symbol index is built once).
Answers are compared after :func:`normalise`; an answer the verifier doubted
(``"unverified"``) or that came from the extraction fallback counts half a vote.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlmd.context import Context, load_context_async
from rlmd.engine.config import RunConfig, RunResult

WEAK_SOURCES = frozenset({"unverified", "extraction"})
"""Answer sources that count half a vote."""


def normalise(answer: str) -> str:
    """The form answers are compared in: stripped of quotes, backticks and a final period,
    whitespace collapsed, case folded."""
    text = " ".join(answer.split())
    text = re.sub(r"[.。]\s*$", "", text).strip().strip("`'\"").strip()
    return text.casefold()


@dataclass
class Vote:
    """The vote over K samples.

    Attributes:
        winner: index of the sample whose answer won (``None``: no sample answered).
        tally: normalised answer → votes (weak answers count 0.5), most votes first.
        samples: per sample ``{"run_id", "status", "answer", "answer_source"}``.
    """

    winner: int | None
    tally: dict[str, float] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"winner": self.winner, "tally": self.tally, "samples": self.samples}


def vote(results: Sequence[RunResult]) -> Vote:
    """Vote over ``results``: the answer with the most (weighted) votes wins; a tie goes to
    the answer first given by a sample; the winner is that answer's first full-weight
    sample (else its first sample)."""
    tally: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, r in enumerate(results):
        if r.answer is None or not r.answer.strip():
            continue
        key = normalise(r.answer)
        tally[key] = tally.get(key, 0.0) + (0.5 if r.answer_source in WEAK_SOURCES else 1.0)
        first.setdefault(key, i)
    samples = [
        {
            "run_id": r.run_id,
            "status": r.status,
            "answer": r.answer,
            "answer_source": r.answer_source,
        }
        for r in results
    ]
    if not tally:
        return Vote(None, {}, samples)
    best = max(tally, key=lambda k: (tally[k], -first[k]))
    strong = [
        i
        for i, r in enumerate(results)
        if r.answer is not None
        and normalise(r.answer) == best
        and r.answer_source not in WEAK_SOURCES
    ]
    ordered = dict(sorted(tally.items(), key=lambda kv: (-kv[1], first[kv[0]])))
    return Vote(strong[0] if strong else first[best], ordered, samples)


async def run_samples(
    k: int,
    question: str,
    context: Any,
    config: RunConfig,
    run_one: Callable[[str, Context, RunConfig], Any],
) -> tuple[RunResult, Vote]:
    """Run ``k`` samples of one task concurrently through ``run_one(question, context,
    config) -> RunResult`` (an awaitable) and vote.

    Returns:
        The winning sample's result (or the first sample's when none answered) and the
        :class:`Vote`.

    Raises:
        ValueError: ``k`` < 1.
        Whatever a sample raises (the other samples are cancelled).
    """
    if k < 1:
        raise ValueError("samples must be at least 1")
    ctx = context if isinstance(context, Context) else await load_context_async(context)
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(run_one(question, ctx, config)) for _ in range(k)]
    results: list[RunResult] = [t.result() for t in tasks]
    v = vote(results)
    return results[v.winner if v.winner is not None else 0], v

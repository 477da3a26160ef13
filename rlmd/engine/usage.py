"""Usage accounting summed over the whole call tree, per model and per depth."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from rlmd.engine.events import Event


class TallyDict(TypedDict):
    """One slice of usage: tokens, model calls, USD."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    calls: int
    cost_usd: float


class UsageSummary(TypedDict):
    """A run tree's usage (:meth:`Usage.to_dict`); ``by_depth`` keys are depths as strings."""

    total: TallyDict
    by_model: dict[str, TallyDict]
    by_depth: dict[str, TallyDict]
    wall_time_s: float


@dataclass
class Tally:
    """Counters for one slice of usage: tokens, model calls, USD."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0

    def add(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.calls += 1
        self.cost_usd += cost_usd

    def to_dict(self) -> TallyDict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "calls": self.calls,
            "cost_usd": round(self.cost_usd, 8),
        }


@dataclass
class Usage:
    """Usage of one run and everything below it.

    A child run's ``Usage`` has its parent's as ``parent``; every call recorded on the child
    is added up the chain, so the root's usage covers the whole tree.
    """

    parent: Usage | None = None
    total: Tally = field(default_factory=Tally)
    by_model: dict[str, Tally] = field(default_factory=dict)
    by_depth: dict[int, Tally] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def record(
        self, model: str, depth: int, input_tokens: int, output_tokens: int, cost_usd: float
    ) -> None:
        """Add one model call (tokens, USD) made at ``depth`` by ``model`` here and in every
        ancestor."""
        node: Usage | None = self
        while node is not None:
            node.total.add(input_tokens, output_tokens, cost_usd)
            node.by_model.setdefault(model, Tally()).add(input_tokens, output_tokens, cost_usd)
            node.by_depth.setdefault(depth, Tally()).add(input_tokens, output_tokens, cost_usd)
            node = node.parent

    def finish(self) -> None:
        self.finished = time.monotonic()

    def wall_time_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def to_dict(self) -> UsageSummary:
        """``{"total": tally, "by_model": {name: tally}, "by_depth": {"0": tally},
        "wall_time_s": float}`` where a tally is ``{input_tokens, output_tokens, total_tokens,
        calls, cost_usd}``."""
        return {
            "total": self.total.to_dict(),
            "by_model": {k: v.to_dict() for k, v in sorted(self.by_model.items())},
            "by_depth": {str(k): v.to_dict() for k, v in sorted(self.by_depth.items())},
            "wall_time_s": round(self.wall_time_s(), 4),
        }


class LiveTotals(TypedDict):
    """:class:`LiveUsage` as a dict (the daemon's task status ``usage``)."""

    input_tokens: int
    output_tokens: int
    cost_usd: float
    model_calls: int
    runs: int


@dataclass
class LiveUsage:
    """What a run tree has used so far, folded from its events as they arrive: the numbers a
    task shows while it runs. Unlike :class:`Usage` it counts failed model calls too, and
    the runs of the tree (the root and every child run).

    Attributes:
        input_tokens / output_tokens: tokens of finished model calls.
        cost_usd: US dollars (rounded to 8 places at each step).
        model_calls: model calls finished, failed ones included.
        runs: runs started in the tree, the root included.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    runs: int = 1

    def observe(self, event: Event) -> bool:
        """Fold in one event of the tree; returns whether the totals changed."""
        from rlmd.engine.events import ModelCallFinished, RunStarted

        if isinstance(event, ModelCallFinished):
            self.input_tokens += int(event.input_tokens or 0)
            self.output_tokens += int(event.output_tokens or 0)
            self.cost_usd = round(self.cost_usd + float(event.cost_usd or 0.0), 8)
            self.model_calls += 1
            return True
        if isinstance(event, RunStarted) and event.is_child_run:
            self.runs += 1
            return True
        return False

    def to_dict(self) -> LiveTotals:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "model_calls": self.model_calls,
            "runs": self.runs,
        }

"""A node's share of a tree's budget.

The root's :class:`~rlmd.engine.budget.Ledger` is the tree's: it counts every model call
and sub-call of the tree, remote ones as their events stream back. A node runs its child
runs against a :class:`NodeLedger`: what this node's runs of the tree spent (counted here,
at once) plus what the rest of the tree spent (pushed by the root after every change, so
at most one event round trip old). Every model call checks it before it starts, exactly as
locally; when the root sees a limit crossed it pushes the exhaustion and the node's runs
stop at their next check.

The bound: a tree spends at most its limit plus the model calls in flight when the limit is
crossed (each run has at most one root call, or ``max_concurrent_subcalls`` sub-calls, in
flight), counting as in flight the calls a node starts before the root's push reaches it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlmd.engine.budget import Budget, BudgetExhausted, Ledger


@dataclass(frozen=True)
class Spend:
    """Tokens, USD and sub-calls (a slice of a tree's spend)."""

    tokens: int = 0
    usd: float = 0.0
    subcalls: int = 0

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.tokens + other.tokens, self.usd + other.usd, self.subcalls + other.subcalls
        )

    def __sub__(self, other: Spend) -> Spend:
        return Spend(
            self.tokens - other.tokens, self.usd - other.usd, self.subcalls - other.subcalls
        )


class NodeLedger(Ledger):
    """The tree's budget as one node sees it: its own spend plus the others' (see the module
    docstring). ``tokens``, ``usd`` and ``subcalls`` read as the sum; the engine's ``+=``
    adds to this node's own part.

    Args:
        budget: the tree's limits.
        reserve_s: the extraction reserve (as the root's ledger).
        elapsed_s: seconds the tree had run when this node joined it (so ``max_seconds``
            counts from the root's start).
    """

    def __init__(self, budget: Budget, reserve_s: float, elapsed_s: float) -> None:
        self.own = Spend()
        self.others = Spend()
        self.seq = -1
        super().__init__(budget, reserve_s)
        self.own = Spend()
        self.started = time.monotonic() - elapsed_s

    @property
    def tokens(self) -> int:
        return self.own.tokens + self.others.tokens

    @tokens.setter
    def tokens(self, value: int) -> None:
        self.own = Spend(value - self.others.tokens, self.own.usd, self.own.subcalls)

    @property
    def usd(self) -> float:
        return self.own.usd + self.others.usd

    @usd.setter
    def usd(self, value: float) -> None:
        self.own = Spend(self.own.tokens, value - self.others.usd, self.own.subcalls)

    @property
    def subcalls(self) -> int:
        return self.own.subcalls + self.others.subcalls

    @subcalls.setter
    def subcalls(self, value: int) -> None:
        self.own = Spend(self.own.tokens, self.own.usd, value - self.others.subcalls)

    def update(self, seq: int, others: Spend, exhausted: tuple[str, str] | None) -> None:
        """Take the root's push number ``seq`` (older pushes than the last are ignored):
        what the rest of the tree spent, and the tree's exhaustion if a limit ran out."""
        if seq > self.seq:
            self.seq, self.others = seq, others
        if exhausted is not None and self.exhausted is None:
            self.exhausted = BudgetExhausted(*exhausted)

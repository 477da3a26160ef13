"""A node's share of a tree's budget.

The root's :class:`~rlmd.engine.budget.Ledger` is the tree's: it counts every model call
and sub-call of the tree, remote ones as their events stream back. A node runs its child
runs against a :class:`NodeLedger`: what this node's runs of the tree spent (counted here,
at once) plus what the rest of the tree spent (pushed by the root after every change). Every
model call checks it before it starts, exactly as locally; when the root sees a limit
crossed it pushes the exhaustion and the node's runs stop at their next check.

Under a token, USD or sub-call limit a node's call also waits for the root's word
(:meth:`NodeLedger.admit`): its start event travels on the run's event stream, after the
run's earlier calls' finish events, and the root admits it only while its ledger, which then
holds every earlier call of that run, is under the limit. So however late the root's pushes
and replies arrive (a loaded machine, a slow network), a tree spends at most its limit plus
the calls admitted and in flight when the limit is crossed: at most one root call per live
run, or ``max_concurrent_subcalls`` sub-calls of one batch. The price is one event round
trip before each remote model call (milliseconds, against a model call's seconds). A child
run's start (``rlm_query``) is checked on the node only, against the last push.
"""

from __future__ import annotations

import asyncio
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
        self.waiting: dict[str, asyncio.Future[tuple[str, str] | None]] = {}

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
        what the rest of the tree spent, and the tree's exhaustion if a limit ran out (every
        call waiting for admission then ends with it)."""
        if seq > self.seq:
            self.seq, self.others = seq, others
        if exhausted is not None and self.exhausted is None:
            self.exhausted = BudgetExhausted(*exhausted)
        if self.exhausted is not None:
            for call_id in list(self.waiting):
                self.answer(call_id, (self.exhausted.status, str(self.exhausted)))

    async def admit(self, call_id: str, role: str) -> None:
        """Wait for the root's :meth:`answer` to the call ``call_id`` when the tree has a
        limit the root must hold (see :func:`needs_admission` and the module docstring).

        Raises:
            BudgetExhausted: the root refused the call (the tree's limit was reached), or
                the tree's exhaustion arrived while it waited.
        """
        if not needs_admission(self.budget, role):
            return
        if self.exhausted is not None:
            raise self.exhausted
        waiter = self.waiting[call_id] = asyncio.get_running_loop().create_future()
        try:
            refused = await waiter
        finally:
            self.waiting.pop(call_id, None)
        if refused is not None:
            if self.exhausted is None:
                self.exhausted = BudgetExhausted(*refused)
            raise self.exhausted

    def answer(self, call_id: str, refused: tuple[str, str] | None) -> None:
        """The root's word on the call ``call_id``: ``None`` admits it, ``(status, message)``
        refuses it. A word for a call nobody waits for (one that does not wait) is dropped."""
        waiter = self.waiting.get(call_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(refused)


def needs_admission(budget: Budget, role: str) -> bool:
    """Whether a remote model call of ``role`` waits for the root's admission: under a
    token or USD limit, and for sub-calls under a sub-call limit. The fallback
    (``extraction``) call is never checked, so never waits."""
    if role == "extraction":
        return False
    if budget.max_tokens is not None or budget.max_usd is not None:
        return True
    return role == "sub" and budget.max_subcalls is not None

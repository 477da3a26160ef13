"""Budgets: the limits of one run tree, and the ledger that spends them.

One :class:`Ledger` is shared by a root run and every child run it starts, so a child draws on
what its parent has left instead of getting a fresh budget. Limits are checked before every
model call and every sub-call, not only between iterations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import TypedDict

RUN_STATUSES = (
    "running",
    "completed",
    "max_iterations",
    "max_time",
    "max_tokens",
    "max_usd",
    "max_subcalls",
    "max_errors",
    "cancelled",
    "failed",
    "sandbox_failed",
    "interrupted",
)
"""Every status a run can end with. ``max_*`` name the budget that ended it; ``failed`` is an
error outside the model's control (model unavailable, sandbox dead); ``sandbox_failed``: the
kernel died for no limit's sake several cells in a row (an infrastructure fault, not the
model's: the run ends without an extracted answer); ``interrupted`` is set by the store for
a run whose process died, and by a cluster executor for a run whose node was lost."""


COUNT_FIELDS = {
    "max_iterations": 1,
    "max_depth": 1,  # the root run is depth 0: no loop would run
    "max_tokens": 1,
    "max_subcalls": 0,
    "max_consecutive_errors": 1,  # 0 would end the run after its first turn
}
""":class:`Budget`'s whole-number fields and the least value each takes; the others are
seconds or US dollars, which must be > 0."""

_SECONDS = ("max_seconds", "cell_timeout_s")


class BudgetError(ValueError):
    """A :class:`Budget` limit out of range. ``field`` is the field (``"max_usd"``),
    ``reason`` the rest of the message (``"must be a number > 0, got -1"``): each caller
    names the field as its user knows it (``f"--max-usd {exc.reason}"``), without
    rewriting the message. ``str()`` is ``"budget max_usd must be ..."``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"budget {field} {reason}")
        self.field = field
        self.reason = reason


class BudgetLimits(TypedDict):
    """:class:`Budget` as a dict (stored with every run, sent in task statuses)."""

    max_iterations: int
    max_depth: int
    max_seconds: float | None
    max_tokens: int | None
    max_usd: float | None
    max_subcalls: int | None
    max_consecutive_errors: int | None
    cell_timeout_s: float


@dataclass
class Budget:
    """Limits for a run tree. ``None`` means unlimited.

    Attributes:
        max_iterations: root-model turns per RLM loop (each child loop has the same cap).
        max_depth: RLM loops run at depths ``0 .. max_depth - 1``; ``rlm_query`` at depth
            ``max_depth - 1`` becomes a plain sub-call (the ``rlms`` reference's meaning).
        max_seconds: wall-clock seconds for the whole tree.
        max_tokens: input + output tokens over the whole tree.
        max_usd: US dollars over the whole tree, from the models' price tables.
        max_subcalls: sub-model calls plus child runs over the whole tree.
        max_consecutive_errors: iterations in a row whose cells all raised.
        cell_timeout_s: wall-clock seconds per REPL cell; the kernel restarts on timeout.

    Raises:
        BudgetError: (a ``ValueError``) a limit out of range, its field as data: a count
            below 1 (``max_iterations``, ``max_depth``, ``max_tokens``,
            ``max_consecutive_errors``) or below 0 (``max_subcalls``; 0 is a run without
            sub-calls or child runs), or not whole; ``max_seconds``, ``max_usd`` or
            ``cell_timeout_s`` not a finite number > 0 (the run would end before its first
            model call).
    """

    max_iterations: int = 10
    max_depth: int = 2
    max_seconds: float | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    max_subcalls: int | None = None
    max_consecutive_errors: int | None = 5
    cell_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            least = COUNT_FIELDS.get(f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BudgetError(f.name, f"must be a number, got {value!r}")
            if least is None:  # seconds or US dollars: 0 would end the run before it starts
                unit = " of seconds" if f.name in _SECONDS else ""
                if not (math.isfinite(value) and value > 0):  # NaN and inf refused too
                    raise BudgetError(f.name, f"must be a number{unit} > 0, got {value!r}")
                continue
            if not (math.isfinite(value) and value >= least):
                raise BudgetError(f.name, f"must be >= {least}, got {value!r}")
            if value % 1 != 0:  # a 2.5 from a TOML file would compare but mean nothing
                raise BudgetError(f.name, f"must be a whole number, got {value!r}")
            # 3.0 from a TOML file or JSON: an int, or range() in the loop raises TypeError
            setattr(self, f.name, int(value))

    def to_dict(self) -> BudgetLimits:
        return {
            "max_iterations": self.max_iterations,
            "max_depth": self.max_depth,
            "max_seconds": self.max_seconds,
            "max_tokens": self.max_tokens,
            "max_usd": self.max_usd,
            "max_subcalls": self.max_subcalls,
            "max_consecutive_errors": self.max_consecutive_errors,
            "cell_timeout_s": self.cell_timeout_s,
        }


class BudgetExhausted(Exception):
    """A limit was reached. ``status`` is the run status it ends with (``"max_tokens"``...)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class Ledger:
    """What a run tree has spent, checked against its :class:`Budget`.

    Token, USD and sub-call counts are updated by the engine after each call; ``exhausted``
    keeps the first limit that ran out so every run in the tree ends with the same reason.

    Args:
        budget: the limits.
        reserve_s: seconds of ``budget.max_seconds`` held back from the loop for the one
            fallback (extraction) call after a limit ends the run: the loop's wall clock runs
            out at ``max_seconds - reserve_s``, the extraction may use what is left of
            ``max_seconds``. 0 (the default) keeps nothing back.
    """

    def __init__(self, budget: Budget, reserve_s: float = 0.0) -> None:
        self.budget = budget
        self.reserve_s = max(0.0, reserve_s)
        self.started = time.monotonic()
        self.tokens = 0
        self.usd = 0.0
        self.subcalls = 0
        self.exhausted: BudgetExhausted | None = None

    def elapsed(self) -> float:
        """Seconds since the tree started."""
        return time.monotonic() - self.started

    def remaining_seconds(self, *, include_reserve: bool = False) -> float | None:
        """Seconds left on the loop's wall clock (``include_reserve``: on the whole budget,
        the extraction reserve included); ``None`` if unlimited; never negative."""
        if self.budget.max_seconds is None:
            return None
        reserve = 0.0 if include_reserve else self.reserve_s
        return max(0.0, self.budget.max_seconds - reserve - self.elapsed())

    def spend(self, tokens: int, usd: float) -> None:
        self.tokens += tokens
        self.usd += usd

    async def admit(self, call_id: str, role: str) -> None:
        """Wait until the model call ``call_id`` (role ``role``; its start event already
        emitted) may run. A local tree's ledger holds every finished call, so :meth:`check`
        said it all; a cluster node's ledger asks the root
        (:class:`~rlmd.cluster.ledger.NodeLedger`).

        Raises:
            BudgetExhausted: the tree's limit was reached before this call was admitted.
        """

    def check(self, *, subcall: bool = False) -> None:
        """Raise :class:`BudgetExhausted` if a shared limit is reached.

        Args:
            subcall: also check ``max_subcalls`` (one more sub-call must fit).
        """
        if self.exhausted is not None:
            raise self.exhausted
        b = self.budget
        problem: tuple[str, str] | None = None
        if b.max_seconds is not None and self.elapsed() >= b.max_seconds - self.reserve_s:
            kept = f" ({self.reserve_s:g} s kept for the fallback answer)" if self.reserve_s else ""
            problem = ("max_time", f"wall-clock budget of {b.max_seconds:g} s used up{kept}")
        elif b.max_tokens is not None and self.tokens >= b.max_tokens:
            problem = (
                "max_tokens",
                f"token budget used up ({self.tokens:,} of {b.max_tokens:,} tokens)",
            )
        elif b.max_usd is not None and self.usd >= b.max_usd:
            problem = ("max_usd", f"spend budget used up (${self.usd:.4f} of ${b.max_usd:.4f})")
        elif subcall and b.max_subcalls is not None and self.subcalls >= b.max_subcalls:
            problem = (
                "max_subcalls",
                f"sub-call budget used up ({self.subcalls} of {b.max_subcalls})",
            )
        if problem:
            self.exhausted = BudgetExhausted(*problem)
            raise self.exhausted

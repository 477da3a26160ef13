"""One spare kernel (a process, a container) made ahead for the next sandbox like the last.

Making a kernel costs tens of milliseconds (a process) to a second (a container), and every
run and child run makes one. So once a spec has been started twice, a :class:`SparePool`
keeps one spare for it, made in a background thread; the next :meth:`SparePool.take` gets it
and a new one is made (or, with ``refill_later``, once :meth:`SparePool.refill_due` says the
spare's first cell is done: a new spare's start-up would otherwise compete with that cell).
One spare in all: a spare for another spec is dropped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Hashable)
T = TypeVar("T")


class SparePool(Generic[S, T]):
    """At most one spare ``T`` for the last spec ``S`` started twice. Thread-safe; not tied
    to an event loop; after a fork the child's pool is empty and its ``close`` leaves the
    parent's spares alone.

    Args:
        make: makes a spare for a spec (in a background thread).
        discard: frees a spare nobody will take.
        errors: what ``make`` raises when it cannot make one (logged, no spare then).
        what: the spare's name in logs and thread names (``"kernel"``, ``"container"``).
        join_s: how long :meth:`take` and :meth:`close` wait for a spare being made.
        alive: whether a spare is still usable when taken (default: always).
        forget_item: in a forked child, drop the child's copies of a parent's spare.
    """

    def __init__(
        self,
        make: Callable[[S], T],
        discard: Callable[[T], None],
        *,
        errors: type[BaseException] | tuple[type[BaseException], ...],
        what: str,
        join_s: float,
        alive: Callable[[T], bool] | None = None,
        forget_item: Callable[[T], None] | None = None,
    ):
        self._make = make
        self._discard = discard
        self._errors = errors
        self._what = what
        self._join_s = join_s
        self._alive = alive
        self._forget_item = forget_item
        self._lock = threading.Lock()
        self._ready: dict[S, T] = {}
        self._launching: dict[S, threading.Thread] = {}
        self._starts: Counter[S] = Counter()
        self._due: set[S] = set()  # refills take() left to refill_due()
        self._closed = False
        self._pid = os.getpid()

    def take(self, spec: S, *, refill_later: bool = False) -> T | None:
        """The spare for ``spec`` (waiting up to ``join_s`` while one is being made), or
        ``None``; from the second start of ``spec`` on, a new spare is made in the
        background: at once, or with ``refill_later`` (and a spare handed out) at the next
        :meth:`refill_due` or :meth:`take` of ``spec``, whichever comes first."""
        with self._lock:
            launching = self._launching.get(spec)
        if launching is not None:
            launching.join(self._join_s)
        with self._lock:
            self._starts[spec] += 1
            spare = self._ready.pop(spec, None)
            if self._starts[spec] >= 2 and not self._closed and spec not in self._launching:
                if refill_later and spare is not None and spec not in self._due:
                    self._due.add(spec)
                else:
                    self._due.discard(spec)
                    self._launch(spec)
        if spare is not None and self._alive is not None and not self._alive(spare):
            self._discard(spare)  # died while waiting
            spare = None
        return spare

    def refill_due(self) -> None:
        """Start making the spares :meth:`take` left for later (``refill_later``); cheap
        when there are none (call it after every cell)."""
        if not self._due:  # read without the lock: a refill seen late is made next time
            return
        with self._lock:
            due, self._due = self._due, set()
            for spec in due:
                if not self._closed and spec not in self._ready and spec not in self._launching:
                    self._launch(spec)

    def prepare(self, spec: S) -> None:
        """Start making a spare for ``spec`` now, in the background, unless one is ready or
        being made (the next :meth:`take` of ``spec`` gets it; it counts as no start)."""
        with self._lock:
            if self._closed or spec in self._ready or spec in self._launching:
                return
            self._launch(spec)

    def _launch(self, spec: S) -> None:
        """Make a spare for ``spec`` in a new thread (the lock held)."""
        thread = threading.Thread(
            target=self._refill, args=(spec,), name=f"rlmd-spare-{self._what}", daemon=True
        )
        # Started before the lock is let go: a thread other callers can see in _launching
        # is always started, so their join() never raises. (The refill takes the lock only
        # after making the spare.)
        thread.start()
        self._launching[spec] = thread

    def _refill(self, spec: S) -> None:
        try:
            spare: T | None = self._make(spec)
        except self._errors as exc:
            log.debug("could not make a spare %s: %s", self._what, exc)
            spare = None
        unused: list[T] = []
        with self._lock:
            del self._launching[spec]
            if spare is not None and not self._closed and spec not in self._ready:
                # One spare in all: one for another spec (PATH changed since) goes.
                unused, self._ready = list(self._ready.values()), {spec: spare}
            elif spare is not None:
                unused = [spare]
        for item in unused:
            self._discard(item)

    def settle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the spares being made (a benchmark, between timed
        runs, so that one run's background refill does not land in the next); ``True``
        when none is being made any more."""
        with self._lock:
            launching = list(self._launching.values())
        for thread in launching:
            thread.join(timeout_s)
        return not any(thread.is_alive() for thread in launching)

    def forget(self) -> None:
        """In a forked child: the spares are the parent's; forget them and start afresh."""
        self._lock = threading.Lock()
        if self._forget_item is not None:
            for spare in self._ready.values():
                self._forget_item(spare)
        self._ready, self._launching, self._starts, self._due = {}, {}, Counter(), set()
        self._pid = os.getpid()

    def close(self, *, final: bool = False) -> None:
        """Free the spares (``final``: and make no more)."""
        if os.getpid() != self._pid:  # a forked child: the spares are its parent's
            return
        with self._lock:
            self._closed = self._closed or final
            self._due.clear()
            launching = list(self._launching.values())
        for thread in launching:
            thread.join(self._join_s)
        with self._lock:
            spares = list(self._ready.values())
            self._ready.clear()
        for spare in spares:
            self._discard(spare)

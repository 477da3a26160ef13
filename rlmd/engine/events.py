"""Run events: the engine emits one for every step; the store, the CLI and the daemon listen.

Every event is small and self-contained so that appending it to the store is one short
transaction: a crash loses at most the step in flight.

Event kinds and their ``data``:

``run.started`` (``node_id`` = None)
    ``question``, ``context`` (metadata dict), ``models`` (``{"root": spec, "sub": spec}``
    public dicts), ``sandbox`` (``{"kind", "isolation"}``), ``budget`` (limits dict),
    ``parent_run_id``, ``parent_node_id`` (the cell that started a child run, else None),
    ``root_run_id``, ``workspace`` (project folder or None), ``pid`` (the recording process).
``sandbox.started``
    ``sandbox`` (``{"kind", "isolation"}``: the isolation the run really got).
``iteration.started`` (``node_id`` = the iteration node)
    ``index`` (0-based).
``model_call.started`` / ``model_call.finished`` (``node_id`` = the call node; ``parent_id`` =
    the iteration for root calls, the cell for sub-calls)
    ``role`` (``"root" | "sub" | "extraction" | "compaction"``), ``model`` (registry name),
    ``messages`` (only the messages new since this conversation's previous call, so the
    store grows linearly; a sub-call's whole prompt), ``prompt_tokens_total``.
    On finish also: ``response``, ``input_tokens``, ``output_tokens``, ``latency_s``,
    ``cost_usd``, ``finish_reason``, ``error`` (None or the message).
``cell.started`` / ``cell.finished`` (``node_id`` = the cell node; ``parent_id`` = iteration)
    ``index`` (block number in the reply), ``code``. On finish also the full
    :class:`~rlmd.sandbox.base.CellResult` fields.
``compaction`` (``node_id`` = a node under the iteration)
    ``summarised_messages`` (count), ``summary``.
``run.finished``
    ``status`` (see :data:`rlmd.engine.budget.RUN_STATUSES`), ``answer``, ``answer_source``
    (``"final" | "final_var" | "prose" | "extraction" | None``), ``usage`` (tree totals),
    ``iterations``, ``error``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def new_id() -> str:
    """A sortable unique id: 12 hex digits of microseconds since the epoch + 8 random."""
    return f"{int(time.time() * 1e6):012x}"[-12:] + uuid.uuid4().hex[:8]


@dataclass
class Event:
    """One step of a run. ``ts`` is seconds since the epoch."""

    kind: str
    run_id: str
    depth: int
    node_id: str | None = None
    parent_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "depth": self.depth,
            "node_id": self.node_id,
            "parent_id": self.parent_id,
            "data": self.data,
            "ts": self.ts,
        }


EventSink = Callable[[Event], None]
"""A listener. Called synchronously in the engine's event loop; must not block for long."""


class EventBus:
    """Fans events out to listeners; a failing listener is reported once, never kills a run."""

    def __init__(self, *sinks: EventSink) -> None:
        self._sinks: list[EventSink] = list(sinks)
        self.failures: list[str] = []

    def subscribe(self, sink: EventSink) -> None:
        self._sinks.append(sink)

    def emit(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception as exc:  # a broken listener must not end the run
                self.failures.append(f"{getattr(sink, '__qualname__', sink)}: {exc!r}")

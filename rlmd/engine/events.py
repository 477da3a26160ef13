"""Run events: the engine emits one typed event for every step; the store, the CLI and the
daemon listen and match on the event's class.

Every event is small and self-contained so that appending it to the store is one short
transaction: a crash loses at most the step in flight. Every event has ``run_id``, ``depth``
(of the run), ``node_id``, ``parent_id`` and ``ts`` (seconds since the epoch);
:meth:`Event.to_dict` gives the JSON the store records and the daemon sends
(``{"kind", "run_id", "depth", "node_id", "parent_id", "data", "ts"}``, see
``docs/protocol.md``). ``data`` holds the class's own fields, in their declared order:

:class:`RunStarted` ``run.started`` (``node_id`` None), :class:`SandboxStarted`
``sandbox.started``, :class:`IterationStarted` ``iteration.started`` (``node_id`` = the
iteration), :class:`ModelCallStarted` / :class:`ModelCallFinished` ``model_call.*``
(``node_id`` = the call; ``parent_id`` = the iteration for root calls, the cell for sub-calls),
:class:`CellStarted` / :class:`CellFinished` ``cell.*`` (``parent_id`` = the iteration),
:class:`Compaction` ``compaction`` (a node under the iteration), :class:`RunFinished`
``run.finished``. A sub-call is a :class:`ModelCallStarted` with ``role="sub"``; a child run
is a :class:`RunStarted` with a ``parent_run_id``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from rlmd.context import ContextMeta
from rlmd.engine.budget import BudgetLimits
from rlmd.engine.usage import UsageSummary
from rlmd.sandbox.base import CellResult, VarInfo


def new_id() -> str:
    """A sortable unique id: 12 hex digits of microseconds since the epoch + 8 random."""
    # 4 random bytes: uuid4() drew 16 and built a UUID for the 8 digits kept
    return f"{int(time.time() * 1e6):012x}"[-12:] + os.urandom(4).hex()


class SandboxInfo(TypedDict):
    """The sandbox a run used: backend name and the isolation it really got (``None`` until
    the sandbox started)."""

    kind: str
    isolation: dict[str, Any] | None


_HEADER = ("run_id", "depth", "node_id", "parent_id", "ts")


@dataclass(frozen=True, kw_only=True)
class Event:
    """One step of a run (the base class: the engine emits only its subclasses).

    Attributes:
        run_id: the run (trajectory) id.
        depth: the run's depth (0 for the root run).
        node_id: the step's node in the trajectory tree, if it is one.
        parent_id: the node it hangs under.
        ts: seconds since the epoch.
    """

    kind: ClassVar[str] = ""
    _wire_names: ClassVar[dict[str, str]] = {}
    """Field name → ``data`` key where they differ."""

    run_id: str
    depth: int
    node_id: str | None = None
    parent_id: str | None = None
    ts: float = field(default_factory=time.time)

    @property
    def data(self) -> dict[str, Any]:
        """The event's own fields as the JSON-able ``data`` dict of :meth:`to_dict`."""
        return {key: getattr(self, name) for name, key in _data_fields(type(self))}

    def to_dict(self) -> dict[str, Any]:
        """The stored and wire form (see the module docstring)."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "depth": self.depth,
            "node_id": self.node_id,
            "parent_id": self.parent_id,
            "data": self.data,
            "ts": self.ts,
        }


_DATA_FIELDS: dict[type[Event], tuple[tuple[str, str], ...]] = {}


def _data_fields(cls: type[Event]) -> tuple[tuple[str, str], ...]:
    """(field name, ``data`` key) of ``cls``'s own fields, computed once per class
    (``dataclasses.fields`` at every event was a tenth of the store's time per event)."""
    found = _DATA_FIELDS.get(cls)
    if found is None:
        found = tuple(
            (f.name, cls._wire_names.get(f.name, f.name))
            for f in dataclasses.fields(cls)
            if f.name not in _HEADER
        )
        _DATA_FIELDS[cls] = found
    return found


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    """A run started (``node_id`` None).

    Attributes:
        question: the run's question.
        context: the context metadata the root model saw (see
            :meth:`rlmd.context.Context.metadata`).
        models: ``{"root": spec, "sub": spec}`` public spec dicts (``None``: never resolved).
        sandbox: backend and (not yet known) isolation.
        budget: the tree's limits (:meth:`rlmd.engine.budget.Budget.to_dict`).
        parent_run_id / parent_node_id: the run and cell that started this child run.
        root_run_id: the tree's root run.
        workspace: the project folder, or ``None``.
        pid: the recording process.
        reached_engine: ``False`` for a task that ended before the engine started it (see
            :func:`never_ran`); its ``data`` then has only the task's own keys.
    """

    kind: ClassVar[str] = "run.started"

    question: str = ""
    context: ContextMeta | None = None
    models: dict[str, dict[str, Any]] | None = None
    sandbox: SandboxInfo | None = None
    budget: BudgetLimits | None = None
    parent_run_id: str | None = None
    parent_node_id: str | None = None
    root_run_id: str | None = None
    workspace: str | None = None
    pid: int | None = None
    reached_engine: bool = field(default=True, repr=False)

    @property
    def is_child_run(self) -> bool:
        """Started by ``rlm_query`` in another run's cell."""
        return self.parent_run_id is not None

    @property
    def data(self) -> dict[str, Any]:
        if not self.reached_engine:
            return {
                "question": self.question,
                "workspace": self.workspace,
                "pid": self.pid,
                "budget": self.budget,
                "sandbox": self.sandbox,
                "models": self.models,
                "root_run_id": self.root_run_id,
            }
        data = super().data
        del data["reached_engine"]
        return data


@dataclass(frozen=True, kw_only=True)
class SandboxStarted(Event):
    """The run's REPL is ready, with the isolation it really got."""

    kind: ClassVar[str] = "sandbox.started"

    sandbox: SandboxInfo | None = None


@dataclass(frozen=True, kw_only=True)
class IterationStarted(Event):
    """A root-model turn began (``node_id`` = the iteration node). ``index`` is 0-based."""

    kind: ClassVar[str] = "iteration.started"

    index: int = 0


@dataclass(frozen=True, kw_only=True)
class ModelCallStarted(Event):
    """A model call began.

    Attributes:
        role: ``"root" | "sub" | "extraction" | "compaction"``.
        model: registry name.
        messages: only the messages new since this conversation's previous call (so the
            store grows linearly); a sub-call's whole prompt.
        call_depth: the depth the call is made at (``data["depth"]``: a sub-call's is the
            run's depth + 1).
        sampling: this call's own sampling arguments (a root turn re-sampled because it
            repeated a cell, see :func:`rlmd.engine.feedback.resample_sampling`); ``None``,
            and then absent from ``data``, for a call with the model's own sampling.
    """

    kind: ClassVar[str] = "model_call.started"
    _wire_names: ClassVar[dict[str, str]] = {"call_depth": "depth"}

    role: str = ""
    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    call_depth: int = 0
    sampling: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        data = super().data
        if self.sampling is None:
            del data["sampling"]
        return data


@dataclass(frozen=True, kw_only=True)
class ModelCallFinished(Event):
    """A model call ended: its reply and cost, or (``error`` set) why it failed, in which
    case ``data`` has only ``role``, ``model`` and ``error``.

    Attributes:
        response: the reply text.
        input_tokens / output_tokens: tokens billed.
        latency_s: wall-clock seconds.
        cost_usd: US dollars, from the model's price table.
        finish_reason / stop_sequence: as the provider reported them.
        error: ``None``, or the failure message.
    """

    kind: ClassVar[str] = "model_call.finished"

    role: str = ""
    model: str = ""
    response: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    finish_reason: str | None = None
    stop_sequence: str | None = None
    error: str | None = None

    @property
    def data(self) -> dict[str, Any]:
        if self.error is not None:
            return {"role": self.role, "model": self.model, "error": self.error}
        return super().data


@dataclass(frozen=True, kw_only=True)
class CellStarted(Event):
    """A REPL cell began (``index`` = its block number in the reply)."""

    kind: ClassVar[str] = "cell.started"

    index: int = 0
    code: str = ""


@dataclass(frozen=True, kw_only=True)
class CellFinished(Event):
    """A REPL cell ended: ``index``, ``code`` and the :class:`~rlmd.sandbox.base.CellResult`
    fields (``variables`` as dicts in ``data``)."""

    kind: ClassVar[str] = "cell.finished"

    index: int = 0
    code: str = ""
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    final: str | None = None
    variables: list[VarInfo] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    timed_out: bool = False
    kernel_restarted: bool = False
    lost_variables: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, result: CellResult, *, index: int, code: str, **header: Any) -> CellFinished:
        """The event for ``result`` of cell ``code``."""
        values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        return cls(index=index, code=code, **values, **header)

    @property
    def data(self) -> dict[str, Any]:
        data = super().data
        data["variables"] = [v.__dict__ for v in self.variables]
        return data


@dataclass(frozen=True, kw_only=True)
class Compaction(Event):
    """Root-conversation messages were replaced in the model's view (a node under the
    iteration); the store keeps them as they were.

    Attributes:
        summarised_messages: how many messages were replaced.
        summary: what the model sees instead (``reason`` ``"window"``: the summary of older
            turns; ``"failed_turn"``: the user message a failed turn was folded into).
        reason: ``"window"`` (the conversation neared the model's window) or
            ``"failed_turn"`` (a turn that raised or repeated a cell, see
            :func:`rlmd.engine.feedback.fold_turn`).
    """

    kind: ClassVar[str] = "compaction"

    summarised_messages: int = 0
    summary: str = ""
    reason: str = "window"


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    """A run ended.

    Attributes:
        status: see :data:`rlmd.engine.budget.RUN_STATUSES`.
        answer / answer_source: the answer and where it came from (``"final" | "final_var" |
            "prose" | "extraction" | None``).
        usage: the tree's usage (:meth:`rlmd.engine.usage.Usage.to_dict`), ``None`` for a
            run that never started.
        iterations: root-model turns.
        error: why it failed or stopped, if it did.
    """

    kind: ClassVar[str] = "run.finished"

    status: str = "completed"
    answer: str | None = None
    answer_source: str | None = None
    usage: UsageSummary | None = None
    iterations: int = 0
    error: str | None = None


EVENT_TYPES: tuple[type[Event], ...] = (
    RunStarted,
    SandboxStarted,
    IterationStarted,
    ModelCallStarted,
    ModelCallFinished,
    CellStarted,
    CellFinished,
    Compaction,
    RunFinished,
)
"""Every event class the engine emits."""

_BY_KIND: dict[str, type[Event]] = {t.kind: t for t in EVENT_TYPES}


def type_of(kind: object) -> type[Event] | None:
    """The event class of a wire or stored ``kind`` string; ``None`` for an unknown kind."""
    return _BY_KIND.get(kind) if isinstance(kind, str) else None


def from_dict(item: dict[str, Any]) -> Event | None:
    """The typed event of a stored or wire dict (:meth:`Event.to_dict`'s form); ``None``
    for a kind this version does not know. Missing ``data`` keys take the field defaults;
    unknown ones are ignored.

    Raises:
        KeyError / TypeError: ``item`` lacks ``run_id`` or is not a dict.
    """
    cls = type_of(item.get("kind"))
    if cls is None:
        return None
    data = item.get("data") or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = cls._wire_names.get(f.name, f.name)
        if f.name not in _HEADER and key in data:
            values[f.name] = data[key]
    if cls is CellFinished and "variables" in values:
        values["variables"] = [
            VarInfo(**v) if isinstance(v, dict) else v for v in values["variables"] or []
        ]
    if cls is RunStarted and "context" not in data and "models" in data and not data["models"]:
        values["reached_engine"] = False
    return cls(
        run_id=item["run_id"],
        depth=int(item.get("depth") or 0),
        node_id=item.get("node_id"),
        parent_id=item.get("parent_id"),
        ts=float(item.get("ts") or time.time()),
        **values,
    )


def never_ran(
    run_id: str,
    *,
    question: str,
    sandbox: str,
    budget: BudgetLimits,
    workspace: str | None,
    status: str,
    error: str,
) -> tuple[RunStarted, RunFinished]:
    """The two events that record a run which never reached the engine (a daemon task
    cancelled in line, or whose sandbox could not start): it shows in the run list with
    ``status`` and ``error``, no models and no usage."""
    started = RunStarted(
        run_id=run_id,
        depth=0,
        question=question,
        workspace=workspace,
        pid=os.getpid(),
        budget=budget,
        sandbox={"kind": sandbox, "isolation": None},
        models=None,
        root_run_id=run_id,
        reached_engine=False,
    )
    finished = RunFinished(
        run_id=run_id,
        depth=0,
        status=status,
        answer=None,
        answer_source=None,
        usage=None,
        iterations=0,
        error=error,
    )
    return started, finished


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

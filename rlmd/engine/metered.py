"""The metered model call: every model call of a run goes through :class:`Meter`, which checks
the tree's shared budget first, bounds the call by the wall clock left, records its usage and
emits its start and finish events. Also :class:`Runtime`, what every run of one tree shares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlmd.engine.budget import BudgetExhausted, Ledger
from rlmd.engine.config import RunConfig
from rlmd.engine.events import Event, EventBus, ModelCallFinished, ModelCallStarted, new_id
from rlmd.engine.usage import Usage
from rlmd.models.base import Completion, Message, Model, ModelError
from rlmd.sandbox.base import Sandbox

if TYPE_CHECKING:
    from rlmd.engine.executor import Executor


@dataclass
class Runtime:
    """What every run of one tree shares: config, models, sandbox factory, events, budget,
    and where child runs and batches run (its :class:`~rlmd.engine.executor.Executor`)."""

    config: RunConfig
    get_model: Callable[[str], Model]
    make_sandbox: Callable[[], Sandbox]
    bus: EventBus
    ledger: Ledger
    executor: Executor


class Meter:
    """One run's model calls and events: the run's identity, usage and the tree's ledger.

    Args:
        rt: the tree's runtime.
        run_id: the run the events belong to.
        depth: the run's depth.
        usage: the run's usage (chained to its ancestors').
    """

    def __init__(self, rt: Runtime, run_id: str, depth: int, usage: Usage) -> None:
        self.rt = rt
        self.run_id = run_id
        self.depth = depth
        self.usage = usage

    def emit(
        self,
        event_type: type[Event],
        node_id: str | None = None,
        parent_id: str | None = None,
        **fields: Any,
    ) -> None:
        """Emit an ``event_type`` event of this run with ``fields``."""
        self.rt.bus.emit(
            event_type(
                run_id=self.run_id,
                depth=self.depth,
                node_id=node_id,
                parent_id=parent_id,
                **fields,
            )
        )

    async def call(
        self,
        model: Model,
        messages: list[Message],
        parent_node: str | None,
        *,
        role: str,
        record: list[Message] | None = None,
        depth: int | None = None,
        check: bool = True,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        timeout_s: float | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """Call ``model`` with budget checks, usage accounting and events.

        Args:
            model: the model to call.
            messages: the whole prompt.
            parent_node: the node the call hangs under (iteration or cell).
            role: ``"root" | "sub" | "extraction" | "compaction"``.
            record: the messages to put in the start event (default: all of them).
            depth: the depth the call is made at (default: the run's).
            check: check the shared budget first and bound the call by the loop's wall
                clock; ``False`` for the extraction call, which passes ``timeout_s``.
            max_tokens: output cap, tokens.
            stop: stop strings for the provider (see :meth:`Model.complete`).
            timeout_s: wall-clock bound in seconds when ``check`` is ``False``.
            sampling: sampling arguments for this call only (see :meth:`Model.complete`),
                recorded in the start event.

        Returns:
            The :class:`~rlmd.models.base.Completion`.

        Raises:
            BudgetExhausted: a shared limit is reached (checked before the call), or the
                wall clock ran out during it.
            ModelError: the call failed after retries.
        """
        ledger = self.rt.ledger
        max_seconds = self.rt.config.budget.max_seconds
        if check:
            ledger.check(subcall=role == "sub")
        depth = self.depth if depth is None else depth
        node = new_id()
        self.emit(
            ModelCallStarted,
            node,
            parent_node,
            role=role,
            model=model.name,
            messages=messages if record is None else record,
            call_depth=depth,
            sampling=sampling,
        )
        timeout = ledger.remaining_seconds() if check else timeout_s
        try:
            if check:  # a cluster node waits for the root's word here (rlmd.cluster.ledger)
                await ledger.admit(node, role)
                timeout = ledger.remaining_seconds()
            if timeout is not None and timeout <= 0:
                raise BudgetExhausted("max_time", f"wall-clock budget of {max_seconds:g} s used up")
            try:
                # A timeout cancels the call; a streamed request then closes its connection
                # and a llama.cpp server stops generating (rlmd.models.openai).
                c = await asyncio.wait_for(
                    model.complete(messages, max_tokens=max_tokens, stop=stop, sampling=sampling),
                    timeout,
                )
            except TimeoutError:
                why = (
                    f"wall-clock budget of {max_seconds:g} s used up during a model call"
                    if check
                    else f"no reply within the {timeout:g} s this call was given"
                )
                raise BudgetExhausted("max_time", why) from None
        except (ModelError, BudgetExhausted) as exc:
            self.emit(
                ModelCallFinished, node, parent_node, role=role, model=model.name, error=str(exc)
            )
            if isinstance(exc, BudgetExhausted):
                ledger.exhausted = ledger.exhausted or exc
            raise
        ledger.spend(c.input_tokens + c.output_tokens, c.cost_usd)
        if role == "sub":
            ledger.subcalls += 1
        self.usage.record(model.name, depth, c.input_tokens, c.output_tokens, c.cost_usd)
        self.emit(
            ModelCallFinished,
            node,
            parent_node,
            role=role,
            model=model.name,
            response=c.text,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            latency_s=c.latency_s,
            cost_usd=c.cost_usd,
            finish_reason=c.finish_reason,
            stop_sequence=c.stop_sequence,
            error=None,
        )
        return c

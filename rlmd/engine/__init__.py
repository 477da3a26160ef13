"""The RLM engine: run a question over a context with a root model, sub-calls and child runs.

Public surface: :func:`run_task` (async), :class:`RunConfig`, :class:`RunResult`,
:class:`Budget`, :class:`Event`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlmd.engine.budget import RUN_STATUSES, Budget, BudgetExhausted, Ledger
from rlmd.engine.events import Event, EventBus, EventSink
from rlmd.engine.loop import RLMRun, RunConfig, RunResult, Runtime
from rlmd.models.base import Model
from rlmd.sandbox.base import Sandbox
from rlmd.workspace.context import Context, load_context

__all__ = [
    "RUN_STATUSES",
    "Budget",
    "BudgetExhausted",
    "Event",
    "EventSink",
    "RunConfig",
    "RunResult",
    "run_task",
]


async def run_task(
    question: str,
    context: Any,
    config: RunConfig,
    *,
    get_model: Callable[[str], Model],
    sinks: tuple[EventSink, ...] = (),
    make_sandbox: Callable[[], Sandbox] | None = None,
    sandbox: Sandbox | None = None,
    run_id: str | None = None,
) -> RunResult:
    """Answer ``question`` about ``context`` with a recursive, code-executing loop.

    Args:
        question: the user's question (shown to the root model in full).
        context: a :class:`~rlmd.workspace.context.Context`, or anything
            :func:`~rlmd.workspace.context.load_context` takes (str, list, dict, Path).
        config: models, sandbox, budgets and tools.
        get_model: registry lookup, name → :class:`~rlmd.models.base.Model`
            (``KeyError`` for an unknown name).
        sinks: event listeners (the store's ``record``, a progress display...).
        make_sandbox: factory for each run's sandbox; defaults to ``config.sandbox``.
        sandbox: an already started-or-not sandbox to use for the root run (a workspace's
            warm REPL); it is not closed at the end. Child runs always get fresh ones.
        run_id: the root run's id (default: a new :func:`~rlmd.engine.events.new_id`); the
            daemon picks it up front so a queued task has its id before it starts.

    Returns:
        The root :class:`RunResult`; its usage covers the whole tree.

    Raises:
        ValueError: a tool is named like a reserved REPL name.
        KeyError: the root or sub model name is unknown.
        asyncio.CancelledError: the task was cancelled (the run is recorded as cancelled).
    """
    config.validate_tools()
    if make_sandbox is None:
        from rlmd.sandbox import create_sandbox

        def make_sandbox() -> Sandbox:
            return create_sandbox(config.sandbox, **config.sandbox_options)

    ctx = context if isinstance(context, Context) else load_context(context)
    ledger = Ledger(config.budget, reserve_s=config.extraction_reserve_s())
    rt = Runtime(config, get_model, make_sandbox, EventBus(*sinks), ledger)
    return await RLMRun(rt, question, ctx, sandbox=sandbox, run_id=run_id).run()

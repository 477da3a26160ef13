"""The RLM engine: run a question over a context with a root model, sub-calls and child runs.

Public surface: :func:`run_task` (async), :class:`RunConfig`, :class:`RunResult`,
:class:`Budget`, the typed events of :mod:`rlmd.engine.events`, :func:`prepare_sandbox` and
the executor seam (:class:`Executor`, :class:`LocalExecutor`, :class:`ChildRequest`;
``executor.py``).

Layout: ``loop.py`` the loop itself; ``metered.py`` the metered model call and what a tree
shares; ``host.py`` what REPL code asks of the host; ``feedback.py`` the after-cell rules;
``fallbacks.py`` extraction and compaction; ``config.py``, ``budget.py``, ``usage.py``,
``events.py``, ``prompts.py``, ``parsing.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use (see __getattr__)
    from rlmd.engine.budget import RUN_STATUSES, Budget, BudgetError, BudgetExhausted
    from rlmd.engine.config import RunConfig, RunResult
    from rlmd.engine.events import Event, EventSink
    from rlmd.engine.executor import ChildStarter, Executor, LocalExecutor
    from rlmd.engine.host import ChildRequest
    from rlmd.engine.loop import prepare_sandbox
    from rlmd.models.base import Model
    from rlmd.sandbox.base import Sandbox

__all__ = [
    "RUN_STATUSES",
    "Budget",
    "BudgetError",
    "BudgetExhausted",
    "ChildRequest",
    "ChildStarter",
    "Event",
    "EventSink",
    "Executor",
    "LocalExecutor",
    "RunConfig",
    "RunResult",
    "prepare_sandbox",
    "run_task",
]

_LAZY = {
    "RUN_STATUSES": "budget",
    "Budget": "budget",
    "BudgetError": "budget",
    "BudgetExhausted": "budget",
    "RunConfig": "config",
    "RunResult": "config",
    "Event": "events",
    "EventSink": "events",
    "ChildStarter": "executor",
    "Executor": "executor",
    "LocalExecutor": "executor",
    "ChildRequest": "host",
    "prepare_sandbox": "loop",
}
"""Where each public name lives. They are imported when first used, not with the package:
``rlmd.config`` needs only the run config and budget, and ``rlmd run`` imports it (to start
the run's kernel) while the codebase is read, before the loop, events and asyncio load."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlmd.engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"rlmd.engine.{module}"), name)
    globals()[name] = value
    return value


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
    start_child: ChildStarter | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Answer ``question`` about ``context`` with a recursive, code-executing loop.

    Args:
        question: the user's question (shown to the root model in full).
        context: a :class:`~rlmd.context.Context`, or anything
            :func:`~rlmd.context.load_context` takes (str, list, dict, Path; a path is
            read in a worker thread, or a :class:`~rlmd.context.PendingLoad` already being
            read: meanwhile the run's own REPL, when ``sandbox`` is ``None``, starts).
        config: models, sandbox, budgets and tools.
        get_model: registry lookup, name → :class:`~rlmd.models.base.Model`
            (``KeyError`` for an unknown name).
        sinks: event listeners (the store's ``record``, a progress display...).
        make_sandbox: factory for each run's sandbox; defaults to ``config.sandbox``.
        sandbox: the root run's REPL, prepared by its owner (started, ``context`` bound:
            a workspace's warm REPL, or see :func:`prepare_sandbox`); the run only attaches
            its host-call handler and tools, and does not close it. ``None``: a fresh one
            from ``make_sandbox``, closed at the end. Child runs always get fresh ones.
        run_id: the root run's id (default: a new :func:`~rlmd.engine.events.new_id`); the
            daemon picks it up front so a queued task has its id before it starts.
        start_child: how child runs (``rlm_query``) start (a plain function; batches stay
            local); ignored when ``executor`` is given.
        executor: where child runs and batches run (:class:`LocalExecutor`, the default:
            in this event loop; :class:`rlmd.cluster.RayExecutor`: on a Ray cluster).

    Returns:
        The root :class:`RunResult`; its usage covers the whole tree.

    Raises:
        ValueError: a tool is named like a reserved REPL name.
        KeyError: the root or sub model name is unknown.
        asyncio.CancelledError: the task was cancelled (the run is recorded as cancelled).
    """
    from pathlib import Path

    from rlmd.context import Context, PendingLoad, load_context_async
    from rlmd.engine.budget import Ledger
    from rlmd.engine.events import EventBus
    from rlmd.engine.executor import LocalExecutor, StarterExecutor
    from rlmd.engine.loop import RLMRun, start_sandbox
    from rlmd.engine.metered import Runtime

    config.validate_tools()
    if make_sandbox is None:
        from rlmd.sandbox import create_sandbox

        def make_sandbox() -> Sandbox:
            return create_sandbox(config.sandbox, **config.sandbox_options)

    # Off the event loop: a codebase read blocks nothing and a SIGTERM cancels it at once.
    # Meanwhile the run's own REPL starts (its kernel's launch and hello), so that the
    # codebase goes to it as soon as it is read.
    # A PendingLoad's spool (its files written on into the REPL's folder as they are
    # read) serves only that REPL; anywhere else load_context_async discards it.
    starting = None
    if sandbox is None and isinstance(context, PendingLoad | Path):
        spool = context.spool if isinstance(context, PendingLoad) else None
        starting = start_sandbox(make_sandbox(), spool)
    try:
        ctx = (
            context
            if isinstance(context, Context)
            else await load_context_async(context, keep_spool=starting is not None)
        )
        ledger = Ledger(config.budget, reserve_s=config.extraction_reserve_s())
        if executor is None:
            executor = StarterExecutor(start_child) if start_child else LocalExecutor()
        rt = Runtime(config, get_model, make_sandbox, EventBus(*sinks), ledger, executor)
        run = RLMRun(rt, question, ctx, sandbox=sandbox, run_id=run_id, starting=starting)
    except BaseException:  # an unreadable context, an unknown model: no run, no kernel left
        if starting is not None:
            await starting.abandon()
        raise
    return await run.run()

"""One call that wires registry, store and engine together: what ``rlmd run`` and the
benchmarks use to start a task (the run config comes from :func:`rlmd.config.build_run_config`)."""

from __future__ import annotations

from typing import Any

from rlmd.engine import EventSink, RunConfig, RunResult, run_task
from rlmd.models.base import ModelNotAvailable
from rlmd.models.registry import Registry


def check_models(registry: Registry, config: RunConfig) -> None:
    """Raise :class:`ModelNotAvailable` (with the fix in the message) when a model the run
    needs cannot be used here."""
    names = {config.root_model, config.model_for_depth(1), *config.models_by_depth.values()}
    for name in sorted(names):
        reason = registry.get(name).availability()
        if reason:
            raise ModelNotAvailable(f"model {name!r} is not usable: {reason}")


async def run_question(
    question: str,
    context: Any,
    config: RunConfig,
    *,
    registry: Registry,
    sinks: tuple[EventSink, ...] = (),
    record: bool = True,
) -> RunResult:
    """Run one task and record it in the store (``paths.store_path()``) unless ``record`` is
    false. Raises what :func:`rlmd.engine.run_task` raises and :class:`ModelNotAvailable`."""
    check_models(registry, config)
    store = None
    if record:
        from rlmd import paths
        from rlmd.store import Store

        store = Store(paths.store_path())
        sinks = (store.record, *sinks)
    try:
        return await run_task(question, context, config, get_model=registry.get, sinks=sinks)
    finally:
        if store is not None:
            store.close()

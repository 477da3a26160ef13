"""One call that wires registry, store and engine together: what ``rlmd run`` and the
benchmarks use to start a task (the run config comes from :func:`rlmd.config.build_run_config`)."""

from __future__ import annotations

from typing import Any

from rlmd import paths
from rlmd.engine import EventSink, Executor, RunConfig, RunResult, run_task
from rlmd.models.base import ModelNotAvailable
from rlmd.models.registry import Registry


def check_models(registry: Registry, config: RunConfig) -> None:
    """Check the models a run is configured with before it starts (every way of starting a
    run, the CLI, the daemon and :class:`rlmd.RLM`, calls this).

    Raises:
        KeyError / ValueError: an unknown model name (see :meth:`Registry.spec`).
        ModelNotAvailable: a model cannot be used here (the fix is in the message).
        ValueError: the run has a USD budget (``max_usd``) and a model's price is unknown
            (:attr:`rlmd.models.base.ModelSpec.priced`): its calls would count as $0 and
            the budget would never stop them. The message names the model and where to set
            its price.
    """
    names = {config.root_model, config.model_for_depth(1), *config.models_by_depth.values()}
    for name in sorted(names):
        reason = registry.get(name).availability()
        if reason:
            raise ModelNotAvailable(f"model {name!r} is not usable: {reason}")
    if config.budget.max_usd is None:
        return
    for name in sorted(names):
        if not registry.spec(name).priced:
            raise ValueError(
                f"model {name!r} has no known price, so a USD budget (max_usd "
                f"{config.budget.max_usd:g}) cannot limit it: its calls would count as $0. "
                "Set price_input and price_output (USD per 1M tokens) in its [models.NAME] "
                f"table in your user config ({paths.user_config_path()}), or run without "
                "max_usd"
            )


async def run_question(
    question: str,
    context: Any,
    config: RunConfig,
    *,
    registry: Registry,
    sinks: tuple[EventSink, ...] = (),
    record: bool = True,
    executor: Executor | None = None,
    samples: int = 1,
) -> RunResult:
    """Run one task and record it in the store (``paths.store_path()``) unless ``record`` is
    false; child runs and batches through ``executor`` (default: here); with ``samples`` >
    1, that many runs in parallel whose answers are voted (:mod:`rlmd.engine.samples`): the
    winner's result comes back with ``vote`` set. Raises what :func:`rlmd.engine.run_task`
    raises and :class:`ModelNotAvailable`."""
    check_models(registry, config)
    store = None
    if record:
        from rlmd.store import Store

        store = Store(paths.store_path())
        sinks = (store.record_batched, *sinks)
    try:
        if samples > 1:
            from rlmd.engine.samples import run_samples

            def one(q: str, ctx: Any, cfg: RunConfig) -> Any:
                return run_task(q, ctx, cfg, get_model=registry.get, sinks=sinks, executor=executor)

            result, vote = await run_samples(samples, question, context, config, one)
            result.vote = vote.to_dict()
            return result
        return await run_task(
            question, context, config, get_model=registry.get, sinks=sinks, executor=executor
        )
    finally:
        if store is not None:
            store.close()

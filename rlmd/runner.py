"""One call that wires registry, store and engine together: what ``rlmd run``, the Python API
and (later) the daemon use to start a task."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from rlmd.engine import Budget, EventSink, RunConfig, RunResult, run_task
from rlmd.models.base import ModelNotAvailable
from rlmd.models.registry import Registry

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
"""The root model when neither the command line nor a config names one: the local 1.5B
Qwen2.5-Coder GGUF (``rlmd models pull qwen2.5-coder-1.5b``)."""

BUDGET_KEYS = {f.name for f in fields(Budget)}


def build_config(
    registry: Registry,
    *,
    model: str | None = None,
    sub_model: str | None = None,
    sandbox: str | None = None,
    budget: dict[str, Any] | None = None,
    workspace: Path | None = None,
    **options: Any,
) -> RunConfig:
    """A :class:`RunConfig` from explicit arguments over the config's ``[run]`` defaults.

    Args:
        budget: overrides of :class:`Budget` fields (``None`` values are ignored).
        options: other :class:`RunConfig` fields (tools, output_cap, ...).

    Raises:
        ValueError: an unknown budget or option key in the arguments or the ``[run]`` table.
    """
    defaults = dict(registry.run_defaults)
    budget_args = {k: defaults.pop(k) for k in list(defaults) if k in BUDGET_KEYS}
    budget_args.update({k: v for k, v in (budget or {}).items() if v is not None})
    unknown = set(budget_args) - BUDGET_KEYS
    if unknown:
        raise ValueError(f"unknown budget keys: {sorted(unknown)}; known: {sorted(BUDGET_KEYS)}")
    # Pop first so the config's values never reach **merged, then let arguments win.
    root = defaults.pop("model", None)
    sub = defaults.pop("sub_model", None)
    box = defaults.pop("sandbox", None)
    root, sub, box = (
        model or root or DEFAULT_MODEL,
        sub_model or sub,
        sandbox or box or "subprocess",
    )
    by_depth = {int(k): v for k, v in defaults.pop("models_by_depth", {}).items()}
    known = {f.name for f in fields(RunConfig)}
    merged = {**defaults, **options}
    bad = set(merged) - known
    if bad:
        raise ValueError(f"unknown run options: {sorted(bad)}")
    return RunConfig(
        root_model=root,
        sub_model=sub,
        models_by_depth=by_depth,
        sandbox=box,
        budget=Budget(**budget_args),
        workspace=str(workspace) if workspace else None,
        **merged,
    )


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

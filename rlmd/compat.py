"""``from rlmd import RLM``: a drop-in for the ``rlms`` reference library's ``RLM`` class.

Users of ``rlms`` (``from rlm import RLM``) switch by changing that one import. Argument names
and meanings follow ``rlms`` 0.1.3; where rlmd differs, it says so here:

- ``environment="local"`` runs the REPL in rlmd's **subprocess** kernel (a crash or
  ``os._exit`` in model code cannot take your program down); ``"inprocess"`` is the
  reference's in-process ``exec``. Other environments arrive with the sandbox backends.
- Answers come from the real functions ``FINAL(value)`` / ``FINAL_VAR(name)`` (the reference
  0.1.3 uses an ``answer`` dict); a ``FINAL(...)`` written in prose is accepted as a fallback.
- ``max_depth`` has the reference's meaning (RLM loops at depths ``0 .. max_depth-1``), but the
  default is 2 so ``rlm_query`` starts a real child run unless you lower it.
- Budgets (``max_budget``, ``max_timeout``, ``max_tokens``, ``max_errors``) end the run with a
  status and a marked best-available answer instead of raising; ``status`` and
  ``answer_source`` are on the result. ``max_budget`` needs every model's price: rlmd's
  table (:data:`rlmd.models.registry.HOSTED_MODELS`) for the official OpenAI and Anthropic
  APIs, else ``price_input``/``price_output`` (USD per 1M tokens) in ``backend_kwargs``; a
  model with no known price is refused (``ValueError``) instead of counting as $0.
- ``usage_summary.model_usage_summaries`` is keyed by each model's name (``model_name``), as
  in the reference; a root and sub-model of one name share an entry. ``by_depth`` is rlmd's.
- A bad argument is named as you wrote it (``max_budget must be a number >= 0``).
- Every completion is recorded as a trajectory in rlmd's store (``rlmd show RUN_ID``).
- API keys passed in ``backend_kwargs`` are used for calls but never stored.
- ``persistent=True`` keeps one REPL across calls; each call rebinds ``context`` to the new
  prompt (the reference keeps ``context_0``, ``context_1``...) and your variables persist.
- ``on_subcall_start(depth, model, prompt_preview)`` / ``on_subcall_complete(depth, model,
  duration_s, error_or_none)`` fire around each child run (``rlm_query``), as in the
  reference; ``on_iteration_start(depth, iteration)`` / ``on_iteration_complete(depth,
  iteration, duration_s)`` fire around each root-model turn of every run (``iteration``
  from 1; the reference 0.1.3 takes them but never calls them). A callback that raises
  is ignored, as there. They run on the instance's event-loop thread.
- ``logger`` (an ``RLMLogger``), ``orchestrator`` and ``user_prologue`` are taken and
  ignored with a ``UserWarning`` (rlmd's store records every run; its system prompt is its
  own). Other environments of the reference (``docker``, ``modal``, ``e2b``...) are refused
  with ``ValueError``: rlmd's own sandboxes take other options (``rlmd run --sandbox``).
  A keyword the reference does not have either is a ``TypeError``, as a typo is there.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlmd import config
from rlmd.context import load_context
from rlmd.engine import Budget, BudgetError, RunConfig, prepare_sandbox, run_task
from rlmd.engine.events import Event, IterationStarted, RunFinished, RunStarted
from rlmd.models.base import ModelSpec
from rlmd.models.registry import HOSTED_MODELS
from rlmd.sandbox import DEFAULT_BACKEND

_PROVIDERS = {
    "openai": ("openai", None),
    "vllm": ("openai", None),
    "openrouter": ("openai", "https://openrouter.ai/api/v1"),
    "anthropic": ("anthropic", None),
    "local": ("local", None),
    "scripted": ("scripted", None),
}
_ENVIRONMENTS = {"local": DEFAULT_BACKEND, "subprocess": "subprocess", "inprocess": "inprocess"}
_IGNORED = {
    "logger": "rlmd records every completion in its store (rlmd show RUN_ID)",
    "orchestrator": "rlmd's system prompt is its own",
    "user_prologue": "rlmd's system prompt is its own",
}
"""Keywords of the reference ``RLM`` that rlmd takes and ignores (with a warning), and why."""


class _Callbacks:
    """The reference's progress callbacks, fed from rlmd's run events (an event sink).
    A callback that raises is ignored, as the reference ignores it."""

    def __init__(self, callbacks: dict[str, Callable[..., Any] | None]) -> None:
        self._on = {name: fn for name, fn in callbacks.items() if fn is not None}
        self._runs: dict[str, tuple[float, str]] = {}  # child run id -> (started, model)
        self._turns: dict[str, tuple[int, float]] = {}  # run id -> (iteration, started)

    def __bool__(self) -> bool:
        return bool(self._on)

    def _fire(self, name: str, *args: Any) -> None:
        fn = self._on.get(name)
        if fn is not None:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - the reference's rule: never break the run
                pass

    def _turn_ended(self, event: Event) -> None:
        turn = self._turns.pop(event.run_id, None)
        if turn is not None:
            self._fire("on_iteration_complete", event.depth, turn[0], event.ts - turn[1])

    def __call__(self, event: Event) -> None:
        if isinstance(event, IterationStarted):
            self._turn_ended(event)
            self._turns[event.run_id] = (event.index + 1, event.ts)
            self._fire("on_iteration_start", event.depth, event.index + 1)
        elif isinstance(event, RunStarted) and event.depth > 0:
            model = str(((event.models or {}).get("root") or {}).get("model", ""))
            self._runs[event.run_id] = (event.ts, model)
            self._fire("on_subcall_start", event.depth, model, event.question[:80])
        elif isinstance(event, RunFinished):
            self._turn_ended(event)
            started = self._runs.pop(event.run_id, None)
            if started is not None:
                error = None if event.status == "completed" else (event.error or event.status)
                self._fire(
                    "on_subcall_complete", event.depth, started[1], event.ts - started[0], error
                )


@dataclass
class ModelUsageSummary:
    """Per-model usage, as in ``rlms``: calls, input/output tokens, cost (USD)."""

    total_calls: int
    total_input_tokens: int
    total_output_tokens: int
    total_cost: float


@dataclass
class UsageSummary:
    """Usage over the whole call tree: ``model_usage_summaries`` per model, plus rlmd's
    per-depth split in ``by_depth`` (the raw dict of :meth:`rlmd.engine.usage.Usage.to_dict`)."""

    model_usage_summaries: dict[str, ModelUsageSummary]
    by_depth: dict[str, dict] = field(default_factory=dict)

    @property
    def total_cost(self) -> float:
        return sum(m.total_cost for m in self.model_usage_summaries.values())

    @property
    def total_input_tokens(self) -> int:
        return sum(m.total_input_tokens for m in self.model_usage_summaries.values())

    @property
    def total_output_tokens(self) -> int:
        return sum(m.total_output_tokens for m in self.model_usage_summaries.values())


@dataclass
class RLMChatCompletion:
    """What :meth:`RLM.completion` returns: ``response`` (the answer text, ``""`` when there is
    none), ``usage_summary``, ``execution_time`` (seconds), plus rlmd's ``run_id``, ``status``
    and ``answer_source``."""

    root_model: str
    prompt: Any
    response: str
    usage_summary: UsageSummary
    execution_time: float
    run_id: str
    status: str
    answer_source: str | None


def _spec(
    name: str, backend: str, kwargs: dict[str, Any] | None, sampling: dict | None
) -> ModelSpec:
    if backend not in _PROVIDERS:
        raise ValueError(f"unknown backend {backend!r}; rlmd supports {sorted(_PROVIDERS)}")
    provider, base_url = _PROVIDERS[backend]
    kw = dict(kwargs or {})
    model = kw.pop("model_name", None) or kw.pop("model", None)
    if not model:
        raise ValueError(f"backend_kwargs for {backend!r} need 'model_name'")
    options: dict[str, Any] = {}
    if "api_key" in kw:
        options["api_key"] = kw.pop("api_key")  # used for calls, never recorded
    if callable(kw.get("callable")):
        options["callable"] = kw.pop("callable")
    sampling_args = {**kw.pop("sampling_args", {}), **(sampling or {})}
    spec = ModelSpec(
        name=name,
        provider=provider,
        model=model,
        base_url=kw.pop("base_url", base_url),
        sampling=sampling_args,
        options=options,
    )
    if spec.base_url is None:  # the official API: its published price, unless given below
        known = HOSTED_MODELS.get(f"{provider}:{model}", {})
        spec.price_input, spec.price_output = known.get("price_input"), known.get("price_output")
    for key in (
        "context_window",
        "max_output_tokens",
        "price_input",
        "price_output",
        "n_threads",
        "api_key_env",
        "timeout_s",
        "max_retries",
    ):
        if key in kw:
            setattr(spec, key, kw.pop(key))
    spec.options.update(kw)
    return spec


_BUDGET_ARGS = {
    "max_seconds": "max_timeout",
    "max_usd": "max_budget",
    "max_consecutive_errors": "max_errors",
}
"""Budget fields whose ``RLM`` argument has another name."""


def _budget(**limits: Any) -> Budget:
    """:class:`Budget` of ``limits``; a ``ValueError`` names the ``RLM`` argument the caller
    passed (``max_budget``), not the engine's field (``budget max_usd``)."""
    try:
        return Budget(**limits)
    except BudgetError as exc:
        name = _BUDGET_ARGS.get(exc.field, exc.field)
        raise ValueError(f"{name} {exc.reason}") from None


def _paired(backends: list[str], kwargs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``other_backend_kwargs``, one dict per backend (``None``: an empty dict each)."""
    if kwargs is None:
        return [{}] * len(backends)
    if len(kwargs) != len(backends):
        raise ValueError(
            f"other_backend_kwargs has {len(kwargs)} dict(s) for {len(backends)} "
            "other_backends: give one per backend"
        )
    return kwargs


class RLM:
    """A Recursive Language Model with the ``rlms`` constructor (see the module docstring for
    where rlmd differs). Thread-compatible: each instance runs its calls on a private event
    loop thread, so it also works inside Jupyter or another running loop."""

    def __init__(
        self,
        backend: str = "openai",
        backend_kwargs: dict[str, Any] | None = None,
        environment: str = "local",
        environment_kwargs: dict[str, Any] | None = None,
        depth: int = 0,
        max_depth: int = 2,
        max_iterations: int = 30,
        max_budget: float | None = None,
        max_timeout: float | None = None,
        max_tokens: int | None = None,
        max_errors: int | None = None,
        custom_system_prompt: str | None = None,
        other_backends: list[str] | None = None,
        other_backend_kwargs: list[dict[str, Any]] | None = None,
        logger: Any = None,
        verbose: bool = False,
        persistent: bool = False,
        custom_tools: dict[str, Any] | None = None,
        custom_sub_tools: dict[str, Any] | None = None,
        compaction: bool = False,
        compaction_threshold_pct: float = 0.85,
        max_concurrent_subcalls: int = 4,
        sampling_args: dict[str, Any] | None = None,
        sub_sampling_args: dict[str, Any] | None = None,
        record: bool = True,
        on_subcall_start: Callable[[int, str, str], None] | None = None,
        on_subcall_complete: Callable[[int, str, float, str | None], None] | None = None,
        on_iteration_start: Callable[[int, int], None] | None = None,
        on_iteration_complete: Callable[[int, int, float], None] | None = None,
        orchestrator: bool = True,
        user_prologue: str | None = None,
    ) -> None:
        given = {"logger": logger, "orchestrator": not orchestrator, "user_prologue": user_prologue}
        for name, why in _IGNORED.items():
            if given[name]:
                warnings.warn(f"RLM({name}=...) is ignored: {why}", UserWarning, stacklevel=2)
        self._callbacks = _Callbacks(
            {
                "on_subcall_start": on_subcall_start,
                "on_subcall_complete": on_subcall_complete,
                "on_iteration_start": on_iteration_start,
                "on_iteration_complete": on_iteration_complete,
            }
        )
        if environment not in _ENVIRONMENTS:
            raise ValueError(
                f"unknown environment {environment!r}; rlmd supports {sorted(_ENVIRONMENTS)}"
            )
        self.registry = config.load(None).registry()
        root = _spec("root", backend, backend_kwargs, sampling_args)
        self.registry.add(root)
        # registry name -> the model's own name, which keys the usage (as in the reference)
        self._model_names = {"root": root.model}
        sub_name = None
        if other_backends:
            for i, (b, kw) in enumerate(
                zip(other_backends, _paired(other_backends, other_backend_kwargs), strict=True)
            ):
                spec = _spec(f"sub{i}" if i else "sub", b, kw, sub_sampling_args)
                self.registry.add(spec)
                self._model_names[spec.name] = spec.model
            sub_name = "sub"
        elif sub_sampling_args:
            self.registry.add(
                _spec(
                    "sub", backend, backend_kwargs, {**(sampling_args or {}), **sub_sampling_args}
                )
            )
            self._model_names["sub"] = root.model
            sub_name = "sub"
        self.root_model_name = root.model
        self.depth = depth
        self.verbose = verbose
        self.record = record
        self.persistent = persistent
        self.config = RunConfig(
            root_model="root",
            sub_model=sub_name,
            sandbox=_ENVIRONMENTS[environment],
            sandbox_options=dict(environment_kwargs or {}),
            budget=_budget(
                max_iterations=max_iterations,
                max_depth=max(1, max_depth - depth),
                max_seconds=max_timeout,
                max_tokens=max_tokens,
                max_usd=max_budget,
                max_consecutive_errors=max_errors,
            ),
            tools=dict(custom_tools or {}),
            sub_tools=None if custom_sub_tools is None else dict(custom_sub_tools),
            compaction=compaction,
            compaction_threshold=compaction_threshold_pct,
            max_concurrent_subcalls=max_concurrent_subcalls,
            system_prompt=custom_system_prompt,
        )
        self.config.validate_tools()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlmd-RLM", daemon=True)
        self._thread.start()
        self._sandbox = None

    def _call(self, coro):
        if self._loop.is_closed():  # it said "Event loop is closed" and warned of a coroutine
            coro.close()
            raise RuntimeError(
                "this RLM is closed (close() or its with block ended): make a new one"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def completion(
        self, prompt: str | dict[str, Any] | list, root_prompt: str | None = None
    ) -> RLMChatCompletion:
        """Answer over ``prompt`` (the context: a string, list or dict) with the RLM loop.

        Args:
            prompt: the context bound to ``context`` in the REPL.
            root_prompt: the question the root model sees; if ``None``, a short ``prompt`` is
                shown as the question, a long one is summarised as "the request is in context".

        Returns:
            :class:`RLMChatCompletion`.

        Raises:
            rlmd.models.base.ModelNotAvailable: the model cannot be used here.
            RuntimeError: the instance was closed.
        """
        if root_prompt is None:
            text = prompt if isinstance(prompt, str) else ""
            root_prompt = (
                text if 0 < len(text) <= 4000 else "Answer the request given in `context`."
            )
        started = time.perf_counter()
        result = self._call(self._run(prompt, root_prompt))
        summaries: dict[str, ModelUsageSummary] = {}
        for name, t in result.usage["by_model"].items():
            model = self._model_names.get(name, name)  # root and sub of one model: one entry
            was = summaries.get(model) or ModelUsageSummary(0, 0, 0, 0.0)
            summaries[model] = ModelUsageSummary(
                was.total_calls + t["calls"],
                was.total_input_tokens + t["input_tokens"],
                was.total_output_tokens + t["output_tokens"],
                was.total_cost + t["cost_usd"],
            )
        return RLMChatCompletion(
            root_model=self.root_model_name,
            prompt=prompt,
            response=result.answer or "",
            usage_summary=UsageSummary(summaries, result.usage["by_depth"]),
            execution_time=time.perf_counter() - started,
            run_id=result.run_id,
            status=result.status,
            answer_source=result.answer_source,
        )

    async def _run(self, prompt, root_prompt):
        from rlmd.runner import check_models

        check_models(self.registry, self.config)
        sinks = []
        store = None
        if self.record:
            from rlmd import paths
            from rlmd.store import Store

            store = Store(paths.store_path())
            sinks.append(store.record_batched)
        if self._callbacks:
            sinks.append(self._callbacks)
        if self.verbose:
            from rlmd.cli.progress import ProgressPrinter

            sinks.append(ProgressPrinter())
        sandbox = None
        if self.persistent:
            if self._sandbox is None:
                from rlmd.sandbox import create_sandbox

                self._sandbox = create_sandbox(self.config.sandbox, **self.config.sandbox_options)
            sandbox = self._sandbox
        try:
            context = load_context(prompt)
            if sandbox is not None:  # our persistent REPL: this call's prompt is its `context`
                await prepare_sandbox(sandbox, context)
            return await run_task(
                root_prompt,
                context,
                self.config,
                get_model=self.registry.get,
                sinks=tuple(sinks),
                sandbox=sandbox,
            )
        finally:
            if store is not None:
                store.close()

    def close(self) -> None:
        """Stop the persistent REPL (if any), close model clients and the private loop."""
        if self._loop.is_closed():
            return

        async def shutdown():
            if self._sandbox is not None:
                await self._sandbox.close()
            await self.registry.aclose()

        self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> RLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

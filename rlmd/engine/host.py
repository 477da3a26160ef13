"""What code in a run's REPL asks of the host: ``llm_query`` (a metered sub-model call),
``rlm_query`` (a child run), their batched forms (both through the tree's
:class:`~rlmd.engine.executor.Executor`), user tools, and the policy
on which model names code may use. A :class:`HostCalls` is the run's
:data:`~rlmd.sandbox.base.CallHandler`."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import threading
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from rlmd.context import Context, load_context
from rlmd.engine import mapping, verify
from rlmd.engine.budget import BudgetExhausted
from rlmd.engine.metered import Meter
from rlmd.engine.usage import Usage
from rlmd.models.base import Message, Model, ModelError
from rlmd.models.registry import PROVIDERS
from rlmd.sandbox.base import CODEBASE_HELPERS, CallError

FILE_LOADING_PROVIDERS = frozenset({"scripted", "local"})
"""Model providers whose ``provider:model`` shorthand names a file the host loads; code in
the REPL may not name new ones (see :meth:`HostCalls.model_named_by_code`)."""

SUBCALL_FUNCTIONS = frozenset(
    {"llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "llm_map"}
)
"""The host functions whose results are sub-model answers (tallied per cell)."""


class Refused(CallError):
    """A sub-call function refused its arguments before any sub-call ran (the verifier's
    failed-sub-call tally does not count it)."""


MAX_INLINE_QUESTION = 4000
"""A context-less ``rlm_query`` prompt longer than this (characters) is cut in the child's
question; the child's ``context`` holds it in full."""


@dataclass(frozen=True)
class ChildRequest:
    """A child run asked for by ``rlm_query``, for the tree's child starter.

    Attributes:
        question: the child's question.
        context: its context (bound in its own REPL).
        depth: its depth (the parent's + 1).
        parent_run_id / parent_node_id: the run and cell that asked for it.
        root_run_id: the tree's root run.
        parent_usage: the parent's usage, which the child's adds up into.
        tools: the child's user tools.
        model: the model code named for it (already allowed by the policy), else ``None``
            (the configured model for its depth).
    """

    question: str
    context: Context
    depth: int
    parent_run_id: str
    parent_node_id: str | None
    root_run_id: str
    parent_usage: Usage
    tools: dict[str, Any] = field(default_factory=dict)
    model: Model | None = None


class HostCalls:
    """Serves the calls one run's REPL code makes (see ``CallHandler``).

    Args:
        meter: the run's metered model calls (sub-calls are made through it).
        root_run_id: the tree's root run.
        tools: the run's user tools: name → host callable or JSON-able value.
        context: the run's context (a codebase's symbol index answers ``code`` calls).
    """

    def __init__(
        self,
        meter: Meter,
        root_run_id: str,
        tools: dict[str, Any],
        context: Context | None = None,
    ) -> None:
        self.meter = meter
        self.context = context
        self.rt = meter.rt
        self.cfg = meter.rt.config
        self.root_run_id = root_run_id
        self.tools = tools
        self.cell_node: str | None = None
        """The cell running now: sub-calls and child runs hang under it."""
        self.cell_code: str | None = None
        """The code of the cell running now (a refusal quotes what the cell passed)."""
        self.cell_next: str | None = None
        """The next step the last helper note of the cell running now named
        (``"outline('lib/help.js')"``: :attr:`rlmd.codeintel.index.CodeIndex.last_next`),
        for a refusal whose own line would build on an empty result."""
        self.tally = verify.SubcallTally()
        """The sub-call results of the cell running now (the loop starts a new one per
        cell), for the answer verifier."""
        self.gate = asyncio.Semaphore(max(1, self.cfg.max_concurrent_subcalls))
        """Sub-model calls and child runs of this run in flight at once, however started:
        a batch, ``llm_map``, or threads of the cell each calling ``llm_query`` /
        ``rlm_query`` (sixteen threads started sixteen child runs, each with a REPL of its
        own, outside every limit of this run's sandbox). A child run has a gate of its
        own, so a parent waiting on its children never holds up theirs."""

    async def __call__(self, fn: str, args: dict[str, Any]) -> Any:
        if fn not in SUBCALL_FUNCTIONS:
            return await self._serve(fn, args)
        tally = self.tally
        try:
            out = await self._serve(fn, args)
        except Refused:
            raise  # no sub-call ran: no result for an answer to be computed from
        except CallError as exc:
            tally.fail(f"Error: {exc}")
            raise
        tally.add(out if isinstance(out, list) else [out])
        return out

    async def _serve(self, fn: str, args: dict[str, Any]) -> Any:
        parent_node = self.cell_node
        if fn == "llm_query":
            return await self.llm_query(args.get("prompt"), args.get("model"), parent_node)
        if fn == "llm_query_batched":
            prompts_ = _as_list(args.get("prompts"), "prompts")
            return await self._batched(
                [self.llm_query(p, args.get("model"), parent_node) for p in prompts_]
            )
        if fn == "rlm_query":
            return await self.rlm_query(
                args.get("prompt"), args.get("context"), args.get("model"), parent_node
            )
        if fn == "rlm_query_batched":
            prompts_ = _as_list(args.get("prompts"), "prompts")
            contexts = args.get("contexts")
            if contexts is not None and len(_as_list(contexts, "contexts")) != len(prompts_):
                raise CallError(
                    f"rlm_query_batched got {len(prompts_)} prompts but {len(contexts)} contexts"
                )
            ctxs = contexts or [None] * len(prompts_)
            return await self._batched(
                [
                    self.rlm_query(p, c, args.get("model"), parent_node)
                    for p, c in zip(prompts_, ctxs, strict=True)
                ]
            )
        if fn == "llm_map":
            return await self.llm_map(args, parent_node)
        if fn == "code":
            return await self.code(args)
        if fn == "tool":
            return await self.tool(args)
        raise CallError(f"unknown host function {fn!r}")

    async def _batched(self, calls: list[Awaitable[str]]) -> list[str]:
        """Run calls through the executor, concurrently (bounded); a failed slot holds
        ``"Error: ..."``, never failing the batch. A budget that runs out still ends the run
        after the cell."""
        return await self.rt.executor.run_batch(calls, self.cfg.max_concurrent_subcalls)

    async def llm_map(self, args: dict[str, Any], parent_node: str | None) -> list[str]:
        """``llm_map``: one sub-call per item (or per ``items_per_call`` items), concurrent
        and bounded like a batch; one answer per item in order, ``"Error: ..."`` in a failed
        item's slot (see :mod:`rlmd.engine.mapping`)."""
        instruction = args.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise Refused("llm_map(instruction, items): instruction must be a non-empty str")
        codebase = self.context is not None and self.context.is_codebase
        helper = mapping.helper_in_instruction(instruction, codebase=codebase)
        if helper is not None and not codebase and helper in CODEBASE_HELPERS:
            raise Refused(
                "llm_map's instruction is sent to a sub-model as text (use llm_map for a "
                f"question in words about each item), which cannot run {helper}(); nor can "
                f"this REPL: {helper}() is there only when the context is a codebase"
            )
        if helper is not None:
            source = mapping.items_source(self.cell_code, instruction)
            refused = (
                "llm_map's instruction is sent to a sub-model as text (use llm_map for a "
                f"question in words about each item), which cannot run {helper}()"
            )
            if mapping.applies_to_items(instruction) and _is_empty(args.get("items")):
                # Applying the helper to each of no items prints [] (the 1.5B ran that line
                # and answered the prompt's placeholder: issue 15, held-out codeintel-007).
                raise Refused(mapping.empty_items_refusal(refused, source, self.cell_next))
            raise Refused(
                # The line to run comes last: the last words a small model reads before
                # it writes weigh most (it wrote llm_map again after "use llm_map for ...").
                f"{refused}; run it in your code instead: "
                f"{mapping.helper_call_code(instruction, source, codebase=codebase)}"
            )
        items = [str(i) for i in _as_list(args.get("items"), "items")]
        try:
            per_call = max(1, int(args.get("items_per_call") or 1))
        except (TypeError, ValueError):
            raise Refused("llm_map: items_per_call must be an int >= 1") from None
        groups = mapping.group(items, per_call)
        replies = await self._batched(
            [
                self.llm_query(mapping.prompt(instruction, g), args.get("model"), parent_node)
                for g in groups
            ]
        )
        return mapping.split_replies(groups, replies)

    async def code(self, args: dict[str, Any]) -> dict[str, Any]:
        """A code-intelligence helper (``find_definition`` ...), answered from the
        codebase's symbol index (built on first use, in a worker thread)."""
        from rlmd.codeintel import index as codeindex

        if self.context is None or not self.context.is_codebase:
            raise CallError("code-intelligence helpers need a codebase context")
        op = str(args.get("op"))
        try:
            reply = await asyncio.to_thread(
                codeindex.answer,
                self.context,
                op,
                list(args.get("args") or []),
                dict(args.get("kwargs") or {}),
            )
        except (TypeError, ValueError) as exc:
            raise CallError(str(exc)) from None
        step = reply.pop("next", None)  # the host's: the REPL prints the note as before
        if step:
            self.cell_next = step
        return reply

    # -- the model-name policy ------------------------------------------------------------
    def model_named_by_code(self, name: str) -> Model:
        """The model that sandboxed code asked for by ``name``.

        Model code is untrusted: a ``scripted:file.py:fn`` or ``local:/path`` shorthand would
        make the host import or parse a file the sandbox just wrote (the kernel's working
        folder is a host path), and a hosted one (``openai:o3``) would spend the user's money
        at a provider the run was not configured with. So code may name configured model
        names (the user config's, the built-ins'), and a ``provider:model`` shorthand only
        if it is one of this run's own models (root, sub or per-depth).

        Raises:
            CallError: unknown model, or a shorthand the run was not configured with.
        """
        provider, sep, _ = name.partition(":")
        if sep and provider in PROVIDERS:
            configured = {
                self.cfg.root_model,
                self.cfg.sub_model,
                *self.cfg.models_by_depth.values(),
            }
            if name not in configured:
                harm = (
                    "models load files"
                    if provider in FILE_LOADING_PROVIDERS
                    else "shorthands reach a provider"
                )
                raise CallError(
                    f"model {name!r} is not allowed from the REPL: '{provider}:' {harm}, so "
                    "code may only name the models this run was configured with or configured "
                    "model names"
                )
        try:
            return self.rt.get_model(name)
        except (KeyError, ValueError) as exc:
            raise CallError(f"unknown model {name!r}: {exc}") from None

    # -- llm_query ------------------------------------------------------------------------
    async def llm_query(self, prompt: Any, model_name: str | None, parent_node: str | None) -> str:
        """One sub-model call at the run's depth + 1; its text. Failures become
        :class:`CallError`, as does a reply cut at the output cap before any text (out of
        tokens is not an answer)."""
        if not isinstance(prompt, str):
            raise CallError(f"llm_query needs a str prompt, got {type(prompt).__name__}")
        depth = self.meter.depth + 1
        model = self.model_named_by_code(model_name or self.cfg.model_for_depth(depth))
        messages: list[Message] = [{"role": "user", "content": prompt}]
        _check_window(model, messages)
        try:
            async with self.gate:
                c = await self.meter.call(model, messages, parent_node, role="sub", depth=depth)
        except BudgetExhausted as exc:
            raise CallError(
                f"budget exhausted: {exc}. The run is ending; no more sub-calls."
            ) from None
        except ModelError as exc:
            raise CallError(f"sub-call to {model.name!r} failed: {exc}") from None
        if c.finish_reason == "length" and not c.text.strip():
            # Not an answer: '' would pass for one (and FINAL(llm_query(...)) would hand it up).
            raise CallError(
                f"the sub-model {model.name!r} ran out of output tokens "
                f"({model.spec.max_output_tokens:,}) before answering: it returned no text. "
                "Ask for a shorter answer, or give it less to do per call."
            )
        return c.text

    # -- rlm_query ------------------------------------------------------------------------
    async def rlm_query(
        self, prompt: Any, context: Any, model_name: str | None, parent_node: str | None
    ) -> str:
        """A child run at depth + 1 (a plain sub-call at the depth limit); its answer, or a
        :class:`CallError` when it ends without one or with an empty one."""
        if not isinstance(prompt, str):
            raise CallError(f"rlm_query needs a str prompt, got {type(prompt).__name__}")
        child_depth = self.meter.depth + 1
        if child_depth >= self.cfg.budget.max_depth:
            # At max depth a child RLM would exceed the limit: a plain sub-call instead.
            text = prompt if context is None else f"{prompt}\n\nInput:\n{_as_text(context)}"
            return await self.llm_query(text, model_name, parent_node)
        try:
            self.rt.ledger.check(subcall=True)
        except BudgetExhausted as exc:
            raise CallError(
                f"budget exhausted: {exc}. The run is ending; no more sub-calls."
            ) from None
        self.rt.ledger.subcalls += 1
        if context is None:
            question = (
                prompt
                if len(prompt) <= MAX_INLINE_QUESTION
                else prompt[: MAX_INLINE_QUESTION // 2] + "\n[... the full request is in `context`]"
            )
            ctx = load_context(prompt)
        else:
            question, ctx = prompt, self._child_context(context)
        request = ChildRequest(
            question=question,
            context=ctx,
            depth=child_depth,
            parent_run_id=self.meter.run_id,
            parent_node_id=parent_node,
            root_run_id=self.root_run_id,
            parent_usage=self.meter.usage,
            tools=self.cfg.tools if self.cfg.sub_tools is None else self.cfg.sub_tools,
            model=self.model_named_by_code(model_name) if model_name else None,
        )
        async with self.gate:
            result = await self.rt.executor.start_child(self.rt, request)
        if result.answer is not None and result.answer.strip():
            return result.answer
        if result.answer is not None:  # an empty answer is no answer (its run says how)
            raise CallError(
                f"child run {result.run_id} ended with status {result.status} and an empty "
                "answer, which is not an answer"
            )
        raise CallError(
            f"child run {result.run_id} ended with status {result.status} and no answer: {result.error}"
        )

    def _child_context(self, value: Any) -> Context:
        """A child run's context: part of this run's codebase (a dict of some of its files,
        ``{path: text}``) stays a codebase, so the child has ``grep``, ``find_definition``
        and the rest over that part; anything else loads as usual."""
        parent = self.context
        if (
            parent is not None
            and parent.is_codebase
            and isinstance(value, dict)
            and value
            and all(isinstance(k, str) and k in parent.value for k in value)
            and all(isinstance(v, str) for v in value.values())
        ):
            return Context(value=dict(sorted(value.items())), kind="codebase", source=parent.source)
        return load_context(value)

    # -- tools ----------------------------------------------------------------------------
    async def tool(self, args: dict[str, Any]) -> Any:
        """Call the user tool ``args["name"]`` with ``args``/``kwargs``; a value that is not
        JSON-able comes back as its ``repr``. A synchronous tool runs in a thread of its own,
        off the event loop: one that hangs cannot freeze the run, and the cell's time limit
        ends the cell, naming the tool (the thread is abandoned; it is a daemon thread, so it
        does not hold up the process's exit)."""
        name = args.get("name")
        fn = self.tools.get(name) if isinstance(name, str) else None
        if not callable(fn):
            raise CallError(f"no tool named {name!r}")
        call_args, call_kwargs = args.get("args", []), args.get("kwargs", {})
        try:
            if inspect.iscoroutinefunction(fn):
                value = fn(*call_args, **call_kwargs)
            else:
                value = await _in_thread(str(name), fn, call_args, call_kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise CallError(f"tool {name} raised {type(exc).__name__}: {exc}") from None
        try:
            json.dumps(value)
            return value
        except (TypeError, ValueError):
            return repr(value)


async def _in_thread(name: str, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` in a new daemon thread; its result or exception. Cancelling
    the awaiting task leaves the thread to finish on its own (a thread cannot be killed)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def run() -> None:
        value, error = None, None
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit in a tool is its error too
            error = RuntimeError(f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(RuntimeError):  # the loop may be closed by now
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name=f"rlmd-tool-{name}", daemon=True).start()
    return await fut


def _check_window(model: Model, messages: list[Message]) -> None:
    tokens = model.count_messages(messages)
    window, reserve = model.spec.context_window, model.spec.max_output_tokens
    if tokens > window - reserve:
        raise CallError(
            f"prompt too large for model {model.name!r}: {tokens:,} tokens, but only "
            f"{window - reserve:,} fit ({window:,}-token window minus {reserve:,} reserved for "
            "the reply). Split the text into smaller chunks (for example llm_query_batched over "
            "slices), or use rlm_query, whose child keeps the text in its own REPL."
        )


def _is_empty(items: Any) -> bool:
    """Whether ``llm_map``'s items (a list, from the REPL) are an empty list."""
    return isinstance(items, list) and not items


def _as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise CallError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)[:1_000_000]

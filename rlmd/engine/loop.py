"""The RLM loop: one run at one depth, and the host side of the calls its code makes.

Per iteration: the root model gets the conversation, its ```repl blocks run in the run's own
sandbox, their output goes back as the next user turn. Code calls ``llm_query`` (a sub-model
call) and ``rlm_query`` (a child :class:`RLMRun` at depth + 1 with its own sandbox); all of
them draw on one shared :class:`~rlmd.engine.budget.Ledger`. The run ends when code calls
``FINAL``/``FINAL_VAR``, or when a budget runs out (then a marked extraction call gives the
best available answer). Design: Zhang, Kraska, Khattab, arXiv:2512.24601.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlmd.engine import parsing, prompts
from rlmd.engine.budget import Budget, BudgetExhausted, Ledger
from rlmd.engine.events import Event, EventBus, new_id
from rlmd.engine.usage import Usage
from rlmd.models.base import Completion, Message, Model, ModelError
from rlmd.sandbox.base import CODEBASE_HELPERS, RESERVED_NAMES, CallError, CellResult, Sandbox
from rlmd.workspace.context import Context, load_context

EXTRACTION_MAX_TOKENS = 512
"""Cap on the one extraction call made when a budget ends a run (the bounded overdraw)."""

EXTRACTION_TIMEOUT_S = 120.0
"""Longest wall-clock time of the extraction call, seconds (less when the run has a
wall-clock budget: then it gets what that budget has left, see ``extraction_reserve``)."""

STOP_AFTER_BLOCK = ("\n```\n",)
"""Stop strings of a root turn: a fence line after code. The reply then ends at its first
code block, so the model cannot write an imagined output of the cell and act on it (the
1.5B model did, ``bench/RESULTS.md``, trajectory ``617823ceb2aa74b727aa``)."""


FILE_LOADING_PROVIDERS = frozenset({"scripted", "local"})
"""Model providers whose ``provider:model`` shorthand names a file the host loads; code in
the REPL may not name new ones (see :meth:`RLMRun._model_named_by_code`)."""


@dataclass
class RunConfig:
    """How to run: models, sandbox, budgets, tools, prompt options.

    Attributes:
        root_model: registry name of the root model (depth 0).
        sub_model: registry name for sub-calls and child roots; defaults to ``root_model``.
        models_by_depth: per-depth overrides (``{1: "small", 2: "tiny"}``) for the model that
            answers sub-calls *at* that depth and roots child runs there.
        sandbox: sandbox backend name (``"subprocess"`` or ``"inprocess"``).
        sandbox_options: keyword options for the backend.
        budget: the tree's limits.
        tools: user tools for the root REPL: name → host callable or JSON-able value.
        sub_tools: tools for child runs; ``None`` inherits ``tools``, ``{}`` gives none.
        tool_docs: name → one-line description shown in the system prompt.
        output_cap: characters of each cell's output shown to the model (the store keeps all).
        refuse_early_answer: refuse, once, an answer given before any code looked at the
            context (shared/notes/local-models.md: small models answer on turn 0).
        early_answer_message: the refusal text.
        compaction: summarise older turns when the root conversation nears the window.
        compaction_threshold: fraction of (window - reply reserve) that triggers it.
        extraction: after a budget ends the run, make one extraction call (at most
            ``EXTRACTION_MAX_TOKENS`` output tokens over a quarter of the window) for the best
            available answer. It is the one call allowed past a token or USD budget; set
            ``False`` for a hard cap (the run then ends with no answer).
        max_concurrent_subcalls: parallel sub-calls / child runs per batched call.
        system_prompt: a custom system prompt template (see :mod:`rlmd.engine.prompts`).
        workspace: the project folder, recorded with the run.
        stop_after_code_block: end each root reply at the close of its first code block
            (stop strings :data:`STOP_AFTER_BLOCK`, plus cutting the text for a server that
            ignores them); only that block runs. When the stop string ended a fence that was
            not a runnable block (a bare ```` ``` ```` output block), the turn is asked again
            without stop strings, so a ``FINAL(...)`` written after it in prose survives.
        verify_answer: refuse, once, a short answer (a number, one token, a path: see
            :func:`rlmd.engine.parsing.is_short_answer`) that the model typed as a literal
            (``FINAL("3")``, or ``FINAL(3)`` in prose) and that appears in no cell output of
            the run, and an empty computed answer (``[]``, ``None``...: a search that found
            nothing); the model is asked to print its evidence. Other computed values
            (``FINAL(total)``, ``FINAL_VAR``) and longer answers are never questioned, nor is
            an answer in the last iteration. Costs one turn, only when it triggers.
        unverified_answer_message: the refusal text (``{answer}`` is filled in).
        extraction_reserve: fraction of ``budget.max_seconds`` held back from the loop for
            the extraction call (at most :data:`EXTRACTION_TIMEOUT_S`), so the fallback
            answer arrives within the wall-clock budget (the first quality run's extraction
            ran 120 s past a 150 s budget). The extraction gets what is left of the budget;
            if the loop overran its share, at most 1 s more.
    """

    root_model: str
    sub_model: str | None = None
    models_by_depth: dict[int, str] = field(default_factory=dict)
    sandbox: str = "subprocess"
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    tools: dict[str, Any] = field(default_factory=dict)
    sub_tools: dict[str, Any] | None = None
    tool_docs: dict[str, str] = field(default_factory=dict)
    output_cap: int = 4_000
    refuse_early_answer: bool = True
    early_answer_message: str = prompts.EARLY_ANSWER
    compaction: bool = True
    compaction_threshold: float = 0.85
    extraction: bool = True
    max_concurrent_subcalls: int = 4
    system_prompt: str | None = None
    workspace: str | None = None
    stop_after_code_block: bool = True
    verify_answer: bool = True
    unverified_answer_message: str = prompts.UNVERIFIED_ANSWER
    extraction_reserve: float = 0.2

    def extraction_reserve_s(self) -> float:
        """Seconds of the wall-clock budget kept for the extraction call (0 when there is no
        wall-clock budget or no extraction)."""
        if not self.extraction or self.budget.max_seconds is None:
            return 0.0
        share = min(max(self.extraction_reserve, 0.0), 1.0) * self.budget.max_seconds
        return min(EXTRACTION_TIMEOUT_S, share)

    def model_for_depth(self, depth: int) -> str:
        """The model that roots a run or answers a sub-call at ``depth``."""
        if depth in self.models_by_depth:
            return self.models_by_depth[depth]
        if depth == 0:
            return self.root_model
        return self.sub_model or self.root_model

    def validate_tools(self) -> None:
        """Raise ``ValueError`` when a tool is named like a reserved REPL name."""
        reserved = set(RESERVED_NAMES) | set(CODEBASE_HELPERS)
        for group in (self.tools, self.sub_tools or {}):
            for name in group:
                if name in reserved:
                    raise ValueError(
                        f"tool name {name!r} is reserved in the REPL; choose another name"
                    )
                if not name.isidentifier():
                    raise ValueError(f"tool name {name!r} is not a Python identifier")


@dataclass
class RunResult:
    """What a run returned.

    Attributes:
        run_id: the trajectory id in the store.
        status: see :data:`rlmd.engine.budget.RUN_STATUSES`.
        answer: the answer text, or ``None`` when there is none.
        answer_source: ``"final" | "final_var" | "prose" | "extraction" | None``; an
            ``"extraction"`` answer came from the fallback call after a budget ran out.
        usage: the tree's usage dict (see :meth:`rlmd.engine.usage.Usage.to_dict`).
        iterations: root-model turns of this run.
        depth: this run's depth.
        error: why the run failed or stopped, if it did.
    """

    run_id: str
    status: str
    answer: str | None
    answer_source: str | None
    usage: dict[str, Any]
    iterations: int
    depth: int
    error: str | None = None


class Runtime:
    """What every run of one tree shares: models, sandbox factory, ledger, events."""

    def __init__(
        self,
        config: RunConfig,
        get_model: Callable[[str], Model],
        make_sandbox: Callable[[], Sandbox],
        bus: EventBus,
        ledger: Ledger,
    ) -> None:
        self.config = config
        self.get_model = get_model
        self.make_sandbox = make_sandbox
        self.bus = bus
        self.ledger = ledger


class RLMRun:
    """One RLM loop at one depth. Create it, then ``await run()`` once."""

    def __init__(
        self,
        rt: Runtime,
        question: str,
        context: Context,
        *,
        depth: int = 0,
        parent: RLMRun | None = None,
        parent_node_id: str | None = None,
        usage: Usage | None = None,
        tools: dict[str, Any] | None = None,
        sandbox: Sandbox | None = None,
        run_id: str | None = None,
    ) -> None:
        self.rt = rt
        self.cfg = rt.config
        self.question = question
        self.context = context
        self.depth = depth
        self.parent = parent
        self.parent_node_id = parent_node_id
        self.run_id = run_id or new_id()
        self.root_run_id = parent.root_run_id if parent else self.run_id
        self.usage = usage or Usage(parent=parent.usage if parent else None)
        self.tools = self.cfg.tools if tools is None else tools
        self.model = rt.get_model(self.cfg.model_for_depth(depth))
        self._sandbox = sandbox
        self._own_sandbox = sandbox is None
        self._cell_node: str | None = None
        self._subcall_gate = asyncio.Semaphore(max(1, self.cfg.max_concurrent_subcalls))
        self.iterations = 0
        self.outputs: list[str] = []  # every cell's stdout, stderr and error, for verify_answer
        self.messages: list[Message] = []
        self.history: list[Message] = []
        self._sent = 0  # messages already recorded in a root model_call event

    # -- events ---------------------------------------------------------------------------
    def emit(
        self, kind: str, node_id: str | None = None, parent_id: str | None = None, **data: Any
    ) -> None:
        self.rt.bus.emit(Event(kind, self.run_id, self.depth, node_id, parent_id, data))

    # -- the loop -------------------------------------------------------------------------
    async def run(self) -> RunResult:
        """Run to an answer or a limit.

        Returns:
            The :class:`RunResult`. Budget exhaustion, model failures and sandbox failures
            end the run with a status; they are not raised.

        Raises:
            asyncio.CancelledError: after recording the run as ``"cancelled"``.
        """
        meta = self.context.metadata(self.model.count_tokens)
        sub_name = self.cfg.model_for_depth(self.depth + 1)
        self.emit(
            "run.started",
            question=self.question,
            context=meta,
            models={
                "root": self.model.spec.public_dict(),
                "sub": self.rt.get_model(sub_name).spec.public_dict(),
            },
            sandbox={"kind": self.cfg.sandbox, "isolation": None},
            budget=self.cfg.budget.to_dict(),
            parent_run_id=self.parent.run_id if self.parent else None,
            parent_node_id=self.parent_node_id,
            root_run_id=self.root_run_id,
            workspace=self.cfg.workspace,
            pid=os.getpid(),
        )
        status, answer, source, error = "failed", None, None, None
        try:
            status, answer, source, error = await self._loop(meta)
        except asyncio.CancelledError:
            status, error = "cancelled", "the run was cancelled"
            raise
        except BudgetExhausted as exc:
            status, error = exc.status, str(exc)
            answer, source = await self._extract(str(exc))
        except Exception as exc:  # a model or sandbox failure ends this run, not the process
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self.usage.finish()
            if self._own_sandbox and self._sandbox is not None:
                await asyncio.shield(self._sandbox.close())
            result = RunResult(
                self.run_id,
                status,
                answer,
                source,
                self.usage.to_dict(),
                self.iterations,
                self.depth,
                error,
            )
            self.emit(
                "run.finished",
                status=status,
                answer=answer,
                answer_source=source,
                usage=result.usage,
                iterations=self.iterations,
                error=error,
            )
        return result

    async def _start_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = self.rt.make_sandbox()
        await self._sandbox.start(self._handle_call)
        await self._sandbox.load_context(self.context.value, codebase=self.context.is_codebase)
        callables = [n for n, v in self.tools.items() if callable(v)]
        values = {n: v for n, v in self.tools.items() if not callable(v)}
        if callables or values:
            await self._sandbox.define_tools(callables, values)
        self.emit(
            "sandbox.started",
            sandbox={"kind": self._sandbox.kind, "isolation": self._sandbox.isolation},
        )
        return self._sandbox

    async def _loop(self, meta: dict[str, Any]) -> tuple[str, str | None, str | None, str | None]:
        sandbox = await self._start_sandbox()
        sub_model = self.rt.get_model(self.cfg.model_for_depth(self.depth + 1))
        docs = {n: self.cfg.tool_docs.get(n, "a tool given by the user") for n in self.tools}
        self.messages = [
            {
                "role": "system",
                "content": prompts.system_prompt(
                    meta,
                    sub_window=sub_model.spec.context_window,
                    output_cap=self.cfg.output_cap,
                    tools=docs,
                    template=self.cfg.system_prompt,
                    question=self.question,
                ),
            },
            {"role": "user", "content": prompts.first_user_message(self.question, meta)},
        ]
        self.history = list(self.messages)
        budget = self.cfg.budget
        code_ran = False
        refused = False
        questioned = False  # verify_answer's one refusal is spent
        errors_in_a_row = 0
        previous_blocks: list[str] = []
        for i in range(budget.max_iterations):
            self.iterations = i + 1
            it_node = new_id()
            self.emit("iteration.started", it_node, None, index=i)
            await self._maybe_compact(it_node, sandbox)
            reply = await self._root_call(it_node)
            blocks = parsing.find_code_blocks(reply)
            last_turn = i + 1 >= budget.max_iterations
            if not blocks:
                prose = parsing.find_prose_final(reply)
                if prose and (code_ran or refused or not self.cfg.refuse_early_answer):
                    kind, value = prose
                    if kind == "final_var":
                        try:
                            value = str(await sandbox.get_variable(value))
                        except KeyError:
                            self._say(
                                f"FINAL_VAR({value}) names no variable. Use SHOW_VARS() to see them."
                            )
                            continue
                    elif not questioned and not last_turn and self._unverified(value):
                        questioned = True
                        self._say(self.cfg.unverified_answer_message.format(answer=value))
                        continue
                    return "completed", value, "prose", None
                if prose:
                    refused = True
                    self._say(self.cfg.early_answer_message)
                else:
                    self._say(prompts.NO_CODE)
                continue
            feedback, all_failed = [], True
            for b, code in enumerate(blocks):
                result = await self._run_cell(it_node, b, code, sandbox)
                all_failed = all_failed and result.error is not None
                self.outputs.append("\n".join((result.stdout, result.stderr, result.error or "")))
                feedback.append(
                    prompts.cell_feedback(b, code, result, self.cfg.output_cap, parsing.cap_output)
                )
                missing = parsing.final_undefined_name(code, result.error)
                if missing:
                    feedback.append(prompts.FINAL_NAME_ERROR.format(name=missing))
                elif result.error and result.final is None and parsing.has_final_call(code):
                    last = result.error.strip().splitlines()[-1:] or ["an error"]
                    feedback.append(prompts.FINAL_RAISED.format(error=last[0][:200]))
                if (
                    self.context.is_codebase
                    and result.stdout.strip() in ("[]", "0")
                    and parsing.calls_with_path(code, "grep")
                ):
                    # The demo's model grepped one file per turn until the turns ran out
                    # (617a0e799b08a095d37d).
                    feedback.append(prompts.GREP_ALL_HINT)
                if self.context.is_codebase and _raised(result, "KeyError"):
                    example = next(iter(self.context.value), "src/main.py")
                    feedback.append(prompts.CODEBASE_KEY_HINT.format(example=example))
                inspected = code_ran or parsing.cell_inspects(code)
                code_ran = True
                # A FINAL given in the same cell that ran out a budget still counts: the
                # model's own answer beats an extraction over its work.
                if result.final is not None and (
                    inspected or refused or not self.cfg.refuse_early_answer
                ):
                    if (
                        not questioned
                        and not last_turn
                        and self.rt.ledger.exhausted is None
                        and (
                            (parsing.final_is_literal(code) and self._unverified(result.final))
                            or (self.cfg.verify_answer and parsing.is_empty_answer(result.final))
                        )
                    ):
                        questioned = True
                        feedback.append(
                            self.cfg.unverified_answer_message.format(answer=result.final)
                        )
                        break
                    source = "final_var" if "FINAL_VAR" in code else "final"
                    return "completed", result.final, source, None
                if self.rt.ledger.exhausted is not None:
                    raise self.rt.ledger.exhausted
                if result.final is not None:
                    refused = True
                    feedback.append(self.cfg.early_answer_message)
                    break
            if blocks == previous_blocks:
                feedback.append(prompts.REPEATED)
            previous_blocks = blocks
            errors_in_a_row = errors_in_a_row + 1 if all_failed else 0
            limit = budget.max_consecutive_errors
            if limit is not None and errors_in_a_row >= limit:
                raise BudgetExhausted(
                    "max_errors", f"{errors_in_a_row} iterations in a row ended in errors"
                )
            if i + 1 < budget.max_iterations:
                # The last turn asks for an answer outright: the 1.5B model found the file in
                # turn 2 and re-ran the same grep until the turns ran out (6179e06561ff141c86a0).
                last = prompts.LAST_TURN if i + 2 == budget.max_iterations else prompts.NEXT_TURN
                feedback.append(last.format(turn=i + 2, max_turns=budget.max_iterations))
            self._say("\n\n".join(feedback))
        raise BudgetExhausted(
            "max_iterations", f"no final answer after {budget.max_iterations} iterations"
        )

    def _say(self, text: str) -> None:
        msg = {"role": "user", "content": text}
        self.messages.append(msg)
        self.history.append(msg)

    def _unverified(self, answer: str) -> bool:
        """Whether ``verify_answer`` questions ``answer``: short, and in no cell output yet."""
        return (
            self.cfg.verify_answer
            and parsing.is_short_answer(answer)
            and not parsing.answer_in_outputs(answer, self.outputs)
        )

    async def _root_call(self, it_node: str) -> str:
        """One root-model turn; returns the reply text as appended to the conversation: with
        ``stop_after_code_block``, ended at its first code block (fence closed)."""
        new = self.messages[self._sent :]
        stop = list(STOP_AFTER_BLOCK) if self.cfg.stop_after_code_block else None
        c = await self._call_model(
            self.model, list(self.messages), it_node, role="root", record=new, stop=stop
        )
        text = c.text
        if stop:
            maybe_stopped = c.stop_sequence is not None or (
                c.finish_reason == "stop" and not self.model.reports_stop
            )
            if maybe_stopped and not parsing.find_code_blocks(parsing.close_open_fence(text)):
                # The stop string closed or opened a fence that is not code (an output
                # block): ask again without it, so a FINAL written after it survives.
                c = await self._call_model(
                    self.model, list(self.messages), it_node, role="root", record=[]
                )
                text = c.text
            text = parsing.close_open_fence(parsing.cut_after_first_block(text))
        self._sent = len(self.messages) + 1
        reply = {"role": "assistant", "content": text}
        self.messages.append(reply)
        self.history.append(reply)
        return text

    async def _call_model(
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
    ) -> Completion:
        """Call ``model`` with budget checks, usage accounting and events.

        Args:
            check: check the shared budget first and bound the call by the loop's wall
                clock; ``False`` for the extraction call, which passes ``timeout_s``.
            stop: stop strings for the provider (see :meth:`Model.complete`).
            timeout_s: wall-clock bound in seconds when ``check`` is ``False``.

        Returns:
            The :class:`~rlmd.models.base.Completion`.

        Raises:
            BudgetExhausted: a shared limit is reached (checked before the call).
            ModelError: the call failed after retries.
        """
        if check:
            self.rt.ledger.check(subcall=role == "sub")
        depth = self.depth if depth is None else depth
        node = new_id()
        self.emit(
            "model_call.started",
            node,
            parent_node,
            role=role,
            model=model.name,
            messages=messages if record is None else record,
            depth=depth,
        )
        timeout = self.rt.ledger.remaining_seconds() if check else timeout_s
        try:
            if timeout is not None and timeout <= 0:
                raise BudgetExhausted(
                    "max_time", f"wall-clock budget of {self.cfg.budget.max_seconds:g} s used up"
                )
            try:
                # A timeout cancels the call; a streamed request then closes its connection
                # and a llama.cpp server stops generating (rlmd.models.openai).
                c = await asyncio.wait_for(
                    model.complete(messages, max_tokens=max_tokens, stop=stop), timeout
                )
            except TimeoutError:
                why = (
                    f"wall-clock budget of {self.cfg.budget.max_seconds:g} s used up during a model call"
                    if check
                    else f"no reply within the {timeout:g} s this call was given"
                )
                raise BudgetExhausted("max_time", why) from None
        except (ModelError, BudgetExhausted) as exc:
            self.emit(
                "model_call.finished",
                node,
                parent_node,
                role=role,
                model=model.name,
                error=str(exc),
            )
            if isinstance(exc, BudgetExhausted):
                self.rt.ledger.exhausted = self.rt.ledger.exhausted or exc
            raise
        self.rt.ledger.spend(c.input_tokens + c.output_tokens, c.cost_usd)
        if role == "sub":
            self.rt.ledger.subcalls += 1
        self.usage.record(model.name, depth, c.input_tokens, c.output_tokens, c.cost_usd)
        self.emit(
            "model_call.finished",
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

    async def _run_cell(self, it_node: str, index: int, code: str, sandbox: Sandbox) -> CellResult:
        node = new_id()
        self._cell_node = node
        self.emit("cell.started", node, it_node, index=index, code=code)
        timeout = self.cfg.budget.cell_timeout_s
        limits = getattr(sandbox, "limits", None)
        if limits is not None and limits.wall_s is not None:  # the sandbox's own limit holds too
            timeout = min(timeout, limits.wall_s)
        remaining = self.rt.ledger.remaining_seconds()
        if remaining is not None:
            timeout = min(timeout, max(remaining, 0.5))
        try:
            result = await sandbox.execute(code, timeout_s=timeout)
        finally:
            self._cell_node = None
        self.emit(
            "cell.finished",
            node,
            it_node,
            index=index,
            code=code,
            stdout=result.stdout,
            stderr=result.stderr,
            error=result.error,
            final=result.final,
            variables=[v.__dict__ for v in result.variables],
            restored=result.restored,
            duration_s=result.duration_s,
            timed_out=result.timed_out,
            kernel_restarted=result.kernel_restarted,
            lost_variables=result.lost_variables,
        )
        return result

    # -- calls from model code ------------------------------------------------------------
    async def _handle_call(self, fn: str, args: dict[str, Any]) -> Any:
        """Serve a call made by model code in this run's REPL (see ``CallHandler``)."""
        parent_node = self._cell_node
        if fn == "llm_query":
            return await self._llm_query(args.get("prompt"), args.get("model"), parent_node)
        if fn == "llm_query_batched":
            prompts_ = _as_list(args.get("prompts"), "prompts")
            return await self._batched(
                [self._llm_query(p, args.get("model"), parent_node) for p in prompts_]
            )
        if fn == "rlm_query":
            return await self._rlm_query(
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
                    self._rlm_query(p, c, args.get("model"), parent_node)
                    for p, c in zip(prompts_, ctxs, strict=True)
                ]
            )
        if fn == "tool":
            return await self._tool(args)
        raise CallError(f"unknown host function {fn!r}")

    async def _batched(self, calls: list) -> list[str]:
        """Run calls concurrently (bounded); a failed slot holds ``"Error: ..."``, never
        failing the batch. A budget that runs out still ends the run after the cell."""

        async def one(call) -> str:
            async with self._subcall_gate:
                try:
                    return await call
                except CallError as exc:
                    return f"Error: {exc}"

        return list(await asyncio.gather(*(one(c) for c in calls)))

    def _sub_model(self, name: str | None) -> Model:
        target = name or self.cfg.model_for_depth(self.depth + 1)
        return self._model_named_by_code(target)

    def _model_named_by_code(self, name: str) -> Model:
        """The model that sandboxed code asked for by ``name``.

        Model code is untrusted: a ``scripted:file.py:fn`` or ``local:/path`` shorthand would
        make the host import or parse a file the sandbox just wrote (the kernel's working
        folder is a host path). So those two providers are allowed only under a name the
        user configured for this run (root, sub or per-depth model).

        Raises:
            CallError: unknown model, or a file-loading shorthand the run did not configure.
        """
        provider = name.partition(":")[0] if ":" in name else ""
        if provider in FILE_LOADING_PROVIDERS:
            configured = {
                self.cfg.root_model,
                self.cfg.sub_model,
                *self.cfg.models_by_depth.values(),
            }
            if name not in configured:
                raise CallError(
                    f"model {name!r} is not allowed from the REPL: '{provider}:' models load "
                    "files, so code may only name the models this run was configured with "
                    "or configured model names"
                )
        try:
            return self.rt.get_model(name)
        except (KeyError, ValueError) as exc:
            raise CallError(f"unknown model {name!r}: {exc}") from None

    async def _llm_query(self, prompt: Any, model_name: str | None, parent_node: str | None) -> str:
        if not isinstance(prompt, str):
            raise CallError(f"llm_query needs a str prompt, got {type(prompt).__name__}")
        model = self._sub_model(model_name)
        messages = [{"role": "user", "content": prompt}]
        self._check_window(model, messages)
        try:
            c = await self._call_model(
                model, messages, parent_node, role="sub", depth=self.depth + 1
            )
            return c.text
        except BudgetExhausted as exc:
            raise CallError(
                f"budget exhausted: {exc}. The run is ending; no more sub-calls."
            ) from None
        except ModelError as exc:
            raise CallError(f"sub-call to {model.name!r} failed: {exc}") from None

    def _check_window(self, model: Model, messages: list[Message]) -> None:
        tokens = model.count_messages(messages)
        window, reserve = model.spec.context_window, model.spec.max_output_tokens
        if tokens > window - reserve:
            raise CallError(
                f"prompt too large for model {model.name!r}: {tokens:,} tokens, but only "
                f"{window - reserve:,} fit ({window:,}-token window minus {reserve:,} reserved for "
                "the reply). Split the text into smaller chunks (for example llm_query_batched over "
                "slices), or use rlm_query, whose child keeps the text in its own REPL."
            )

    async def _rlm_query(
        self, prompt: Any, context: Any, model_name: str | None, parent_node: str | None
    ) -> str:
        if not isinstance(prompt, str):
            raise CallError(f"rlm_query needs a str prompt, got {type(prompt).__name__}")
        child_depth = self.depth + 1
        if child_depth >= self.cfg.budget.max_depth:
            # At max depth a child RLM would exceed the limit: a plain sub-call instead.
            text = prompt if context is None else f"{prompt}\n\nInput:\n{_as_text(context)}"
            return await self._llm_query(text, model_name, parent_node)
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
                if len(prompt) <= 4000
                else prompt[:2000] + "\n[... the full request is in `context`]"
            )
            ctx = load_context(prompt)
        else:
            question, ctx = prompt, load_context(context)
        child = RLMRun(
            self.rt,
            question,
            ctx,
            depth=child_depth,
            parent=self,
            parent_node_id=parent_node,
            tools=self.cfg.tools if self.cfg.sub_tools is None else self.cfg.sub_tools,
        )
        if model_name:
            child.model = self._model_named_by_code(model_name)
        result = await child.run()
        if result.answer is not None:
            return result.answer
        raise CallError(
            f"child run {result.run_id} ended with status {result.status} and no answer: {result.error}"
        )

    async def _tool(self, args: dict[str, Any]) -> Any:
        name = args.get("name")
        fn = self.tools.get(name) if isinstance(name, str) else None
        if not callable(fn):
            raise CallError(f"no tool named {name!r}")
        try:
            value = fn(*args.get("args", []), **args.get("kwargs", {}))
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise CallError(f"tool {name} raised {type(exc).__name__}: {exc}") from None
        try:
            json.dumps(value)
            return value
        except (TypeError, ValueError):
            return repr(value)

    # -- fallbacks ------------------------------------------------------------------------
    async def _extract(self, reason: str = "") -> tuple[str | None, str | None]:
        """The best answer after a budget ran out: one bounded call, marked ``"extraction"``.

        The call continues the root conversation with one more user message (``reason`` and
        the question), so a server's prompt cache serves everything but that message: on
        the loaded test machine a fresh 2K-token transcript took longer than the 120 s
        bound (``6179e06561ff141c86a0``). A conversation too long for that falls back to a
        condensed transcript under its own system prompt.

        Returns:
            ``(answer, "extraction")``, or ``(None, None)`` when there is nothing to go on,
            no time is left, or the call fails.
        """
        if (
            not self.cfg.extraction
            or self.depth > 0
            or not any(m["role"] == "assistant" for m in self.history)
        ):
            # A child's answer only feeds its parent's code, which is ending too: one
            # extraction at the root is enough.
            return None, None
        ask = prompts.EXTRACTION_USER.format(
            reason=reason or "a limit was reached", question=self.question
        )
        messages = [*self.messages, {"role": "user", "content": ask}]
        spec = self.model.spec
        if self.model.count_messages(messages) + EXTRACTION_MAX_TOKENS > spec.context_window:
            # A quarter of the window (at ~3 characters per token, conservative for code)
            # keeps the extraction call cheap: it runs after a budget is already spent.
            transcript = _condense(self.history[1:], spec.context_window // 4 * 3)
            messages = [
                {"role": "system", "content": prompts.EXTRACTION_SYSTEM},
                {
                    "role": "user",
                    "content": f"Question: {self.question}\n\nWork so far:\n{transcript}",
                },
            ]
        # Bounded by what the wall-clock budget has left (the loop kept a reserve for this);
        # a loop that overran its share (a cell or call that ignored cancellation) still
        # leaves the extraction up to 1 s of its reserve.
        timeout = EXTRACTION_TIMEOUT_S
        left = self.rt.ledger.remaining_seconds(include_reserve=True)
        if left is not None:
            timeout = min(timeout, max(left, min(self.rt.ledger.reserve_s, 1.0)))
        if timeout <= 0:
            return None, None
        try:
            c = await self._call_model(
                self.model,
                messages,
                None,
                role="extraction",
                check=False,
                max_tokens=EXTRACTION_MAX_TOKENS,
                timeout_s=timeout,
            )
        except (ModelError, BudgetExhausted):
            return None, None
        return c.text.strip() or None, "extraction"

    async def _maybe_compact(self, it_node: str, sandbox: Sandbox) -> None:
        """Summarise older turns when the conversation nears the root model's window; the
        full history stays in the REPL as ``history``."""
        if not self.cfg.compaction or len(self.messages) < 6:
            return
        spec = self.model.spec
        limit = (spec.context_window - spec.max_output_tokens) * self.cfg.compaction_threshold
        if self.model.count_messages(self.messages) < limit:
            return
        head, middle, tail = self.messages[:2], self.messages[2:-2], self.messages[-2:]
        compacted = await self._call_model(
            self.model,
            [
                {"role": "system", "content": prompts.COMPACTION_SYSTEM},
                {"role": "user", "content": _condense(middle, int(limit * 3))},
            ],
            it_node,
            role="compaction",
        )
        summary = compacted.text
        note = {
            "role": "user",
            "content": f"Summary of earlier turns (full log in the REPL variable `history`):\n{summary}",
        }
        self.messages = head + [note] + tail
        self._sent = len(self.messages)
        await sandbox.set_variable("history", self.history)
        self.emit("compaction", new_id(), it_node, summarised_messages=len(middle), summary=summary)


def _raised(result: CellResult, name: str) -> bool:
    """Whether the cell ended with exception ``name`` (its traceback's last line)."""
    lines = (result.error or "").strip().splitlines()
    return bool(lines) and lines[-1].startswith(name)


def _as_list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise CallError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)[:1_000_000]


def _condense(messages: list[Message], max_chars: int) -> str:
    """The messages as one transcript of at most ``max_chars`` characters, oldest cut first."""
    text = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
    return text if len(text) <= max_chars else "[... earlier turns cut ...]\n" + text[-max_chars:]

"""The RLM loop: one run at one depth.

Per iteration the root model gets the conversation; the first ```repl block of its reply runs
in the run's REPL, and the output goes back as the next user turn. Code in the REPL calls the
host (:mod:`rlmd.engine.host`: ``llm_query`` sub-calls, ``rlm_query`` child runs, tools); every
model call is metered against one shared budget (:mod:`rlmd.engine.metered`). The run ends
when code calls ``FINAL``/``FINAL_VAR`` (judged by :mod:`rlmd.engine.feedback`), or when a
budget runs out, and then one extraction call gives the best available answer
(:mod:`rlmd.engine.fallbacks`). Design: Zhang, Kraska, Khattab, arXiv:2512.24601.

The REPL comes prepared: whoever owns it (a one-shot run, a daemon workspace, the local child
starter) started it and bound ``context``; a run only attaches its host-call handler and its
tools (:func:`prepare_sandbox` is the preparation for a fresh one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any, BinaryIO

from rlmd.context import Context, ContextMeta, Spool, map_ready
from rlmd.engine import feedback, parsing, prompts, verify
from rlmd.engine.budget import BudgetExhausted
from rlmd.engine.config import STOP_AFTER_BLOCK, RunConfig, RunResult
from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    Compaction,
    IterationStarted,
    RunFinished,
    RunStarted,
    SandboxStarted,
    new_id,
)
from rlmd.engine.fallbacks import extract, maybe_compact
from rlmd.engine.feedback import LoopState, Verdict
from rlmd.engine.host import ChildRequest, HostCalls
from rlmd.engine.metered import Meter, Runtime
from rlmd.engine.usage import Usage
from rlmd.models.base import Message, Model, ModelError
from rlmd.sandbox.base import CallError, CallHandler, CellResult, Sandbox

if TYPE_CHECKING:
    from rlmd.sandbox.files import ContextFile

__all__ = ["RLMRun", "RunConfig", "RunResult", "Runtime", "prepare_sandbox", "run_child_here"]

INLINE_METADATA_CHARS = 65_536
"""A text context up to this long has its metadata computed on the event loop (a few ms at
most); a longer one, a container or a codebase in a worker thread."""

Outcome = tuple[str, str | None, str | None, str | None]
"""``(status, answer, answer_source, error)``."""


async def _no_calls(fn: str, args: dict[str, Any]) -> Any:
    raise CallError(f"{fn}() is not available before the run starts")


async def prepare_sandbox(
    sandbox: Sandbox, context: Context, handler: CallHandler = _no_calls
) -> Sandbox:
    """Start ``sandbox`` (serving host calls with ``handler``; by default refusing them) and
    bind ``context`` in it: the preparation a run's REPL needs before :class:`RLMRun`
    attaches its handler. Returns ``sandbox``.

    Raises:
        SandboxError: the sandbox could not start or take the context.
    """
    await sandbox.start(handler)
    await sandbox.load_context(context.value, codebase=context.is_codebase)
    return sandbox


class Starting:
    """A run's own REPL whose start (kernel launch and hello) is under way before the run
    exists: :func:`rlmd.engine.run_task` starts it while the context is still being read.
    The run then binds the context and attaches its handler (:meth:`RLMRun.run`), and closes
    the REPL at its end like any REPL it owns.

    With ``spool`` (the read's :class:`~rlmd.context.Spool`), the codebase's files are
    written on into a file in the REPL's folder as they are read, from the moment the
    folder exists, and the context is bound from it as soon as the read ends (when the
    backend has no such folder, or the spool failed, the context is bound the usual way)."""

    def __init__(self, sandbox: Sandbox, spool: Spool | None = None) -> None:
        self.sandbox = sandbox
        self.spool = spool
        self.file: ContextFile | None = None
        self.started = asyncio.ensure_future(self._start())
        if spool is not None:
            spool.offer(self._new_file)  # tried by the reader thread as each file comes

    def _new_file(self) -> BinaryIO | None:
        self.file = self.sandbox.new_context_file()
        return None if self.file is None else self.file.file

    async def _start(self) -> None:
        await self.sandbox.start(_no_calls)
        if self.spool is not None:  # its folder exists now, if the backend has one
            await asyncio.to_thread(self.spool.offer, self._new_file)
            if self.file is None:
                self.spool.discard()  # no folder: the kept bytes go

    async def prepare(self, context: Context, handler: CallHandler) -> Sandbox:
        """Wait for the start (raising what it raised), then serve ``handler`` and bind
        ``context`` (see :func:`prepare_sandbox`)."""
        await self.started
        spool, file = self.spool, self.file
        if spool is None or file is None:
            return await prepare_sandbox(self.sandbox, context, handler)
        await self.sandbox.start(handler)
        index_at = await asyncio.to_thread(spool.finish, list(context.value))
        if index_at is None:  # a write failed (a full folder?): the usual way
            with contextlib.suppress(OSError):
                os.unlink(file.path)
            await self.sandbox.load_context(context.value, codebase=True)
        else:
            await self.sandbox.load_context_file(context.value, file, index_at)
        return self.sandbox

    async def abandon(self) -> None:
        """The run will not happen (its context failed to load, or it was cancelled): stop
        the start and close the REPL."""
        self.started.cancel()
        try:
            await asyncio.gather(self.started, return_exceptions=True)
        finally:  # a second cancel while the start stops must still close the REPL
            if self.spool is not None:
                self.spool.discard()
            await asyncio.shield(self.sandbox.close())


def start_sandbox(sandbox: Sandbox, spool: Spool | None = None) -> Starting:
    """Start ``sandbox`` now, refusing host calls until a run takes it (see :class:`Starting`)."""
    return Starting(sandbox, spool)


async def run_child_here(rt: Runtime, request: ChildRequest) -> RunResult:
    """The default child starter: the child run in this event loop, in a fresh REPL of the
    tree's sandbox factory (closed when it ends)."""
    child = RLMRun(
        rt,
        request.question,
        request.context,
        depth=request.depth,
        parent_run_id=request.parent_run_id,
        parent_node_id=request.parent_node_id,
        root_run_id=request.root_run_id,
        usage=Usage(parent=request.parent_usage),
        tools=request.tools,
        model=request.model,
    )
    return await child.run()


class RLMRun:
    """One RLM loop at one depth. Create it, then ``await run()`` once.

    Args:
        rt: what the tree shares.
        question / context: the run's input.
        depth: 0 for the root run.
        parent_run_id / parent_node_id / root_run_id: where a child run hangs.
        usage: the run's usage (a child's is chained to its parent's).
        tools: user tools (default: the config's).
        model: the root model (default: the config's for ``depth``).
        sandbox: a prepared REPL (started, ``context`` bound) owned by the caller; ``None``
            makes a fresh one from ``rt.make_sandbox``, closed at the end.
        run_id: the run's id (default: a new one).
        starting: a REPL the run owns whose start is under way (:func:`start_sandbox`);
            the run binds ``context`` in it and closes it at the end.
    """

    def __init__(
        self,
        rt: Runtime,
        question: str,
        context: Context,
        *,
        depth: int = 0,
        parent_run_id: str | None = None,
        parent_node_id: str | None = None,
        root_run_id: str | None = None,
        usage: Usage | None = None,
        tools: dict[str, Any] | None = None,
        model: Model | None = None,
        sandbox: Sandbox | None = None,
        run_id: str | None = None,
        starting: Starting | None = None,
    ) -> None:
        self.rt = rt
        self.cfg = rt.config
        self.question = question
        self.context = context
        self.depth = depth
        self.parent_run_id = parent_run_id
        self.parent_node_id = parent_node_id
        self.run_id = run_id or new_id()
        self.root_run_id = root_run_id or self.run_id
        self.tools = self.cfg.tools if tools is None else tools
        self.model = model or rt.get_model(self.cfg.model_for_depth(depth))
        self.meter = Meter(rt, self.run_id, depth, usage or Usage())
        self.host = HostCalls(self.meter, self.root_run_id, self.tools, context)
        self._sandbox = sandbox
        self._own_sandbox = sandbox is None
        self._starting = starting
        self._preparing: asyncio.Future[Sandbox] | None = None
        self._map_later = False
        self.iterations = 0
        self.state = LoopState()
        self._resampling = self.cfg.resample_repeats > 0  # off once the model refuses it

    # -- the run --------------------------------------------------------------------------
    async def run(self) -> RunResult:
        """Run to an answer or a limit.

        Returns:
            The :class:`RunResult`. Budget exhaustion, model failures and sandbox failures
            end the run with a status; they are not raised.

        Raises:
            asyncio.CancelledError: after recording the run as ``"cancelled"``.
            KeyError: the sub-call model's name is unknown (nothing recorded, the REPL
                being prepared for the run closed).
        """
        # A REPL the run owns starts (its kernel binding the context in its own process)
        # while the metadata is computed: the first model request waits for the slower of
        # the two, not for both in turn.
        if self._starting is not None:  # started by run_task while the context loaded
            self._sandbox = self._starting.sandbox
            self._preparing = asyncio.ensure_future(self._starting.prepare(self.context, self.host))
        elif self._sandbox is None:
            self._sandbox = self.rt.make_sandbox()
            self._preparing = asyncio.ensure_future(
                prepare_sandbox(self._sandbox, self.context, self.host)
            )
        try:
            # Counting a big context's tokens is CPU work: in a thread, so the daemon's other
            # clients are served meanwhile (the count is cached on the context). A short
            # string is counted here: ~60 ns a character, less than the two thread hand-overs.
            value = self.context.value
            if isinstance(value, str) and len(value) <= INLINE_METADATA_CHARS:
                meta = self.context.metadata(self.model.count_tokens)
            else:
                meta = await asyncio.to_thread(self.context.metadata, self.model.count_tokens)
            sub = self.rt.get_model(self.cfg.model_for_depth(self.depth + 1))  # KeyError
        except BaseException:
            await self._abandon_preparation()
            raise
        # A codebase whose symbol index is still being built gets its map with a later turn
        self._map_later = self.context.is_codebase and "map" not in meta
        self.meter.emit(
            RunStarted,
            question=self.question,
            context=meta,
            models={
                "root": self.model.spec.public_dict(),
                "sub": sub.spec.public_dict(),
            },
            sandbox={"kind": self.cfg.sandbox, "isolation": None},
            budget=self.cfg.budget.to_dict(),
            parent_run_id=self.parent_run_id,
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
        except feedback.InfrastructureFault as exc:  # no answer is made up from a broken REPL
            status, error = exc.status, str(exc)
        except BudgetExhausted as exc:
            status, error = exc.status, str(exc)
            answer, source = await extract(
                self.meter, self.model, self.state, self.question, str(exc)
            )
        except Exception as exc:  # a model or sandbox failure ends this run, not the process
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            usage = self.meter.usage
            usage.finish()
            if self._own_sandbox and self._sandbox is not None:
                await asyncio.shield(self._sandbox.close())
            result = RunResult(
                self.run_id,
                status,
                answer,
                source,
                usage.to_dict(),
                self.iterations,
                self.depth,
                error,
            )
            self.meter.emit(
                RunFinished,
                status=status,
                answer=answer,
                answer_source=source,
                usage=result.usage,
                iterations=self.iterations,
                error=error,
            )
        return result

    async def _attach_sandbox(self) -> Sandbox:
        """Attach this run's host-call handler and tools to its REPL (preparing a fresh one
        if the run owns it)."""
        if self._preparing is not None:
            await self._preparing  # started with the run (see run())
        elif self._sandbox is None:
            self._sandbox = self.rt.make_sandbox()
            await prepare_sandbox(self._sandbox, self.context, self.host)
        else:
            await self._sandbox.start(self.host)  # a started REPL is re-served with it
        sandbox = self._sandbox
        assert sandbox is not None
        callables = [n for n, v in self.tools.items() if callable(v)]
        values = {n: v for n, v in self.tools.items() if not callable(v)}
        if callables or values:
            await sandbox.define_tools(callables, values)
        self.meter.emit(
            SandboxStarted, sandbox={"kind": sandbox.kind, "isolation": sandbox.isolation}
        )
        return sandbox

    async def _abandon_preparation(self) -> None:
        """The run ends before it started (cancelled while its metadata was computed): stop
        the REPL being prepared for it."""
        if self._preparing is None or self._sandbox is None:
            return
        self._preparing.cancel()
        try:
            await asyncio.gather(self._preparing, return_exceptions=True)
        finally:  # even if cancelled again meanwhile: the REPL must not outlive the run
            if self._starting is not None:  # its start may not have been awaited yet
                await self._starting.abandon()
            else:
                await asyncio.shield(self._sandbox.close())

    async def _send_map_if_ready(self) -> None:
        """Add the codebase's map to the turn about to be sent once its background index
        build has ended (the first request did not wait for it)."""
        if not self._map_later or not map_ready(self.context):
            return
        self._map_later = False
        meta = await asyncio.to_thread(self.context.metadata, self.model.count_tokens)
        state = self.state
        last = state.messages[-1]
        if meta.get("map") and last["role"] == "user":
            note = "\n\n" + prompts.map_ready_note(meta["map"])
            last["content"] += note
            if state.history[-1] is not last:  # a folded turn's message (the model's view)
                state.history[-1]["content"] += note

    async def _loop(self, meta: ContextMeta) -> Outcome:
        """The algorithm: the root model sees the question and the context's metadata; each
        turn, the first code block of its reply runs in the REPL and the output is fed back,
        until code gives a ``FINAL`` answer the rules accept or a budget runs out."""
        sandbox = await self._attach_sandbox()
        self._open_conversation(meta, self._cell_limit(sandbox))
        budget, state = self.cfg.budget, self.state
        for i in range(budget.max_iterations):
            self.iterations = i + 1
            last_turn = i + 1 >= budget.max_iterations
            it_node = new_id()
            self.meter.emit(IterationStarted, it_node, None, index=i)
            if i:
                await self._send_map_if_ready()
            await maybe_compact(self.meter, self.model, self.state, it_node, sandbox)
            reply = await self._root_call(it_node)
            if self._resampling and feedback.repeats_a_cell(state, parsing.find_code_blocks(reply)):
                reply = await self._resample(it_node, reply)
            blocks = parsing.find_code_blocks(reply)
            if blocks:
                outcome = await self._code_turn(it_node, i, blocks, sandbox, last_turn)
            else:
                outcome = await self._prose_turn(reply, sandbox, last_turn)
            if outcome is not None:
                return outcome
        raise BudgetExhausted(
            "max_iterations", f"no final answer after {budget.max_iterations} iterations"
        )

    def _cell_limit(self, sandbox: Sandbox) -> float:
        """A cell's own time limit, seconds: the cell timeout, or the sandbox's ``wall_s``
        limit if lower."""
        timeout = self.cfg.budget.cell_timeout_s
        limits = getattr(sandbox, "limits", None)
        if limits is not None and limits.wall_s is not None:  # the sandbox's own limit holds too
            timeout = min(timeout, limits.wall_s)
        return timeout

    def _open_conversation(self, meta: ContextMeta, cell_limit_s: float) -> None:
        """The system prompt and the first user turn (the question and the metadata)."""
        cfg, state = self.cfg, self.state
        sub_model = self.rt.get_model(cfg.model_for_depth(self.depth + 1))
        docs = {n: cfg.tool_docs.get(n, "a tool given by the user") for n in self.tools}
        system = prompts.system_prompt(
            meta,
            sub_window=sub_model.spec.context_window,
            output_cap=cfg.output_cap,
            tools=docs,
            template=cfg.system_prompt,
            question=self.question,
            cell_limit_s=cell_limit_s,
        )
        state.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompts.first_user_message(self.question, meta)},
        ]
        state.history = list(state.messages)

    async def _code_turn(
        self, it_node: str, i: int, blocks: list[str], sandbox: Sandbox, last_turn: bool
    ) -> Outcome | None:
        """Run the reply's code blocks; end the run on an accepted ``FINAL``, else feed the
        outputs and the rules' notes back as the next user turn.

        Raises:
            BudgetExhausted: a budget ran out during the cells (and no FINAL answered).
        """
        cfg, state = self.cfg, self.state
        notes, all_failed = [], True
        repeated = feedback.repeats_a_cell(state, blocks)  # before the cells change what ran
        insisting, state.final_not_taken = state.final_not_taken, False
        if feedback.skip_repeat(state, blocks) and not insisting:
            notes = [
                prompts.REPEATED_NOT_RUN,
                *feedback.end_of_turn(state, blocks, False, cfg.budget, i),
            ]
            state.say("\n\n".join(notes))
            if not last_turn:
                self._fold(it_node, i, [prompts.FOLDED_REPEAT])
            return None
        results: list[CellResult] = []
        hints: list[str] = []
        for b, code in enumerate(blocks):
            result = await self._run_cell(it_node, b, code, sandbox)
            results.append(result)
            if result.final is None:
                feedback.count_kernel_death(state, result)
            all_failed = all_failed and result.error is not None
            if result.error is None:  # the REPL's state may have changed: a cell that
                state.raised_cells.clear()  # raised before may work now (e.g. after an import)
            elif state.kernel_deaths == 0:  # the code's own fault
                state.raised_cells.add(feedback.normalise(code))
            state.outputs.append("\n".join((result.stdout, result.stderr, result.error or "")))
            if self.host.tally.results:
                state.subcalls = self.host.tally
            notes.append(prompts.cell_feedback(b, code, result, cfg.output_cap, parsing.cap_output))
            cell_hints = feedback.cell_hints(self.context, code, result)
            notes += cell_hints
            hints += cell_hints
            inspected = state.code_ran or parsing.cell_inspects(code)
            state.code_ran = True
            verdict = feedback.judge_final(
                cfg,
                state,
                code,
                result,
                inspected=inspected,
                last_turn=last_turn,
                budget_spent=self.rt.ledger.exhausted,
                context=self.context,
                question=self.question,
            )
            if verdict is Verdict.ACCEPT:
                source = "final_var" if "FINAL_VAR" in code else "final"
                if state.concern is not None:
                    source = "unverified"
                return "completed", result.final, source, None
            if verdict is Verdict.QUESTION:
                state.questioned = state.final_not_taken = True
                assert state.concern is not None and result.final is not None
                notes.append(feedback.question_message(cfg, state.concern, result.final))
                break
            if self.rt.ledger.exhausted is not None:
                raise self.rt.ledger.exhausted
            if verdict is Verdict.REFUSE:
                state.refused = state.final_not_taken = True
                notes.append(cfg.early_answer_message)
                break
        notes += feedback.end_of_turn(state, blocks, all_failed, cfg.budget, i)
        state.say("\n\n".join(notes))
        outputs = state.outputs[len(state.outputs) - len(results) :]
        # A turn that failed as a whole, or repeated a cell and printed what it printed
        # before, leaves the model's view; not a question or refusal of a FINAL, nor a cell
        # that timed out or lost the REPL's state (what the model must know stays).
        same = repeated and outputs == state.previous_outputs
        lost = any(r.timed_out or r.kernel_restarted for r in results)
        # The last turn stays (the extraction continues this conversation: prompt cache).
        if (all_failed or same) and not (state.final_not_taken or lost or last_turn):
            lines = feedback.fold_lines(
                results, hints, repeated=repeated, output_cap=cfg.output_cap
            )
            self._fold(it_node, i, lines)
        else:
            state.folded = None
        state.previous_outputs = outputs
        return None

    def _fold(self, it_node: str, i: int, lines: list[str]) -> None:
        """With ``fold_failed_turns``, take the failed turn ``i`` (0-based) just closed out
        of the model's view (:func:`feedback.fold_turn`, with a turn note that points at
        no output above) and record what it was replaced by."""
        if not self.cfg.fold_failed_turns:
            return
        note = feedback.next_turn_note(i, self.cfg.budget.max_iterations, folded=True)
        merged = feedback.fold_turn(self.state, lines, note)
        if merged is not None and self.state.folded is not None:
            base = self.state.folded[0]
            self.meter.emit(
                Compaction,
                new_id(),
                it_node,
                summarised_messages=2,
                summary=merged["content"][len(base) :].lstrip(),
                reason="failed_turn",
            )

    async def _prose_turn(self, reply: str, sandbox: Sandbox, last_turn: bool) -> Outcome | None:
        """A reply without code: accept a ``FINAL`` written in prose (once code has looked),
        question or refuse it, or ask for code. Returns the outcome if the run ends."""
        cfg, state = self.cfg, self.state
        state.folded = None
        prose = parsing.find_prose_final(reply)
        if prose and (state.code_ran or state.refused or not cfg.refuse_early_answer):
            kind, value = prose
            if kind == "final_var":
                try:
                    value = str(await sandbox.get_variable(value))
                except KeyError:
                    state.say(f"FINAL_VAR({value}) names no variable. Use SHOW_VARS() to see them.")
                    return None
            concern = feedback.concern_about(
                cfg,
                state,
                self.context,
                value,
                literal=kind != "final_var",
                stderr="",
                question=self.question,
            )
            if concern is not None and not state.questioned and not last_turn:
                state.questioned = True
                state.say(feedback.question_message(cfg, concern, value))
                return None
            return "completed", value, "prose" if concern is None else "unverified", None
        if prose:
            state.refused = True
            state.say(cfg.early_answer_message)
        else:
            state.say(prompts.NO_CODE)
        return None

    async def _resample(self, it_node: str, reply: str) -> str:
        """Ask again for a turn whose code repeats a cell (:func:`feedback.repeats_a_cell`),
        up to ``resample_repeats`` times at a higher temperature: the first reply with other
        code (or a ``FINAL`` in prose) replaces ``reply``; else ``reply`` stands and the
        repeat rules apply, as they do for this and every later turn of the run when a
        re-sample fails (a model that takes only its default temperature, such as OpenAI's
        reasoning models, refuses the request). Returns the reply the turn goes on with."""
        state = self.state
        for attempt in range(1, self.cfg.resample_repeats + 1):
            state.drop_reply()
            try:
                again = await self._root_call(it_node, feedback.resample_sampling(attempt))
            except ModelError:  # recorded as the call's error; the turn goes on without it
                self._resampling = False
                state.reply(reply)
                return reply
            blocks = parsing.find_code_blocks(again)
            if not feedback.repeats_a_cell(state, blocks) and (
                blocks or parsing.find_prose_final(again)
            ):
                return again
        state.drop_reply()
        state.reply(reply)
        return reply

    async def _root_call(self, it_node: str, sampling: dict[str, Any] | None = None) -> str:
        """One root-model turn (with ``sampling`` over the model's own, for a re-sample);
        returns the reply text as appended to the conversation: with
        ``stop_after_code_block``, ended at its first code block (fence closed)."""
        state = self.state
        # record_prompts: the whole prompt in the event (training samples need it exactly).
        new = None if self.cfg.record_prompts else state.history[state.sent :]
        stop = list(STOP_AFTER_BLOCK) if self.cfg.stop_after_code_block else None
        call = self.meter.call
        c = await call(
            self.model,
            list(state.messages),
            it_node,
            role="root",
            record=new,
            stop=stop,
            sampling=sampling,
        )
        text = c.text
        if stop:
            maybe_stopped = c.stop_sequence is not None or (
                c.finish_reason == "stop" and not self.model.reports_stop
            )
            if maybe_stopped and not parsing.find_code_blocks(parsing.close_open_fence(text)):
                # The stop string closed or opened a fence that is not code (an output
                # block): ask again without it, so a FINAL written after it survives.
                again: list[Message] | None = None if self.cfg.record_prompts else []
                c = await call(
                    self.model,
                    list(state.messages),
                    it_node,
                    role="root",
                    record=again,
                    sampling=sampling,
                )
                text = c.text
            text = parsing.close_open_fence(parsing.cut_after_first_block(text))
        state.sent = len(state.history) + 1
        state.reply(text)
        return text

    async def _run_cell(self, it_node: str, index: int, code: str, sandbox: Sandbox) -> CellResult:
        """Run one cell under the tighter of the cell timeout and the sandbox's own wall
        limit (its own time: time blocked on sub-calls is not counted), and within the
        wall-clock budget left (everything counted)."""
        node = new_id()
        self.host.cell_node, self.host.cell_code, self.host.cell_next = node, code, None
        self.host.tally = verify.SubcallTally()
        self.meter.emit(CellStarted, node, it_node, index=index, code=code)
        timeout = self._cell_limit(sandbox)
        remaining = self.rt.ledger.remaining_seconds()
        wall = None if remaining is None else max(remaining, 0.5)
        try:
            result = await sandbox.execute(code, timeout_s=timeout, wall_limit_s=wall)
        finally:
            self.host.cell_node = self.host.cell_code = None
        self.rt.bus.emit(
            CellFinished.of(
                result,
                index=index,
                code=code,
                run_id=self.run_id,
                depth=self.depth,
                node_id=node,
                parent_id=it_node,
            )
        )
        return result

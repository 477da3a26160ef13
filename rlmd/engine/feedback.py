"""The loop's state and the rules that turn a turn's results into the next user message:
hints after a cell, whether a ``FINAL`` answer is accepted, questioned or refused, and the
end-of-turn notes. Small functions over :class:`LoopState`; the loop applies what they
decide."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rlmd.context import Context
from rlmd.engine import parsing, prompts, verify
from rlmd.engine.budget import Budget, BudgetExhausted
from rlmd.engine.config import RunConfig
from rlmd.models.base import Message, Model
from rlmd.sandbox.base import CellResult
from rlmd.sandbox.messages import died_text

MAX_KERNEL_DEATHS = 3
"""Cells in a row whose kernel died for no limit's sake before the run ends ``sandbox_failed``."""

_DIED = died_text("", []).split("(")[0]
"""How the sandbox words a kernel death that no limit, timeout or interrupt caused."""


class InfrastructureFault(Exception):
    """The sandbox keeps failing under the model (``status``: ``"sandbox_failed"``); telling
    the model again would only spend turns, and no answer should be made up from it."""

    status = "sandbox_failed"


@dataclass
class LoopState:
    """What one run's loop knows between turns.

    Attributes:
        messages: the root conversation as the model sees it (compacted when long).
        history: every message, never compacted (bound in the REPL as ``history`` after a
            compaction).
        sent: messages of ``history`` already recorded in a root model-call event (the
            store keeps every message as it was, whatever the model's view became).
        outputs: every cell's stdout, stderr and error, for answer verification.
        code_ran: a cell has run.
        refused: the early-answer refusal is spent.
        questioned: the answer-verification refusal is spent.
        errors_in_a_row: iterations in a row whose cells all raised.
        kernel_deaths: cells in a row whose kernel died for no limit's sake.
        previous_blocks: the code blocks of the previous turn.
        concern: why the verifier doubts the answer just judged (questioned, or accepted
            as ``"unverified"``), else ``None``.
        repeats: turns in a row whose code equals the previous turn's.
        final_not_taken: the previous turn's ``FINAL`` was refused or questioned (giving it
            again is how the model insists, so that turn is never skipped as a repeat).
        subcalls: the sub-call results of the last cell that made sub-calls (what an
            answer computed from sub-call answers rests on), else ``None``.
        raised_cells: the code (:func:`normalise`) of every cell that raised since the last
            cell that ran without an error (which may have made them work, e.g. an import).
        previous_outputs: the outputs of the previous turn's cells (as in ``outputs``).
        turn_notes: the turn-count notes that closed the previous turn and this one
            (:func:`end_of_turn`; ``""``: none).
        folded: the notes of the failed turns folded in a row (:func:`fold_turn`), and the
            user message they were folded into, as it was before (``None``: the previous
            turn was not folded).
    """

    messages: list[Message] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    sent: int = 0
    outputs: list[str] = field(default_factory=list)
    code_ran: bool = False
    refused: bool = False
    questioned: bool = False
    errors_in_a_row: int = 0
    kernel_deaths: int = 0
    previous_blocks: list[str] = field(default_factory=list)
    concern: verify.Concern | None = None
    repeats: int = 0
    final_not_taken: bool = False
    subcalls: verify.SubcallTally | None = None
    raised_cells: set[str] = field(default_factory=set)
    previous_outputs: list[str] = field(default_factory=list)
    turn_notes: tuple[str, str] = ("", "")
    folded: tuple[str, list[str]] | None = None
    _tokens: tuple[object, object, int, int] | None = field(default=None, repr=False, compare=False)
    """The running total of :meth:`message_tokens`: (model, messages list, messages
    counted, tokens)."""

    def message_tokens(self, model: Model) -> int:
        """``model.count_messages(self.messages)``, kept as a running total: only messages
        appended since the last call are counted (a replaced list, after a compaction, is
        counted afresh)."""
        known = self._tokens
        if known is None or known[0] is not model or known[1] is not self.messages:
            counted, total = 0, 2
        else:
            counted, total = known[2], known[3]
            if counted > len(self.messages):
                counted, total = 0, 2
        new = self.messages[counted:]
        if new:
            total += model.count_messages(new) - 2  # the prompt's framing is counted once
        self._tokens = (model, self.messages, len(self.messages), total)
        return total

    def say(self, text: str) -> None:
        """Append a user message to the conversation."""
        msg: Message = {"role": "user", "content": text}
        self.messages.append(msg)
        self.history.append(msg)

    def reply(self, text: str) -> None:
        """Append the model's reply to the conversation."""
        msg: Message = {"role": "assistant", "content": text}
        self.messages.append(msg)
        self.history.append(msg)

    def drop_reply(self) -> None:
        """Take the model's last reply back out of the conversation (it is asked again)."""
        for messages in (self.messages, self.history):
            assert messages[-1]["role"] == "assistant"
            messages.pop()


def unverified(cfg: RunConfig, state: LoopState, answer: str) -> bool:
    """Whether ``verify_answer`` questions ``answer``: short, and in no cell output yet."""
    return (
        cfg.verify_answer
        and parsing.is_short_answer(answer)
        and not parsing.answer_in_outputs(answer, state.outputs)
    )


def concern_about(
    cfg: RunConfig,
    state: LoopState,
    context: Context,
    answer: str,
    *,
    literal: bool,
    stderr: str,
    question: str = "",
) -> verify.Concern | None:
    """The verifier's concern about ``answer`` (``None`` when ``verify_answer`` is off);
    ``question``: the run's question (the restated rule)."""
    if not cfg.verify_answer:
        return None
    return verify.check(
        answer,
        context=context,
        outputs=state.outputs,
        stderr=stderr,
        literal=literal,
        subcalls=state.subcalls,
        question=question,
    )


def question_message(cfg: RunConfig, concern: verify.Concern, answer: str) -> str:
    """What the model is told when its answer is questioned (the guess rule keeps the
    configurable ``unverified_answer_message``)."""
    if concern.rule == "guess":
        return cfg.unverified_answer_message.format(answer=answer)
    return prompts.QUESTIONED_ANSWER.format(answer=answer, evidence=concern.evidence)


def cell_hints(context: Context, code: str, result: CellResult) -> list[str]:
    """Notes after a cell's output: a FINAL that named nothing or raised, a grep limited to
    one file that found nothing, a missing codebase key."""
    notes = []
    missing = parsing.final_undefined_name(code, result.error)
    if missing:
        notes.append(prompts.FINAL_NAME_ERROR.format(name=missing))
    elif result.error and result.final is None and parsing.has_final_call(code):
        last = result.error.strip().splitlines()[-1:] or ["an error"]
        notes.append(prompts.FINAL_RAISED.format(error=last[0][:200]))
    if (
        context.is_codebase
        and result.stdout.strip() in ("[]", "0")
        and parsing.calls_with_path(code, "grep")
    ):
        # The demo's model grepped one file per turn until the turns ran out
        # (trajectory 617a0e799b08a095d37d).
        notes.append(prompts.GREP_ALL_HINT)
    if context.is_codebase and _raised(result, "KeyError"):
        example = next(iter(context.value), "src/main.py")
        notes.append(prompts.CODEBASE_KEY_HINT.format(example=example))
    return notes


def count_kernel_death(state: LoopState, result: CellResult) -> None:
    """Count a cell whose kernel died with no limit, timeout or interrupt to blame (a broken
    kernel channel, a crashed runtime); any other cell resets the count.

    Raises:
        InfrastructureFault: the :data:`MAX_KERNEL_DEATHS`-th such cell in a row.
    """
    died = (
        result.kernel_restarted and not result.timed_out and (result.error or "").startswith(_DIED)
    )
    state.kernel_deaths = state.kernel_deaths + 1 if died else 0
    if state.kernel_deaths >= MAX_KERNEL_DEATHS:
        last = (result.error or "").split(";")[0]
        raise InfrastructureFault(
            f"the sandbox failed {state.kernel_deaths} cells in a row, no limit involved "
            f"(last: {last}); the run stops instead of feeding the same fault to the model"
        )


class Verdict(enum.Enum):
    """What becomes of a cell's ``FINAL``."""

    NONE = "none"  # no FINAL in the cell
    ACCEPT = "accept"
    QUESTION = "question"  # verify_answer's one refusal: print the evidence
    REFUSE = "refuse"  # the early-answer refusal: look at the context first


def judge_final(
    cfg: RunConfig,
    state: LoopState,
    code: str,
    result: CellResult,
    *,
    inspected: bool,
    last_turn: bool,
    budget_spent: BudgetExhausted | None,
    context: Context | None = None,
    question: str = "",
) -> Verdict:
    """Judge the ``FINAL`` of cell ``code``. A FINAL given in the cell that ran out a budget
    still counts: the model's own answer beats an extraction over its work.

    The verifier (:mod:`rlmd.engine.verify`) questions a doubtful answer once; an answer
    accepted while a concern holds (given again after the question, in the last iteration,
    or with the budget spent) leaves that concern in ``state.concern`` for the loop to mark.

    Args:
        inspected: some cell of the run (this one included) looked at the context.
        last_turn: this is the run's last iteration (never questioned there).
        budget_spent: the tree's exhausted budget, if any (then never questioned).
        context: the run's context (codebase paths check path answers).
        question: the run's question (an answer that only restates it is questioned).
    """
    state.concern = None
    if result.final is None:
        return Verdict.NONE
    if not (inspected or state.refused or not cfg.refuse_early_answer):
        return Verdict.REFUSE
    ctx = context if context is not None else Context(value="", kind="text")
    state.concern = concern_about(
        cfg,
        state,
        ctx,
        result.final,
        literal=parsing.final_is_literal(code),
        stderr=result.stderr,
        question=question,
    )
    if (
        state.concern is not None
        and not state.questioned
        and not last_turn
        and budget_spent is None
    ):
        return Verdict.QUESTION
    return Verdict.ACCEPT


MAX_REPEATS_RUN = 1
"""An identical turn is run again once (a cell may read something that changed); from the
second repeat on it is not run: the 1.5B model re-ran one cell three to five times although
its output already held the answer (issue 15)."""


def skip_repeat(state: LoopState, blocks: list[str]) -> bool:
    """Count a turn whose code equals the previous turn's; whether it should not run (its
    last run worked: repeats after errors or kernel deaths are left to those rules)."""
    state.repeats = state.repeats + 1 if blocks == state.previous_blocks else 0
    return (
        state.repeats > MAX_REPEATS_RUN and state.errors_in_a_row == 0 and state.kernel_deaths == 0
    )


RESAMPLE_TEMPERATURES = (0.7, 1.0)
"""Sampling temperature of the 1st, 2nd (and later) re-sample of a turn that repeats a cell.
At temperature 0 a model answers the same prompt the same way: the 1.5B model sent one
``grep`` four times after its answer was printed, and a refused ``llm_map`` cell five times
until ``max_errors``, whatever the feedback said (issue 15). Re-sampling at a higher
temperature is the usual way out of a greedy loop."""


def normalise(code: str) -> str:
    """A cell's code as repeats are compared: blank lines and trailing blanks dropped."""
    return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip())


def repeats_a_cell(state: LoopState, blocks: list[str]) -> bool:
    """Whether a reply's code blocks repeat what already ran: the previous turn's code, or
    a cell that raised (compared as :func:`normalise` gives them). A ``FINAL`` given again
    after its refusal is not a repeat (that is how the model insists), nor is code after a
    kernel death no limit explains (the sandbox's fault, not the code's)."""
    if not blocks or state.final_not_taken or state.kernel_deaths:
        return False
    code = [normalise(b) for b in blocks]
    return code == [normalise(b) for b in state.previous_blocks] or any(
        c in state.raised_cells for c in code
    )


def resample_sampling(attempt: int) -> dict[str, float | int]:
    """The sampling arguments of re-sample ``attempt`` (1-based) of a repeated turn: a
    temperature from :data:`RESAMPLE_TEMPERATURES` and a seed of its own."""
    return {
        "temperature": RESAMPLE_TEMPERATURES[min(attempt, len(RESAMPLE_TEMPERATURES)) - 1],
        "seed": attempt,
    }


def end_of_turn(
    state: LoopState, blocks: list[str], all_failed: bool, budget: Budget, i: int
) -> list[str]:
    """The notes that close turn ``i`` (0-based): a repeated turn, and the turn count (the
    last turn asks for an answer outright).

    Raises:
        BudgetExhausted: ``max_errors``, after too many turns in a row whose cells all raised.
    """
    notes = []
    if blocks == state.previous_blocks and state.repeats <= MAX_REPEATS_RUN:
        notes.append(prompts.REPEATED)
    state.previous_blocks = blocks
    state.errors_in_a_row = state.errors_in_a_row + 1 if all_failed else 0
    limit = budget.max_consecutive_errors
    if limit is not None and state.errors_in_a_row >= limit:
        raise BudgetExhausted(
            "max_errors", f"{state.errors_in_a_row} iterations in a row ended in errors"
        )
    turn_note = next_turn_note(i, budget.max_iterations)
    if turn_note:
        notes.append(turn_note)
    state.turn_notes = (state.turn_notes[1], turn_note)
    return notes


def next_turn_note(i: int, max_turns: int, *, folded: bool = False) -> str:
    """The turn-count note that closes turn ``i`` (0-based) of ``max_turns``: ``""`` after
    the last turn; the note before the last turn asks for an answer outright. ``folded``:
    turn ``i`` was folded out of the model's view, so its output is not above
    (:data:`prompts.NEXT_TURN_FOLDED`)."""
    if i + 1 >= max_turns:
        return ""
    # The 1.5B model found the file in turn 2 and re-ran the same grep until the turns
    # ran out (trajectory 6179e06561ff141c86a0).
    if i + 2 == max_turns:
        last = prompts.LAST_TURN_FOLDED if folded else prompts.LAST_TURN
        return last.format(turn=i + 2, max_turns=max_turns)
    note = prompts.NEXT_TURN_FOLDED if folded else prompts.NEXT_TURN
    return note.format(turn=i + 2, max_turns=max_turns)


def fold_lines(
    results: list[CellResult], hints: list[str], *, repeated: bool, output_cap: int
) -> list[str]:
    """The notes that stand for a failed turn once it is folded (:func:`fold_turn`): for
    each cell that raised, what it printed first (capped as its output would have been:
    ``output_cap`` characters, head and tail), then what it raised (its traceback's last
    line, which for a refused helper call names the line to run) and the variables it
    set; or, for a repeat that printed what the previous turn printed, that it did; then
    the turn's hints.

    The printed output keeps the cap of an unfolded cell's: the fold takes away the
    model's own cell and traceback (what it copied), not what the cell found (a cell that
    printed search hits and then raised used to leave the model only the exception).
    """
    lines = []
    for result in results:
        if result.error:
            out = prompts.printed(result)
            if out.strip():
                # without its last newline: the notes are joined by a blank line, and a
                # cell that printed only stderr left two (session 10, held-out 007)
                capped = parsing.cap_output(out, output_cap).rstrip("\n")
                lines.append(prompts.FOLDED_PRINTED.format(output=capped))
            lines.append(prompts.FOLDED_RAISED.format(error=exception_text(result.error)))
            if result.variables:
                names = ", ".join(v.name for v in result.variables[:30])
                lines.append(prompts.FOLDED_VARIABLES.format(names=names))
    if not lines and repeated:
        lines.append(prompts.FOLDED_REPEAT)
    return list(dict.fromkeys(lines + hints))


def exception_text(error: str, limit: int = 400) -> str:
    """A cell's error without its traceback frames: the exception line and any note after
    it (at most ``limit`` characters)."""
    lines = [
        line
        for line in error.splitlines()  # not stripped: a SyntaxError's frame line is indented
        if line.strip() and not line.startswith((" ", "\t", "Traceback (most recent call"))
    ]
    text = " ".join(lines) or "an error"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fold_turn(state: LoopState, lines: list[str], note: str | None = None) -> Message | None:
    """Take the failed turn just closed (its reply and the user message with its outputs)
    out of the conversation the model sees, and add ``lines`` to the user message before
    it instead, with the turn-count note that closed this turn (or ``note``, which then
    counts as that note). The model then continues from a prompt without its failed cell
    (a 1.5B model sent a refused cell five times in a row while it saw it; at temperature
    1.0 too: issue 15). Turns folded in a row share one message (their notes each once).
    ``state.history`` keeps every message as it was.

    Returns:
        The message the turn was folded into, or ``None`` when the conversation does not
        end user, reply, user (nothing folded).
    """
    msgs = state.messages
    if len(msgs) < 3 or [m["role"] for m in msgs[-3:]] != ["user", "assistant", "user"]:
        return None
    # The turn note that closed the turn before is the last one in that message (a cell's
    # output may print the same words earlier; a map note may come after it).
    before, turn_note = msgs[-3]["content"], "\n\n" + state.turn_notes[0]
    at = before.rfind(turn_note) if state.turn_notes[0] else -1
    kept = before if at < 0 else before[:at] + before[at + len(turn_note) :]
    if state.folded is None:
        state.folded = (kept, [])
    notes = state.folded[1]
    new = [line for line in lines if line not in notes]
    notes += new
    # Built on the message as it is now, not as it was: what was added to it since the
    # previous fold (the codebase's map, once built) stays.
    if note is not None:
        state.turn_notes = (state.turn_notes[0], note)
    parts = [kept, *new, state.turn_notes[1]]
    merged: Message = {"role": "user", "content": "\n\n".join(p for p in parts if p)}
    state.messages = msgs[:-3] + [merged]
    return merged


def _raised(result: CellResult, name: str) -> bool:
    """Whether the cell ended with exception ``name`` (its traceback's last line)."""
    lines = (result.error or "").strip().splitlines()
    return bool(lines) and lines[-1].startswith(name)

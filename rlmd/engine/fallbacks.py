"""The loop's fallbacks: the extraction call that gives the best available answer after a
budget ended a run, and the compaction that summarises older turns when the root
conversation nears the model's window."""

from __future__ import annotations

from rlmd.engine import parsing, prompts
from rlmd.engine.budget import BudgetExhausted
from rlmd.engine.config import EXTRACTION_MAX_TOKENS, EXTRACTION_TIMEOUT_S
from rlmd.engine.events import Compaction, new_id
from rlmd.engine.feedback import LoopState
from rlmd.engine.metered import Meter
from rlmd.models.base import Message, Model, ModelError
from rlmd.sandbox.base import Sandbox


async def extract(
    meter: Meter, model: Model, state: LoopState, question: str, reason: str = ""
) -> tuple[str | None, str | None]:
    """The best answer after a budget ran out: one bounded call, marked ``"extraction"``.

    The call continues the root conversation with one more user message (``reason`` and
    the question), so a server's prompt cache serves everything but that message: on
    the loaded test machine a fresh 2K-token transcript took longer than the 120 s
    bound (trajectory ``6179e06561ff141c86a0``). A conversation too long for that falls back
    to a condensed transcript under its own system prompt.

    Returns:
        ``(answer, "extraction")``, or ``(None, None)`` when there is nothing to go on (or
        the run is a child: one extraction at the root is enough), no time is left, the
        call fails, or it answers with a ```` ```repl ```` block (code is not an answer).
    """
    cfg, ledger = meter.rt.config, meter.rt.ledger
    if (
        not cfg.extraction
        or meter.depth > 0
        or not any(m["role"] == "assistant" for m in state.history)
    ):
        # A child's answer only feeds its parent's code, which is ending too.
        return None, None
    ask = prompts.EXTRACTION_USER.format(reason=reason or "a limit was reached", question=question)
    messages: list[Message] = [*state.messages, {"role": "user", "content": ask}]
    spec = model.spec
    if model.count_messages(messages) + EXTRACTION_MAX_TOKENS > spec.context_window:
        # A quarter of the window (at ~3 characters per token, conservative for code)
        # keeps the extraction call cheap: it runs after a budget is already spent.
        transcript = condense(state.history[1:], spec.context_window // 4 * 3)
        messages = [
            {"role": "system", "content": prompts.EXTRACTION_SYSTEM},
            {"role": "user", "content": f"Question: {question}\n\nWork so far:\n{transcript}"},
        ]
    # Bounded by what the wall-clock budget has left (the loop kept a reserve for this);
    # a loop that overran its share (a cell or call that ignored cancellation) still
    # leaves the extraction up to 1 s of its reserve.
    timeout = EXTRACTION_TIMEOUT_S
    left = ledger.remaining_seconds(include_reserve=True)
    if left is not None:
        timeout = min(timeout, max(left, min(ledger.reserve_s, 1.0)))
    if timeout <= 0:
        return None, None
    try:
        c = await meter.call(
            model,
            messages,
            None,
            role="extraction",
            check=False,
            max_tokens=EXTRACTION_MAX_TOKENS,
            timeout_s=timeout,
        )
    except (ModelError, BudgetExhausted):
        return None, None
    text = c.text.strip()
    if not text or parsing.has_repl_block(text):
        # No code will run any more, and code is not an answer (the reference library's
        # 0.1.3 made such a block the run's answer): better no answer than a fabricated one.
        return None, None
    answer = parsing.unfence(text)
    # The system prompt taught the model to answer with FINAL(...), and a small one does so
    # here too: "FINAL('src/a.py')" was the run's answer, wrapper and quotes included.
    found = parsing.find_prose_final(answer)
    if found and found[0] == "final" and answer.startswith("FINAL(") and answer.endswith(")"):
        answer = found[1]
    return answer, "extraction"


async def maybe_compact(
    meter: Meter, model: Model, state: LoopState, it_node: str, sandbox: Sandbox
) -> None:
    """Summarise older turns when the conversation nears the root model's window; the full
    history stays in the REPL as ``history``."""
    cfg = meter.rt.config
    if not cfg.compaction or len(state.messages) < 6:
        return
    spec = model.spec
    limit = (spec.context_window - spec.max_output_tokens) * cfg.compaction_threshold
    if state.message_tokens(model) < limit:  # a running total, not a recount
        return
    head, middle, tail = state.messages[:2], state.messages[2:-2], state.messages[-2:]
    compacted = await meter.call(
        model,
        [
            {"role": "system", "content": prompts.COMPACTION_SYSTEM},
            {"role": "user", "content": condense(middle, int(limit * 3))},
        ],
        it_node,
        role="compaction",
    )
    summary = compacted.text
    note: Message = {
        "role": "user",
        "content": f"Summary of earlier turns (full log in the REPL variable `history`):\n{summary}",
    }
    state.messages = head + [note] + tail
    await sandbox.set_variable("history", state.history)
    meter.emit(Compaction, new_id(), it_node, summarised_messages=len(middle), summary=summary)


def condense(messages: list[Message], max_chars: int) -> str:
    """The messages as one transcript of at most ``max_chars`` characters, oldest cut first."""
    text = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
    return text if len(text) <= max_chars else "[... earlier turns cut ...]\n" + text[-max_chars:]

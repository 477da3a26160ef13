"""How a run is configured and what it returns: :class:`RunConfig`, :class:`RunResult`, and
the bounds of the fallback (extraction) call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlmd.engine import prompts
from rlmd.engine.budget import Budget
from rlmd.engine.usage import UsageSummary
from rlmd.sandbox import DEFAULT_BACKEND
from rlmd.sandbox.base import CODEBASE_HELPERS, RESERVED_NAMES

EXTRACTION_MAX_TOKENS = 512
"""Cap on the one extraction call made when a budget ends a run (the bounded overdraw)."""

EXTRACTION_TIMEOUT_S = 120.0
"""Longest wall-clock time of the extraction call, seconds (less when the run has a
wall-clock budget: then it gets what that budget has left, see ``extraction_reserve``)."""

STOP_AFTER_BLOCK = ("\n```\n",)
"""Stop strings of a root turn: a fence line after code. The reply then ends at its first
code block, so the model cannot write an imagined output of the cell and act on it (the
1.5B model did, ``bench/RESULTS.md``, trajectory ``617823ceb2aa74b727aa``)."""


@dataclass
class RunConfig:
    """How to run: models, sandbox, budgets, tools, prompt options.

    Attributes:
        root_model: registry name of the root model (depth 0).
        sub_model: registry name for sub-calls and child roots; defaults to ``root_model``
            (:func:`rlmd.config.build_run_config` names a LoRA adapter's base model).
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
            context (small local models answer on turn 0).
        early_answer_message: the refusal text.
        compaction: summarise older turns when the root conversation nears the window.
        compaction_threshold: fraction of (window - reply reserve) that triggers it.
        extraction: after a budget ends the run, make one extraction call (at most
            ``EXTRACTION_MAX_TOKENS`` output tokens over a quarter of the window) for the best
            available answer. It is the one call allowed past a token or USD budget; set
            ``False`` for a hard cap (the run then ends with no answer).
        max_concurrent_subcalls: sub-calls and child runs one run has in flight at once
            (batches, ``llm_map`` and threads of a cell alike; the others wait their turn,
            which is not counted as cell time).
        system_prompt: a custom system prompt template (see :mod:`rlmd.engine.prompts`).
        workspace: the project folder, recorded with the run.
        stop_after_code_block: end each root reply at the close of its first code block
            (stop strings :data:`STOP_AFTER_BLOCK`, plus cutting the text for a server that
            ignores them); only that block runs. When the stop string ended a fence that was
            not a runnable block (a bare ```` ``` ```` output block), the turn is asked again
            without stop strings, so a ``FINAL(...)`` written after it in prose survives.
        verify_answer: run the answer verifier (:mod:`rlmd.engine.verify`): question, once,
            a short literal answer that appears in no cell output (a guess), an empty answer,
            one that reads like an error or "not found", a path naming no file of the
            codebase, or a number counted over a search that found nothing; the model is
            shown the evidence. Never questioned in the last iteration or with a budget
            spent; an answer accepted while a concern holds ends with ``answer_source
            "unverified"``. Costs one turn, only when it triggers.
        unverified_answer_message: the refusal text (``{answer}`` is filled in).
        extraction_reserve: fraction of ``budget.max_seconds`` held back from the loop for
            the extraction call (at most :data:`EXTRACTION_TIMEOUT_S`), so the fallback
            answer arrives within the wall-clock budget (the first quality run's extraction
            ran 120 s past a 150 s budget). The extraction gets what is left of the budget;
            if the loop overran its share, at most 1 s more.
        resample_repeats: when a root reply's code repeats the previous turn's or a cell
            that raised, ask for the turn again up to this many times at a higher
            temperature (:data:`rlmd.engine.feedback.RESAMPLE_TEMPERATURES`) before running
            it; the first reply with other code replaces it. ``0``: never. Each re-sample is
            a root model call (in the budget, its event records its ``sampling``).
        fold_failed_turns: a turn whose cells all raised, or that repeated a cell and printed
            what it printed before, is taken out of the conversation the root model sees:
            its reply and output are replaced by a note (what raised, with the line to run
            when the error names one) added to the user message before it
            (:func:`rlmd.engine.feedback.fold_turn`; a ``compaction`` event with ``reason
            "failed_turn"`` records it). The store keeps every message as it was.
        record_prompts: put the whole prompt of every root-model call in its event (and so
            in the store), not only the messages new since the last call; training
            datasets (:mod:`rlmd.train.export`) take each root turn's input from it.
    """

    root_model: str
    sub_model: str | None = None
    models_by_depth: dict[int, str] = field(default_factory=dict)
    sandbox: str = DEFAULT_BACKEND
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
    record_prompts: bool = False
    resample_repeats: int = 2
    fold_failed_turns: bool = True

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
        answer_source: ``"final" | "final_var" | "prose" | "unverified" | "extraction" |
            None``; an ``"extraction"`` answer came from the fallback call after a budget ran
            out; an ``"unverified"`` one was given by FINAL while the answer verifier
            (:mod:`rlmd.engine.verify`) still doubted it.
        usage: the tree's usage dict (see :meth:`rlmd.engine.usage.Usage.to_dict`).
        iterations: root-model turns of this run.
        depth: this run's depth.
        error: why the run failed or stopped, if it did.
        vote: with self-consistency (``--samples K``), the vote over the K samples
            (:meth:`rlmd.engine.samples.Vote.to_dict`); this result is the winner's.
    """

    run_id: str
    status: str
    answer: str | None
    answer_source: str | None
    usage: UsageSummary
    iterations: int
    depth: int
    error: str | None = None
    vote: dict[str, Any] | None = None

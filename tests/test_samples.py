"""Self-consistency (``--samples K``): the vote's rules, K runs through the runner with a
scripted model, and the CLI's record of the vote."""

from __future__ import annotations

import itertools

from helpers.scripted import repl, scripted_registry, turn_of

from rlmd.engine import Budget, RunConfig, RunResult
from rlmd.engine.samples import normalise, vote
from rlmd.runner import run_question


def result(answer, source="final", i=0) -> RunResult:
    return RunResult(f"run{i}", "completed", answer, source, {}, 2, 0)  # type: ignore[arg-type]


def test_normalise_ignores_case_quotes_spacing_and_a_final_period():
    assert normalise(" `Pkg/A.py`. ") == normalise("pkg/a.py") == "pkg/a.py"
    assert normalise("'two  words'") == "two words"


def test_majority_wins_and_the_tally_is_recorded():
    v = vote([result("A", i=0), result("b", i=1), result("a", i=2)])
    assert v.winner == 0 and v.tally == {"a": 2.0, "b": 1.0}
    assert [s["run_id"] for s in v.samples] == ["run0", "run1", "run2"]


def test_weak_answers_count_half_and_a_tie_goes_to_the_first_answer():
    v = vote([result("x", "unverified"), result("y", "extraction"), result("y", "final")])
    assert v.tally == {"y": 1.5, "x": 0.5} and v.winner == 2  # the full-weight sample
    tie = vote([result("x", i=0), result("y", i=1)])
    assert tie.winner == 0 and tie.tally == {"x": 1.0, "y": 1.0}


def test_no_answer_no_winner():
    v = vote([result(None), result("  ")])
    assert v.winner is None and v.tally == {} and len(v.samples) == 2


async def test_k_samples_run_and_vote_through_the_runner():
    order = itertools.count()
    answers = ["A", "B", "A"]

    def root(messages):
        if turn_of(messages) == 0:
            n = next(order)
            return repl(f"pick = {answers[n]!r}\nprint(pick)")
        return repl("FINAL(pick)")

    registry = scripted_registry(root=root, sub=root)
    cfg = RunConfig(root_model="root", sub_model="sub", budget=Budget())
    try:
        out = await run_question("q", "ctx", cfg, registry=registry, record=False, samples=3)
    finally:
        await registry.aclose()
    assert out.answer == "A" and out.vote is not None
    assert out.vote["tally"] == {"a": 2.0, "b": 1.0}
    assert len({s["run_id"] for s in out.vote["samples"]}) == 3
    assert out.run_id == out.vote["samples"][out.vote["winner"]]["run_id"]

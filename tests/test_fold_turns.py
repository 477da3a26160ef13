"""A failed turn folded out of the root model's view (``[run] fold_failed_turns``): exactly
which messages the model receives after a cell that raised and after a repeated cell, and
that the store still holds every original turn. Scripted models, the real subprocess REPL,
a real SQLite store."""

from __future__ import annotations

from typing import Any

from helpers.scripted import repl, scripted_registry, turn_of
from rich.console import Console

from rlmd.cli.render import run_tree
from rlmd.engine import Budget, RunConfig, prompts, run_task
from rlmd.engine.parsing import find_code_blocks
from rlmd.store import Store

RAISES = "part = len(context)\nraise ValueError('use print(part) instead')"
COUNT = "print('length', len(context))"


def text_of(renderable: Any) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(renderable)
    return console.export_text()


def config(**kw: Any) -> RunConfig:
    return RunConfig(root_model="root", sub_model="sub", budget=Budget(max_iterations=6), **kw)


async def go(
    root: Any, cfg: RunConfig, store: Store | None = None, context: str = "abcd"
) -> tuple[Any, list[list[dict[str, str]]]]:
    """Run ``root`` (``turn -> reply``); returns the result and every prompt it received."""
    seen: list[list[dict[str, str]]] = []

    def model(messages: list[dict[str, str]]) -> str:
        seen.append([dict(m) for m in messages])
        return root(turn_of(messages))

    registry = scripted_registry(root=model, sub=model)
    sinks = (store.record,) if store else ()
    try:
        result = await run_task("q", context, cfg, get_model=registry.get, sinks=sinks)
    finally:
        await registry.aclose()
    return result, seen


def turn_note(turn: int) -> str:
    return prompts.NEXT_TURN.format(turn=turn, max_turns=6)


def folded_note(turn: int) -> str:
    """The turn note after a folded turn (no "If the output above answers": none is)."""
    return prompts.NEXT_TURN_FOLDED.format(turn=turn, max_turns=6)


def root_calls(store: Store, run_id: str) -> list[dict[str, Any]]:
    return [
        n
        for n in store.nodes(run_id)
        if n["kind"] == "model_call" and n["data"].get("role") == "root"
    ]


def code_of(call: dict[str, Any]) -> str:
    """The code of a recorded root call's reply."""
    return find_code_blocks(call["data"]["response"])[0].strip()


async def test_after_a_raised_cell_the_model_sees_a_note_not_its_cell_and_the_store_keeps_it(
    tmp_path,
):
    replies = {0: repl(RAISES), 1: repl("FINAL(part)")}
    store = Store(tmp_path / "db.sqlite")
    result, seen = await go(lambda t: replies[t], config(), store)
    assert (result.status, result.answer, result.iterations) == ("completed", "4", 2)
    first = seen[0]
    # Exactly: the system prompt and the first user message, with the note and the turn
    # note added to it; the raising reply and its traceback are gone.
    note = prompts.FOLDED_RAISED.format(error="ValueError: use print(part) instead")
    variables = prompts.FOLDED_VARIABLES.format(names="part")
    assert seen[1] == [
        first[0],
        {
            "role": "user",
            "content": "\n\n".join([first[1]["content"], note, variables, folded_note(2)]),
        },
    ]
    # The store holds the original turn: the reply, the cell and its traceback, the user
    # message the engine wrote (recorded with the next call), and what replaced them.
    calls = root_calls(store, result.run_id)
    assert [code_of(c) for c in calls] == [RAISES, "FINAL(part)"]
    original = calls[1]["data"]["messages"]
    assert [m["role"] for m in original] == ["user"]
    assert "[cell 1]" in original[0]["content"]
    assert "Traceback" in original[0]["content"] and turn_note(2) in original[0]["content"]
    cells = [n for n in store.nodes(result.run_id) if n["kind"] == "cell"]
    assert cells[0]["data"]["code"].strip() == RAISES and "ValueError" in cells[0]["data"]["error"]
    folds = [n for n in store.nodes(result.run_id) if n["kind"] == "compaction"]
    assert [f["data"] for f in folds] == [
        {
            "summarised_messages": 2,
            "summary": "\n\n".join([note, variables, folded_note(2)]),
            "reason": "failed_turn",
        }
    ]
    tree = text_of(run_tree(store.tree(result.run_id)))
    assert "compaction: a failed turn folded out of the model's view" in tree
    assert "summarised" not in tree
    store.close()


async def test_a_repeated_cell_that_printed_the_same_is_folded_after_it_ran(tmp_path):
    """The repeat runs once (re-sampled first: the scripted model answers the same), prints
    what it printed before, and the model then sees its first run of the cell only."""
    replies = {0: repl(COUNT), 1: repl(COUNT), 2: repl("FINAL(len(context))")}
    store = Store(tmp_path / "db.sqlite")
    result, seen = await go(lambda t: replies[t], config(), store)
    assert (result.status, result.answer, result.iterations) == ("completed", "4", 3)
    # turn 0, turn 1 and its two re-samples, turn 2
    assert [turn_of(p) for p in seen] == [0, 1, 1, 1, 2]
    after_first = seen[1]
    feedback = after_first[-1]["content"]
    base = feedback.replace("\n\n" + turn_note(2), "")
    assert seen[4] == [
        *after_first[:-1],
        {"role": "user", "content": "\n\n".join([base, prompts.FOLDED_REPEAT, folded_note(3)])},
    ]
    assert [m["role"] for m in seen[4]] == ["system", "user", "assistant", "user"]
    # The store keeps the repeat: its reply, its cell and the message with the repeat note.
    calls = root_calls(store, result.run_id)
    assert [code_of(c) for c in calls] == [COUNT, COUNT, COUNT, COUNT, "FINAL(len(context))"]
    cells = [n["data"]["code"].strip() for n in store.nodes(result.run_id) if n["kind"] == "cell"]
    assert cells == [COUNT, COUNT, "FINAL(len(context))"]
    last_recorded = calls[-1]["data"]["messages"]
    assert len(last_recorded) == 1 and prompts.REPEATED in last_recorded[0]["content"]
    store.close()


async def test_failed_turns_in_a_row_share_one_message_each_note_once():
    replies = {0: repl(COUNT), 1: repl("print(missing)"), 2: repl("print(missing)")}
    replies[3] = repl("FINAL(len(context))")
    result, seen = await go(lambda t: replies[t], config(resample_repeats=0))
    assert (result.status, result.answer) == ("completed", "4")
    base = seen[1][-1]["content"].replace("\n\n" + turn_note(2), "")
    note = prompts.FOLDED_RAISED.format(error="NameError: name 'missing' is not defined")
    assert seen[2][-1]["content"] == "\n\n".join([base, note, folded_note(3)])
    # the same cell raised again (not re-sampled here): the same note is not added twice
    assert seen[-1] == [
        *seen[1][:-1],
        {"role": "user", "content": "\n\n".join([base, note, folded_note(4)])},
    ]


async def test_with_folding_off_the_model_sees_its_raised_cell_and_the_traceback():
    replies = {0: repl(RAISES), 1: repl("FINAL(part)")}
    result, seen = await go(lambda t: replies[t], config(fold_failed_turns=False))
    assert result.answer == "4"
    assert [m["role"] for m in seen[1]] == ["system", "user", "assistant", "user"]
    assert find_code_blocks(seen[1][2]["content"])[0].strip() == RAISES
    assert "Traceback" in seen[1][3]["content"] and "ValueError" in seen[1][3]["content"]


async def test_an_output_that_prints_the_turn_note_keeps_it_when_the_next_turn_is_folded():
    """The turn note removed from the message a failed turn is folded into is the one the
    engine added (the last), not the same words a cell printed before it."""
    fenceless = turn_note(2).replace("```", "QQQ")  # a fence in the reply would end its block
    printed = f"print('x' + chr(10) * 2 + {fenceless!r}.replace('QQQ', '`' * 3))"
    replies = {0: repl(printed), 1: repl("print(missing)"), 2: repl("FINAL(len(context))")}
    result, seen = await go(lambda t: replies[t], config())
    assert (result.status, result.answer) == ("completed", "4")
    feedback = seen[1][-1]["content"]
    assert feedback.count(turn_note(2)) == 2 and feedback.endswith(turn_note(2))
    base = feedback[: -len("\n\n" + turn_note(2))]
    note = prompts.FOLDED_RAISED.format(error="NameError: name 'missing' is not defined")
    assert seen[2][-1]["content"] == "\n\n".join([base, note, folded_note(3)])


def test_what_was_added_to_a_folded_message_stays_when_the_next_turn_is_folded_too():
    """The codebase's map, added to the model's last message once built (after a fold),
    is still in that message after the next failed turn is folded into it."""
    from rlmd.engine.feedback import LoopState, fold_turn

    state = LoopState()
    state.messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    for i, reply in enumerate(["a", "b"]):
        state.messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f"out {i}\n\n{turn_note(i + 2)}"},
        ]
        state.turn_notes = (turn_note(i + 1) if i else "", turn_note(i + 2))
        merged = fold_turn(state, [f"note {i}"])
        assert merged is state.messages[-1]
        if i == 0:  # what _send_map_if_ready does once the map is built
            merged["content"] += "\n\nMAP"
    assert state.messages[-1]["content"] == "\n\n".join(
        ["q", "note 0", "MAP", "note 1", turn_note(3)]
    )


async def test_a_cell_that_does_not_parse_is_folded_into_its_error_alone():
    """A SyntaxError's report starts with its frame line (no ``Traceback`` header): the
    note keeps only the exception line."""
    replies = {0: repl("print('x)"), 1: repl("FINAL(len(context))")}
    result, seen = await go(lambda t: replies[t], config())
    assert result.answer == "4"
    note = prompts.FOLDED_RAISED.format(
        error="SyntaxError: unterminated string literal (detected at line 1)"
    )
    assert seen[1][-1]["content"] == "\n\n".join([seen[0][1]["content"], note, folded_note(2)])


PRINTS_THEN_RAISES = "hits = ['a.py:3: x = 1', 'b.py:9: y = 2']\nprint(hits)\nprint(hits[5])"


async def test_what_a_raised_cell_printed_stays_in_the_note_that_replaces_it():
    """A cell that printed search hits and then raised: its code and traceback leave the
    model's view, what it printed does not (before, only the exception line was left)."""
    replies = {0: repl(PRINTS_THEN_RAISES), 1: repl("FINAL(len(hits))")}
    result, seen = await go(lambda t: replies[t], config())
    assert (result.status, result.answer) == ("completed", "2")
    printed = prompts.FOLDED_PRINTED.format(output="['a.py:3: x = 1', 'b.py:9: y = 2']")
    note = prompts.FOLDED_RAISED.format(error="IndexError: list index out of range")
    variables = prompts.FOLDED_VARIABLES.format(names="hits")
    assert seen[1] == [
        seen[0][0],
        {
            "role": "user",
            "content": "\n\n".join(
                [seen[0][1]["content"], printed, note, variables, folded_note(2)]
            ),
        },
    ]


async def test_a_raised_cells_long_output_is_kept_at_the_cap_of_a_cell_output():
    from rlmd.engine.parsing import cap_output

    code = "print('\\n'.join(f'line {n}' for n in range(400)))\nraise KeyError('k')"
    replies = {0: repl(code), 1: repl("FINAL(len(context))")}
    result, seen = await go(lambda t: replies[t], config(output_cap=600))
    assert result.answer == "4"
    out = "\n".join(f"line {n}" for n in range(400)) + "\n"
    kept = prompts.FOLDED_PRINTED.format(output=cap_output(out, 600).rstrip("\n"))
    assert "line 0\n" in kept and kept.endswith("line 399") and "characters cut" in kept
    note = prompts.FOLDED_RAISED.format(error="KeyError: 'k'")
    assert seen[1][-1]["content"] == "\n\n".join(
        [seen[0][1]["content"], kept, note, folded_note(2)]
    )


def test_the_turn_note_after_a_fold_points_at_no_output_above_the_last_one_too():
    from rlmd.engine.feedback import next_turn_note

    assert next_turn_note(0, 6) == turn_note(2)
    assert next_turn_note(0, 6, folded=True) == folded_note(2)
    assert "output above" in turn_note(2) and "output above" not in folded_note(2)
    assert next_turn_note(4, 6) == prompts.LAST_TURN.format(turn=6, max_turns=6)
    last = next_turn_note(4, 6, folded=True)
    assert last == (
        "Turn 6 of 6 is your last. Reply with a ```repl block that calls FINAL(...) with "
        "your best answer from the outputs so far."
    )
    assert next_turn_note(5, 6) == next_turn_note(5, 6, folded=True) == ""


STDERR_THEN_RAISES = "import sys\nprint('no hit', file=sys.stderr)\nraise KeyError('k')"


async def test_a_cell_that_printed_only_stderr_is_folded_with_one_blank_line_between_notes():
    """The printed part ends without its newline: the notes are joined by exactly one blank
    line (session 10's 007 fold note had two after a stderr-only cell)."""
    replies = {0: repl(STDERR_THEN_RAISES), 1: repl("FINAL(len(context))")}
    result, seen = await go(lambda t: replies[t], config())
    assert result.answer == "4"
    assert seen[1][-1]["content"] == (
        seen[0][1]["content"]
        + "\n\nYour last cell printed this before it raised:\n[stderr]\nno hit\n\n"
        + prompts.FOLDED_RAISED.format(error="KeyError: 'k'")
        + "\n\n"
        + folded_note(2)
    )
    assert "\n\n\n" not in seen[1][-1]["content"]


async def test_a_turn_folded_before_the_last_gets_the_last_turn_note_without_output_above():
    """Turn 5 of 6 raises and is folded: the note that opens the last turn asks for the best
    answer "from the outputs so far", as the folded turn's output is not above."""
    replies = {0: repl(COUNT), 1: repl("a = 1"), 2: repl("b = 2"), 3: repl("c = 3")}
    replies[4] = repl(RAISES)
    replies[5] = repl("FINAL(part)")
    result, seen = await go(lambda t: replies[t], config())
    assert (result.status, result.answer, result.iterations) == ("completed", "4", 6)
    last = seen[5][-1]["content"]
    assert last.endswith(
        "\n\nTurn 6 of 6 is your last. Reply with a ```repl block that calls FINAL(...) with "
        "your best answer from the outputs so far."
    )
    assert "outputs above" not in last

"""The answer verifier's rules (unit and through the loop), ``llm_map`` (prompts, order,
per-item errors, grouped calls) end to end in the real REPL, the read_file range hint and
the unfenced extraction."""

from __future__ import annotations

import pytest
from helpers.scripted import last_user, repl, scripted_registry, turn_of

from rlmd.context import Context, load_context
from rlmd.engine import Budget, RunConfig, mapping, prompts, run_task, verify
from rlmd.engine.parsing import unfence
from rlmd.kernel.codebase import Codebase
from rlmd.sandbox.base import CODEBASE_HELPERS

CODEBASE = Context(value={"pkg/a.py": "x = 1\n", "pkg/sub/b.py": "y = 2\n"}, kind="codebase")
TEXT = load_context("some text")


def check(answer, context=TEXT, outputs=(), stderr="", literal=False):
    return verify.check(
        answer, context=context, outputs=list(outputs), stderr=stderr, literal=literal
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Error: no such thing",
        "Traceback (most recent call last): ...",
        "The file was not found",
        "FileNotFoundError: read_file: no file 'x.py'",
        "list_files: no path matches 'protocol/ClassName.py'",
        # plurals too: the 1.5B answered this after find_subclasses came back empty
        # (session 10, held-out codeintel-007), and it was accepted unquestioned
        "No classes in the codebase derive from 'Vorim'",
        "no functions found",
        "[]",
        "N/A",
        "unknown",
    ],
)
def test_error_and_nothing_answers_are_doubted(answer):
    concern = check(answer, outputs=[answer])  # even when an output shows it verbatim
    assert concern is not None and concern.rule == "error"


def test_empty_answer_is_doubted():
    assert check("  ").rule == "empty"  # type: ignore[union-attr]


def test_none_is_an_answer_when_an_output_shows_it():
    assert check("None", outputs=["def f(x=None):"]) is None
    assert check("None", outputs=["nothing here"]).rule == "error"  # type: ignore[union-attr]


def test_path_answers_must_name_a_file_of_the_codebase():
    assert check("pkg/a.py", CODEBASE) is None
    assert check("sub/b.py", CODEBASE) is None  # a unique end of a path
    assert check("It is in pkg/sub/b.py, line 1.", CODEBASE) is None
    concern = check("the/path/you/found.py", CODEBASE)
    assert concern is not None and concern.rule == "path"
    assert "no file 'the/path/you/found.py'" in concern.evidence
    concern = check("pkg/b.py", CODEBASE)
    assert concern is not None and "similar name: pkg/sub/b.py" in concern.evidence.replace(
        "names", "name"
    )
    # "./" goes, a dot folder's own dot stays: "./.github/..." was checked as "github/...",
    # a file the codebase does not have, and a right answer was doubted
    dotted = Context(value={".github/workflows/ci.yml": "on: push\n"}, kind="codebase")
    assert check("./.github/workflows/ci.yml", dotted) is None
    assert check("././.github/workflows/ci.yml", dotted) is None
    concern = check("./github/workflows/ci.yml", dotted)
    assert concern is not None and "no file 'github/workflows/ci.yml'" in concern.evidence
    # dotted names and versions are not paths; text contexts have no files to check
    assert check("json.dumps", CODEBASE) is None and check("v1.2", CODEBASE) is None
    assert check("the/path/you/found.py", TEXT) is None


def test_a_copy_of_the_prompts_example_answer_is_doubted_with_the_files_outputs_named():
    """The 1.5B answered FINAL("the/path/you/found.py"), the system prompt's example, after
    an output had named the class's file (session 11, held-out codeintel-007)."""
    note = (
        "find_subclasses: no class in the codebase derives from 'Y'; 'Y' itself is defined "
        "at pkg/sub/b.py:1 (class Y); outline('pkg/sub/b.py') lists its methods"
    )
    concern = check("the/path/you/found.py", CODEBASE, outputs=["[]\n" + note], literal=True)
    assert concern == verify.Concern(
        "placeholder",
        "it is the example answer of my instructions (FINAL('the/path/you/found.py')), "
        "copied: no output showed it, and the example only shows how to call FINAL; the "
        "outputs so far name these files: pkg/sub/b.py:1",
    )
    # the prompts' other example literals, in any context; never a value an output showed,
    # never a computed value (FINAL(count) that is 42), never another answer
    assert prompts.example_answers() == {
        "the/path/you/found.py",
        "1932",
        "the text you found",
        "42",
    }
    assert check("1932", TEXT, outputs=["no year"], literal=True).rule == "placeholder"  # type: ignore[union-attr]
    assert check("The text you found", TEXT, literal=True).rule == "placeholder"  # type: ignore[union-attr]
    assert check("1932", TEXT, outputs=["born in 1932"], literal=True) is None
    assert check("42", TEXT, outputs=["no number"], literal=False) is None
    assert check("pkg/a.py", CODEBASE, literal=True, outputs=["pkg/a.py"]) is None
    # not a literal: the path rule, with the same evidence
    concern = check("the/path/you/found.py", CODEBASE, outputs=[note])
    assert concern is not None and concern.rule == "path"
    assert concern.evidence.endswith("; the outputs so far name these files: pkg/sub/b.py:1")


def test_a_path_naming_no_file_is_questioned_with_the_files_the_outputs_named():
    outputs = ["pkg/sub/b.py:1: y = 2\nsee pkg/a.py", "pkg/a.py:1: x = 1", "other/c.py:3"]
    concern = check("pkg/b.py", CODEBASE, outputs=outputs)
    assert concern == verify.Concern(
        "path",
        "no file 'pkg/b.py' exists in the codebase (2 files); files with a similar name: "
        "pkg/sub/b.py; the outputs so far name these files: pkg/sub/b.py:1, pkg/a.py:1",
    )
    assert check("pkg/b.py", CODEBASE).evidence.endswith("similar name: pkg/sub/b.py")  # type: ignore[union-attr]


def test_the_files_outputs_named_are_the_codebases_in_order_with_their_first_line():
    files = {f"m{i}.py": "" for i in range(8)} | {"a/x.js": "", "b/x.js": "", "lib/u.ts": ""}
    ctx = Context(value=files, kind="codebase")
    outputs = [
        "m3.py and ./m1.py:7, json.dumps, v1.2, gone.py:4",
        "m3.py:12 then m1.py:9, x.js:2 (two files end so), u.ts:5",
    ]
    assert verify.printed_paths(outputs, ctx) == ["m3.py:12", "m1.py:7", "lib/u.ts:5"]
    many = [" ".join(f"m{i}.py:{i}" for i in range(8))]
    assert verify.printed_paths(many, ctx) == [f"m{i}.py:{i}" for i in range(5)]
    assert verify.printed_paths(outputs, TEXT) == []


def test_numbers_counted_over_nothing_are_doubted():
    note = "grep: no line matches 'zebra' in all 2 files"
    assert check("0", stderr=note).rule == "empty-count"  # type: ignore[union-attr]
    assert check("12", stderr=note).rule == "empty-count"  # type: ignore[union-attr]
    assert check("0", outputs=["hits = []", "[]"]).rule == "empty-count"  # type: ignore[union-attr]
    # the evidence stays in view when FINAL cells (which print nothing) follow it
    assert check("0", outputs=["20 lines\n0 []", "\n\n", "\n\n"]).rule == "empty-count"  # type: ignore[union-attr]
    assert check("0", outputs=["zeros: 0 of 40 lines"]) is None
    assert check("3", outputs=["[]"]) is None  # only a 0 is read off an empty collection


def test_guess_rule_applies_to_short_literals_only():
    assert check("17", outputs=["no number"], literal=True).rule == "guess"  # type: ignore[union-attr]
    assert check("17", outputs=["n = 17"], literal=True) is None
    assert check("17", outputs=["no number"], literal=False) is None
    # the prompts' own example number: a copy of the example
    assert check("42", outputs=["no number"], literal=True).rule == "placeholder"  # type: ignore[union-attr]
    assert check("a longer prose answer", literal=True) is None


SUBCLASS_Q = (
    "Which classes in the codebase are declared with `extends SirezLukud` (direct "
    "subclasses)? List the class names."
)


def test_an_answer_that_restates_the_question_is_doubted():
    # the 1.5B's answer to this question in session 10 (held-out codeintel-006, 0)
    restated = "the class names that are declared with extends SirezLukud"
    concern = verify.check(restated, context=TEXT, outputs=[], question=SUBCLASS_Q)
    assert concern is not None and concern.rule == "restated"
    assert concern.evidence.startswith("it repeats the question's own words")
    # the answer itself, names picked from the question, a value the question lacks: fine
    for answer in (
        "DagedBeredFemob",
        "SirezLukud, DagedBeredFemob",
        "classes, codebase, names and SirezLukud",  # a list: one function word
        "the class names are DagedBeredFemob",
    ):
        assert verify.check(answer, context=TEXT, outputs=[answer], question=SUBCLASS_Q) is None
    assert not verify.restates("The default is None", "What is the default of `x`?")
    assert verify.restates("the default of x is the default", "What is the default of `x`?")
    assert not verify.restates(restated, "")  # no question given: not applied
    # a number or a path is a value even when the question names it (a yes/no question)
    confirm = "Is the helper defined in pkg/core.py, and does it return 42?"
    assert not verify.restates("The helper is defined in pkg/core.py and returns 42", confirm)
    assert not verify.restates("it is defined in the core.py of the helper", confirm)
    assert verify.restates("the helper is defined in the", confirm)
    # prose (over MAX_CHECKED_CHARS) is not read
    long = " ".join([restated] * 10)
    assert verify.check(long, context=TEXT, outputs=[], question=SUBCLASS_Q) is None


# -- through the loop -------------------------------------------------------------------------


def config(**kw) -> RunConfig:
    return RunConfig(
        root_model="root", sub_model="sub", budget=Budget(**kw.pop("budget", {})), **kw
    )


async def go(registry, question, context, cfg):
    try:
        return await run_task(question, context, cfg, get_model=registry.get)
    finally:
        await registry.aclose()


async def test_a_restated_question_is_questioned_once_and_the_next_answer_taken(tmp_path):
    (tmp_path / "error.js").write_text(
        "class SirezLukud extends Error {}\nclass DagedBeredFemob extends SirezLukud {}\n"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        turn = turn_of(messages)
        if turn == 0:
            return repl("print(find_subclasses('SirezLukud'))")
        if turn == 1:
            return repl("FINAL('the class names that are declared with extends SirezLukud')")
        return repl("FINAL('DagedBeredFemob')")

    result = await go(scripted_registry(root=root, sub=root), SUBCLASS_Q, tmp_path, config())
    assert (result.status, result.answer, result.answer_source, result.iterations) == (
        "completed",
        "DagedBeredFemob",
        "final",
        3,
    )
    questioned = last_user(seen[2])
    assert "the class names that are declared with extends SirezLukud" in questioned
    assert "it repeats the question's own words and adds nothing to them" in questioned


async def test_an_error_answer_is_questioned_with_evidence_and_then_marked_unverified(tmp_path):
    (tmp_path / "m.py").write_text("class Proto:\n    pass\n")
    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("r = list_files('protocol/ClassName.py')\nprint(r)")
        return repl("FINAL('not found: ' + str(r))")

    result = await go(scripted_registry(root=root, sub=root), "Where is Proto?", tmp_path, config())
    assert (result.status, result.answer, result.answer_source) == (
        "completed",
        "not found: []",
        "unverified",
    )
    assert result.iterations == 3
    question = last_user(seen[2])
    assert "'not found: []' was not accepted yet" in question and "failed search" in question


async def test_a_corrected_answer_after_the_question_is_accepted_as_final(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "proto.py").write_text("class Proto:\n    pass\n")
    seen = []

    def root(messages):
        seen.append(messages)
        t = turn_of(messages)
        if t == 0:
            return repl("print(list_files())")
        if t == 1:
            return repl('FINAL("protocol/proto.py")')  # a path that does not exist
        return repl("FINAL(find_definition('Proto')[0].split(':')[0])")

    result = await go(scripted_registry(root=root, sub=root), "Where is Proto?", tmp_path, config())
    assert (result.answer, result.answer_source, result.iterations) == ("pkg/proto.py", "final", 3)
    assert "no file 'protocol/proto.py' exists" in last_user(seen[2])
    assert "pkg/proto.py" in last_user(seen[2])  # the close match is named


async def test_a_copied_example_answer_is_questioned_with_the_files_the_outputs_named(tmp_path):
    """Session 11's codeintel-007 in small: find_subclasses came back empty with a note
    naming the class's file, and the model answered the system prompt's example path. It
    is questioned as a copy, with the file the note named; the next answer is taken."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "help.py").write_text(
        "class Vorim:\n    def dabok(self):\n        pass\n\n    def zisob(self):\n        pass\n"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        t = turn_of(messages)
        if t == 0:
            return repl("print(find_subclasses('Vorim', recursive=True))")
        if t == 1:
            return repl('FINAL("the/path/you/found.py")')
        return repl("FINAL([h.split()[-1].split('(')[0] for h in outline('lib/help.py')[1:]])")

    result = await go(
        scripted_registry(root=root, sub=root),
        "Which methods does Vorim define?",
        tmp_path,
        config(),
    )
    assert (result.answer, result.answer_source, result.iterations) == (
        "['dabok', 'zisob']",
        "final",
        3,
    )
    assert (
        "Your answer 'the/path/you/found.py' was not accepted yet: it is the example answer "
        "of my instructions (FINAL('the/path/you/found.py')), copied: no output showed it, and "
        "the example only shows how to call FINAL; the outputs so far name these files: "
        "lib/help.py:1. Check it with code"
    ) in last_user(seen[2])


async def test_a_count_over_an_empty_search_is_questioned(tmp_path):
    (tmp_path / "a.py").write_text("import os\n")
    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("print(list_files())")
        return repl("FINAL(len(grep('warnings\\\\.warn')))")

    result = await go(
        scripted_registry(root=root, sub=root), "How many warn calls?", tmp_path, config()
    )
    assert (result.answer, result.answer_source) == ("0", "unverified")
    assert "search found nothing" in last_user(seen[2])


async def test_an_unverified_answer_in_the_last_turn_is_marked_not_questioned():
    def root(messages):
        return repl("print(len(context))") if turn_of(messages) == 0 else repl("FINAL('Error: x')")

    result = await go(
        scripted_registry(root=root, sub=root), "q", "abc", config(budget={"max_iterations": 2})
    )
    assert (result.answer, result.answer_source, result.iterations) == ("Error: x", "unverified", 2)


# -- llm_map ----------------------------------------------------------------------------------


def test_mapping_prompts_and_splitting():
    groups = mapping.group(["a", "b", "c"], 2)
    assert groups == [["a", "b"], ["c"]]
    assert mapping.prompt("Label it.", ["x"]).startswith("Label it.\n\nItem:\nx")
    many = mapping.prompt("Label it.", ["x", "y"])
    assert "exactly 2 lines" in many and "1. x\n2. y" in many
    assert mapping.split_replies(groups, ["2: B\n1) A\nnoise", "C"]) == ["A", "B", "C"]
    out = mapping.split_replies([["a", "b"]], ["1: only one"])
    assert out[0] == "only one" and out[1].startswith("Error: ") and "item 2" in out[1]
    assert mapping.split_replies([["a", "b"]], ["Error: boom"]) == ["Error: boom"] * 2


async def test_llm_map_runs_one_sub_call_per_item_in_order_with_per_item_errors():
    calls = []

    def sub(messages):
        text = messages[-1]["content"]
        calls.append(text)
        item = text.split("Item:\n")[1].split("\n")[0]
        if item == "boom":
            raise RuntimeError("sub-model exploded")
        return item.upper()

    def root(messages):
        if turn_of(messages) == 0:
            return repl("out = llm_map('Shout this word.', ['a', 'boom', 'c', 'd'])\nprint(out)")
        return repl("FINAL(out[0] + out[2] + out[3])")

    seen = []

    def spy(messages):
        seen.append(messages)
        return root(messages)

    registry = scripted_registry(root=spy, sub=sub)
    result = await go(registry, "q", "abc", config())
    assert result.answer == "ACD"
    shown = last_user(seen[1])
    assert "['A', \"Error: sub-call to 'sub' failed" in shown and "'C', 'D']" in shown
    assert len(calls) == 4 and all(c.startswith("Shout this word.") for c in calls)


async def test_llm_map_packs_items_per_call():
    calls = []

    def sub(messages):
        text = messages[-1]["content"]
        calls.append(text)
        if "Item:\n" in text:  # a group of one is asked about plainly
            return str(len(text.split("Item:\n")[1].split("\n")[0]))
        items = [line.split(". ", 1)[1] for line in text.split("Items:\n")[1].splitlines()]
        return "\n".join(f"{n}: {len(it)}" for n, it in enumerate(items, 1))

    def root(messages):
        if turn_of(messages) == 0:
            return repl(
                "out = llm_map('Length?', ['aa', 'b', 'cccc'], items_per_call=2)\nprint(out)"
            )
        return repl("FINAL(','.join(out))")

    result = await go(scripted_registry(root=root, sub=sub), "q", "abc", config())
    assert result.answer == "2,1,4"
    assert len(calls) == 2 and "1. aa\n2. b" in calls[0] and "Item:\ncccc" in calls[1]


@pytest.mark.parametrize(
    ("instruction", "helper"),
    [
        ("find_subclasses(SirezLukud)", "find_subclasses"),
        ("  outline  ", "outline"),
        ("grep('def main', context)", "grep"),
        ("llm_query", "llm_query"),
        ("Is this an animal?", None),
        ("Summarise outline(x) of this file.", None),  # words that mention a helper
        ("print(x)", None),  # code, but not a REPL helper
        ("(", None),
    ],
)
def test_an_instruction_that_is_a_repl_helper_call_is_named(instruction, helper):
    assert mapping.helper_in_instruction(instruction) == helper


@pytest.mark.parametrize(
    ("instruction", "code"),
    [
        ("find_subclasses(SirezLukud)", "print(find_subclasses('SirezLukud'))"),
        ("outline('lib/error.js')", "print(outline('lib/error.js'))"),
        ("grep('def main', context)", "print(grep('def main', context))"),
        ("read_file(path=a, start=1)", "print(read_file(path='a', start=1))"),
        ("  outline  ", "print([outline(item) for item in items])"),  # one call per item
        ("Is this an animal?", None),
        ("print(x)", None),
    ],
)
def test_a_helper_call_instruction_is_shown_as_the_line_to_run(instruction, code):
    assert mapping.helper_call_code(instruction) == code


@pytest.mark.parametrize(
    ("code", "source"),
    [
        (
            "r = llm_map('outline', find_subclasses('Vorim', recursive=True))",
            "find_subclasses('Vorim', recursive=True)",
        ),
        ("r = llm_map(instruction='outline', items=files)", "files"),
        (
            "r = llm_map('outline',\n    [p for p in\n     list_files('*.py')])",
            "[p for p in list_files('*.py')]",
        ),
        ("a = llm_map('outline', xs)\nb = llm_map('Is it a test?', ys)", "xs"),  # its own call
        ("a = llm_map('outline', xs)\nb = llm_map('outline', ys)", None),  # two: which?
        ("r = llm_map(what, files)", None),  # the instruction is no literal
        ("r = llm_map('outline')", None),  # no items
        ("r = llm_map('outline', files", None),  # does not parse
        (f"r = llm_map('outline', [{'1, ' * 60}1])", None),  # too long to quote
        (None, None),
    ],
)
def test_the_items_a_refused_cell_passed_are_found_in_its_code(code, source):
    assert mapping.items_source(code, "outline") == source


def test_a_bare_helper_is_applied_to_the_items_the_cell_passed():
    line = mapping.helper_call_code("outline", "find_subclasses('Vorim')")
    assert line == "print([outline(item) for item in find_subclasses('Vorim')])"
    assert mapping.helper_call_code("outline", None) == "print([outline(item) for item in items])"
    # a call as the instruction takes no items
    assert (
        mapping.helper_call_code("find_subclasses(Base)", "xs") == "print(find_subclasses('Base'))"
    )


async def test_the_line_a_refusal_suggests_for_a_bare_helper_runs_as_it_is_shown():
    """The refused cell bound no ``items``: the line shown applies the helper to what the
    cell passed, and the model's next cell, that line copied from the folded note, runs."""
    subs = []

    def sub(messages):
        subs.append(messages[-1]["content"])
        return f"answer {len(subs)}"

    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("out = llm_map('llm_query', context.splitlines())\nprint(out)")
        if turn_of(messages) == 1:
            line = last_user(messages).split("run it in your code instead: ")[1].split("\n")[0]
            return repl(line)
        return repl("FINAL(len(context.splitlines()))")

    result = await go(scripted_registry(root=root, sub=sub), "q", "a\nb\nc", config())
    shown = last_user(seen[1])
    line = "print([llm_query(item) for item in context.splitlines()])"
    assert f"cannot run llm_query(); run it in your code instead: {line}" in shown
    assert sorted(subs) == ["a", "b", "c"]  # the suggested line ran: one llm_query per line
    assert "['answer 1', 'answer 2', 'answer 3']" in last_user(seen[2])
    assert (result.answer, result.iterations) == ("3", 3)


def test_a_bare_helper_over_no_items_gets_the_notes_next_step_not_a_line_over_nothing():
    refused = (
        "llm_map's instruction is sent to a sub-model as text (use llm_map for a question in "
        "words about each item), which cannot run outline()"
    )
    source = "find_subclasses('Vorim', recursive=True)"
    assert mapping.empty_items_refusal(refused, source, "outline('lib/help.js')") == (
        f"{refused}; and its items, {source}, are empty, so there is nothing to run it on. "
        "Run this instead: print(outline('lib/help.js'))"
    )
    assert mapping.empty_items_refusal(refused, None, None) == (
        f"{refused}; and its items are empty, so there is nothing to run it on. Find what the "
        "question asks another way first (not over an empty result)."
    )
    assert mapping.empty_items_refusal(refused, "[]", None) == mapping.empty_items_refusal(
        refused, None, None
    )
    # too long with the items quoted: they go, the next step stays whole
    step = "outline('" + "d/" * 60 + "m.py')"
    text = mapping.empty_items_refusal(refused, source, step)
    assert text == (
        f"{refused}; and its items are empty, so there is nothing to run it on. "
        f"Run this instead: print({step})"
    )
    assert len(text) <= mapping.MAX_REFUSAL
    # a next step too long to fit at all: the pointer instead
    step = "outline('" + "d/" * 150 + "m.py')"
    assert "Find what the question asks" in mapping.empty_items_refusal(refused, source, step)
    assert mapping.applies_to_items("outline") and mapping.applies_to_items(" llm_query ")
    assert not mapping.applies_to_items("find_subclasses('X')")
    assert not mapping.applies_to_items("what kind is this?")


async def test_a_refused_bare_helper_over_an_empty_result_points_at_the_notes_next_step(tmp_path):
    """Session 11's codeintel-007: ``llm_map("outline", find_subclasses('Vorim'))`` was
    refused with ``print([outline(item) for item in find_subclasses('Vorim', ...)])``, which
    the 1.5B ran as shown: it printed ``[]``. Over empty items the refusal now shows the next
    step the helper's note named, and that line, run as shown, lists the class's methods. A
    later cell's empty ``llm_map`` does not inherit that step."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "help.py").write_text(
        "class Vorim:\n    def dabok(self):\n        pass\n\n    def zisob(self):\n        pass\n"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        t = turn_of(messages)
        if t == 0:
            return repl("llm_map('outline', find_subclasses('Vorim', recursive=True))")
        if t == 1:
            return repl(last_user(messages).split("Run this instead: ")[1].split("\n")[0])
        if t == 2:
            return repl("llm_map('outline', [])")
        return repl("FINAL('dabok, zisob')")

    result = await go(scripted_registry(root=root, sub=root), "q", tmp_path, config())
    shown = last_user(seen[1])
    assert (
        "Your last cell printed this before it raised:\n[stderr]\nfind_subclasses: no class in "
        "the codebase derives from 'Vorim'; 'Vorim' itself is defined at lib/help.py:1 (class "
        "Vorim); outline('lib/help.py') lists its methods"
    ) in shown
    assert (
        "It raised RuntimeError: llm_map's instruction is sent to a sub-model as text (use "
        "llm_map for a question in words about each item), which cannot run outline(); and "
        "its items, find_subclasses('Vorim', recursive=True), are empty, so there is nothing "
        "to run it on. Run this instead: print(outline('lib/help.py'))"
    ) in shown
    assert "for item in" not in shown
    ran = last_user(seen[2])
    assert (
        "['   1| class Vorim:', '   2|     def dabok(self):', '   5|     def zisob(self):']" in ran
    )
    assert (
        "cannot run outline(); and its items are empty, so there is nothing to run it on. Find "
        "what the question asks another way first (not over an empty result)."
    ) in last_user(seen[3])
    assert (result.answer, result.iterations) == ("dabok, zisob", 4)


@pytest.mark.parametrize(
    ("instruction", "codebase", "helper"),
    [
        ("outline", True, "outline"),
        ("outline", False, None),  # a text's REPL has no outline(): words for a sub-model
        ("find_subclasses(Base)", False, "find_subclasses"),  # code all the same
        ("llm_query", False, "llm_query"),  # in every REPL
        ("context", True, None),  # a value, not a helper: no "context(item)" to run
        ("history", False, None),
    ],
)
def test_only_the_helpers_the_runs_repl_has_are_refused(instruction, codebase, helper):
    assert mapping.helper_in_instruction(instruction, codebase=codebase) == helper
    code = mapping.helper_call_code(instruction, "xs", codebase=codebase)
    runnable = helper is not None and (codebase or helper not in CODEBASE_HELPERS)
    assert (code is not None) == runnable  # never a line naming a helper the REPL lacks


async def test_llm_map_outline_over_a_texts_parts_is_an_instruction_in_words():
    """In a text's REPL, ``llm_map('outline', parts)`` was refused as a helper call, with
    ``print([outline(item) for item in parts])`` as the line to run: that line raised
    ``NameError`` (the codebase helpers exist only for a codebase). It maps now."""
    subs = []

    def sub(messages):
        subs.append(messages[-1]["content"])
        return "an outline"

    def root(messages):
        if turn_of(messages) == 0:
            return repl("out = llm_map('outline', context.split('\\n\\n'))\nprint(out)")
        return repl("FINAL(len(out))")

    result = await go(
        scripted_registry(root=root, sub=sub), "q", "Chapter one.\n\nChapter two.", config()
    )
    assert len(subs) == 2 and all(p.startswith("outline\n\nItem:\n") for p in subs)
    assert (result.status, result.answer) == ("completed", "2")


async def test_llm_map_with_a_helper_call_as_its_instruction_fails_the_cell_saying_why():
    """A sub-model cannot run REPL helpers: the cell fails before any sub-call, and the
    model reads what to do instead; then it calls the helper in code."""
    subs = []

    def sub(messages):
        subs.append(messages)
        return "no"

    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("out = llm_map('list_files()', context.splitlines())")
        return repl("FINAL(len(context.splitlines()))")

    result = await go(scripted_registry(root=root, sub=sub), "q", "a\nb\nc", config())
    assert subs == []
    shown = last_user(seen[1])
    # a text's REPL has no list_files(): no line to run that would raise NameError
    assert "cannot run list_files(); nor can this REPL: list_files() is there only" in shown
    assert "run it in your code instead" not in shown
    assert (result.answer, result.iterations) == ("3", 2)


async def test_llm_map_with_a_codebase_helper_call_shows_the_line_to_run(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("out = llm_map('list_files()', list(context))")
        return repl("FINAL(len(context))")

    result = await go(scripted_registry(root=root, sub=root), "q", tmp_path, config())
    shown = last_user(seen[1])
    assert "cannot run list_files(); run it in your code instead: print(list_files())" in shown
    assert (result.answer, result.iterations) == ("1", 2)


def test_llm_map_rejects_a_string_of_items():
    from rlmd.kernel.core import Kernel

    kernel = Kernel(lambda fn, args: None)
    with pytest.raises(TypeError, match="items must be a list"):
        kernel.ns["llm_map"]("x", "not a list")


# -- small fixes from the same issue ---------------------------------------------------------


def test_read_file_with_end_before_start_says_why(capsys):
    cb = Codebase({"f.py": "\n".join(f"line {i}" for i in range(1, 60))})
    assert cb.read_file("f.py", 41, 40) == ""
    err = capsys.readouterr().err
    assert "end=40 is before start=41" in err and "read_file('f.py', 41, 59)" in err


def test_an_extracted_answer_loses_its_fence():
    assert unfence("```\n42\n```") == "42"
    assert unfence("```text\npkg/a.py\n```\n") == "pkg/a.py"
    assert unfence("The answer is ```42```.") == "The answer is ```42```."
    assert unfence("```\na\n```\nand\n```\nb\n```") == "```\na\n```\nand\n```\nb\n```"


async def test_a_cell_repeated_a_third_time_is_not_run_again():
    """The repeat rules alone (re-sampling off, or every re-sample repeating too)."""
    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) < 4:
            return repl("print('counting', len(context))")
        return repl("FINAL(len(context))")

    cfg = config(resample_repeats=0, fold_failed_turns=False)
    result = await go(scripted_registry(root=root, sub=root), "q", "abcd", cfg)
    assert (result.status, result.answer, result.iterations) == ("completed", "4", 5)
    runs = [last_user(m) for m in seen[1:]]
    assert "[cell 1]" in runs[0] and "[cell 1]" in runs[1]  # the first repeat still runs
    assert "same code as in your previous turn" in runs[1]
    for skipped in runs[2:4]:
        assert "[cell 1]" not in skipped and "I did not run it again" in skipped


class Resampled:
    """A root model that sends ``stuck`` code on turn ``turn`` until it has been asked for
    that turn ``stuck_calls`` times, then ``fresh``; ``calls`` counts the calls per turn."""

    def __init__(self, turn: int, stuck: str, fresh: str, stuck_calls: int = 1) -> None:
        self.turn, self.stuck, self.fresh, self.stuck_calls = turn, stuck, fresh, stuck_calls
        self.calls: dict[int, int] = {}

    def __call__(self, messages: list[dict]) -> str:
        t = turn_of(messages)
        self.calls[t] = self.calls.get(t, 0) + 1
        if t < self.turn:
            return repl("x = len(context)\nprint(x)") if t == 0 else repl(self.stuck)
        if t == self.turn:
            return repl(self.stuck if self.calls[t] <= self.stuck_calls else self.fresh)
        return repl("FINAL(x)")


def root_calls(events: list) -> list:
    from rlmd.engine.events import ModelCallStarted

    return [e for e in events if isinstance(e, ModelCallStarted) and e.role == "root"]


async def test_a_turn_repeating_the_previous_cell_is_resampled_and_recorded():
    model = Resampled(2, "print(x)", "print(x * 2)")
    events: list = []
    cfg = config()
    result = await run_task(
        "q",
        "abcd",
        cfg,
        get_model=scripted_registry(root=model, sub=model).get,
        sinks=(events.append,),
    )
    assert (result.status, result.answer, result.iterations) == ("completed", "4", 4)
    assert model.calls == {0: 1, 1: 1, 2: 2, 3: 1}  # turn 2 asked once more
    calls = root_calls(events)
    resample = {"temperature": 0.7, "seed": 1}
    assert [c.sampling for c in calls] == [None, None, None, resample, None]
    assert calls[3].data["sampling"] == resample and "sampling" not in calls[2].data
    assert result.usage["total"]["calls"] == 5  # the re-sample is in the usage
    finished = [e for e in events if type(e).__name__ == "CellFinished"]
    assert [e.code.strip() for e in finished][2] == "print(x * 2)"  # the fresh code ran


async def test_resampling_is_bounded_then_the_repeat_rules_apply():
    model = Resampled(2, "print(x)", "print(x * 2)", stuck_calls=99)
    events: list = []
    result = await run_task(
        "q",
        "abcd",
        config(),
        get_model=scripted_registry(root=model, sub=model).get,
        sinks=(events.append,),
    )
    assert (result.status, result.answer) == ("completed", "4")
    assert model.calls[2] == 3  # the reply and resample_repeats (2) re-samples
    sampled = [c.sampling for c in root_calls(events) if c.sampling]
    assert sampled == [{"temperature": 0.7, "seed": 1}, {"temperature": 1.0, "seed": 2}]
    finished = [e for e in events if type(e).__name__ == "CellFinished"]
    assert [e.code.strip() for e in finished][:3] == [
        "x = len(context)\nprint(x)",
        "print(x)",
        "print(x)",
    ]


@pytest.mark.parametrize(
    ("between", "asked"),
    [
        ("print(z)", 2),  # raises too: nothing ran that could have made turn 1's cell work
        ("y = 'defined'", 1),  # worked: turn 1's cell works now, so it is run as it is
    ],
)
async def test_a_cell_that_raised_earlier_is_resampled_unless_a_cell_worked_since(
    between: str, asked: int
) -> None:
    # turn 1 raises (y is undefined), turn 2 sends `between`, turn 3 repeats turn 1's cell
    model = Resampled(3, "print(y)", "print(x)")
    events: list = []

    def root(messages):
        return repl(between) if turn_of(messages) == 2 else model(messages)

    result = await run_task(
        "q",
        "abcd",
        config(),
        get_model=scripted_registry(root=root, sub=root).get,
        sinks=(events.append,),
    )
    assert (result.status, result.answer) == ("completed", "4")
    assert model.calls[3] == asked
    sampled = [c.sampling for c in root_calls(events) if c.sampling]
    assert sampled == ([{"temperature": 0.7, "seed": 1}] if asked == 2 else [])
    ran = [e for e in events if type(e).__name__ == "CellFinished"][3]
    assert (ran.code.strip(), ran.error is None) == (
        ("print(x)", True) if asked == 2 else ("print(y)", True)
    )


async def test_a_changed_cell_is_never_resampled():
    events: list = []

    def root(messages):
        t = turn_of(messages)
        return repl(f"x = len(context) + {t}\nprint(x)") if t < 4 else repl("FINAL(x)")

    result = await run_task(
        "q",
        "abcd",
        config(),
        get_model=scripted_registry(root=root, sub=root).get,
        sinks=(events.append,),
    )
    assert (result.status, result.answer, result.iterations) == ("completed", "7", 5)
    assert all(c.sampling is None for c in root_calls(events))
    assert len(root_calls(events)) == 5


async def test_resampling_off_asks_each_turn_once():
    model = Resampled(2, "print(x)", "print(x * 2)")
    cfg = config(resample_repeats=0)
    result = await go(scripted_registry(root=model, sub=model), "q", "abcd", cfg)
    assert result.status == "completed" and model.calls[2] == 1


async def test_a_final_given_again_after_its_refusal_and_question_is_not_skipped_as_a_repeat():
    """The model insists on its answer: the same ``FINAL`` cell a third time still runs and
    is accepted (it was refused as too early, then questioned as unseen in any output)."""

    def root(messages):
        return repl("FINAL('ok')")

    result = await go(scripted_registry(root=root, sub=root), "q", "abcd", config())
    assert (result.status, result.answer, result.iterations) == ("completed", "ok", 3)


# -- answers computed from failures ----------------------------------------------------------


def test_an_answer_from_mostly_failed_sub_calls_is_doubted():
    tally = verify.SubcallTally()
    tally.add(["yes", "Error: sub-call to 'sub' failed: boom", "Error: again"])
    assert (tally.results, tally.failed, tally.mostly_failed) == (3, 2, True)
    concern = verify.check("7", context=TEXT, outputs=["7"], literal=False, subcalls=tally)
    assert concern is not None and concern.rule == "failed-subcalls"
    assert "2 of the 3 sub-call results" in concern.evidence and "boom" in concern.evidence
    # half or fewer failed: the answer stands on real results
    half = verify.SubcallTally()
    half.add(["yes", "Error: x"])
    assert not half.mostly_failed
    assert verify.check("7", context=TEXT, outputs=["7"], literal=False, subcalls=half) is None
    # a raised call counts as one failed result
    raised = verify.SubcallTally()
    raised.fail("Error: sub-call to 'sub' failed: timeout")
    assert raised.mostly_failed and (raised.results, raised.failed) == (1, 1)


def test_an_answer_after_an_output_of_mostly_error_lines_is_doubted():
    out = "Error: a failed\nError: b failed\nok c\nValueError: d\n"
    concern = check("3", outputs=[out, "\n\n"])
    assert concern is not None and concern.rule == "failed-subcalls"
    assert "3 of the 4 lines" in concern.evidence
    # a short traceback, paths that mention errors, or a minority of error lines are not
    tb = 'Traceback (most recent call last):\n  File "<cell>", line 1\nNameError: x'
    assert check("3", outputs=[tb, "3"]) is None
    assert check("3", outputs=["pkg/e.py:3:class BadError(ValueError):\n" * 4]) is None
    assert check("3", outputs=["Error: a\nError: b\nError: c\nok\nok\nok\nok"]) is None


async def test_a_count_over_mostly_failed_llm_map_results_is_questioned_then_marked():
    """``llm_map`` in one cell, the count answered in the next: the question names the
    failed share and the first error; the same answer again is accepted as unverified."""

    def sub(messages):
        item = messages[-1]["content"].split("Item:\n")[1].split("\n")[0]
        if item != "a cat":
            raise RuntimeError("server dropped the request")
        return "yes"

    seen = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl(
                "lines = context.splitlines()\n"
                "answers = llm_map('Is this an animal? yes or no', lines)\n"
                "count = sum(a.startswith('yes') for a in answers)\nprint(count)"
            )
        return repl("FINAL(count)")

    result = await go(
        scripted_registry(root=root, sub=sub),
        "How many animals?",
        "a cat\na chair\na spoon\na car",
        config(),
    )
    assert (result.status, result.answer, result.answer_source) == ("completed", "1", "unverified")
    assert result.iterations == 3
    question = last_user(seen[2])
    assert "'1' was not accepted yet" in question and "3 of the 4 sub-call results" in question
    assert "server dropped the request" in question


async def test_sub_calls_that_mostly_worked_do_not_hold_up_the_answer():
    def sub(messages):
        item = messages[-1]["content"].split("Item:\n")[1].split("\n")[0]
        if item == "a car":
            raise RuntimeError("one failure")
        return "yes" if item == "a cat" else "no"

    def root(messages):
        if turn_of(messages) == 0:
            return repl(
                "answers = llm_map('Is this an animal?', context.splitlines())\n"
                "count = sum(a.startswith('yes') for a in answers)\nprint(count)"
            )
        return repl("FINAL(count)")

    result = await go(
        scripted_registry(root=root, sub=sub), "How many?", "a cat\na chair\na car", config()
    )
    assert (result.answer, result.answer_source, result.iterations) == ("1", "final", 2)

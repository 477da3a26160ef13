"""Every teacher play ends with the same act (issue 13, session 16): a cell prints the value,
then a turn reads the printed value and writes it out, ``FINAL('...')``; and each family's
reading turn opens with its own words, so a student cannot end one family's run with another
family's last turn (session 15's tuned 0.5B answered a needle with "The output names the
file: ..."). Each play runs through the real engine and the subprocess sandbox on its own
train task and must score reward 1."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry
from rlmd.store import Store
from rlmd.train import teacher, teacher_literal
from rlmd.train.export import ExportFilters, sft_samples
from rlmd.train.rollout import RolloutOptions, run_rollouts
from rlmd.train.tasks import TrainTask

ITEMS = {  # instance -> label (the sub-model's answer)
    "a small furry rodent": "animal",
    "a tall tree with needles": "plant",
    "a large wild cat": "animal",
    "a flowering shrub": "plant",
    "a bird of prey": "animal",
    "a striped wild horse": "animal",
}
# instances the sub-model answers off the list (a word of the description: `unknown` to the
# labelling cell), more of them than any category has: the compute step must leave them out
OFF_LIST = ["a bracket fungus on oak", "a mossy boulder", "a winter storm", "a cargo barge",
            "a tidal marsh"]  # fmt: skip
USERS = [100, 101, 100, 102, 101, 103, 100, 101, 102, 103, 100]  # per line: ITEMS, OFF_LIST
# per user: 100 animal 2; 101 plant 1, animal 1; 102 plant 1; 103 animal 1 (unknown: 5)
LINES = "\n".join(
    f"Date: Jan {i + 1:02d}, 2023 || User: {user} || Instance: {text}"
    for i, (text, user) in enumerate(zip([*ITEMS, *OFF_LIST], USERS, strict=True))
)
CATS = "Label each instance with one of these categories: animal, plant, food."

# replies like a small sub-model's: other case, extra words ("Category: Animal", "PLANT."),
# and a word of the description for the instances of no listed category
labeller = teacher.RealisticLabeller("reading", truth=ITEMS.get, off_list=0.0)


def oolong(template: str, answer: str, scorer: str, **params: Any) -> TrainTask:
    return TrainTask(
        f"train-oolong-{template}", "oolong", f"{CATS} A {template} question.", answer, scorer,
        context=LINES, split="train", params={"template": template, **params},
    )  # fmt: skip


def pairs(template: str, labels: list[str], answer: list[list[int]]) -> TrainTask:
    return TrainTask(
        f"train-pairs-{template}", "pairs", f"{CATS} A {template} question.", answer, "pairs",
        context=LINES, split="train", params={"template": template, "labels": labels},
    )  # fmt: skip


FILES = {
    "pkg/__init__.py": "",
    "pkg/base.py": "class Base:\n    pass\n\n\nLIMIT = ' \\t\\n'\n",
    "pkg/impl.py": (
        "import json\nfrom pkg.base import Base\n\n\nclass Impl(Base):\n    def run(self):\n"
        "        return helper(1) + self.helper2(2)\n\n\ndef helper(x, scale=3):\n"
        "    return x * scale\n"
    ),
    "pkg/other.py": (
        "import pkg.base\n\n\nclass Other(pkg.base.Base):\n    def helper2(self, y):\n"
        "        return helper(y)\n"
    ),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("code")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def codeqa(root: Path, template: str, answer: Any, scorer: str, **params: Any) -> TrainTask:
    return TrainTask(
        f"train-codeqa-{template}", "codeqa", f"a {template} question", answer, scorer,
        context_path=str(root), split="train", params={"template": template, **params},
    )  # fmt: skip


SNIAH = TrainTask(
    "train-sniah-x", "sniah", "What is the special magic number for quiet-otter?", "5150123",
    "contains", split="train", params={"key": "quiet-otter"},
    context="Some essay text. " * 80 + "The special magic number for quiet-otter is: 5150123. "
    + "More essay text. " * 80,
)  # fmt: skip

AGGREGATION = [
    oolong("most_common", "animal", "exact"),
    oolong("least_common", "food", "exact"),
    oolong("count_label", "2", "numeric", label="plant"),
    oolong("compare", "more common", "exact", labels=["animal", "plant"]),
    oolong("user_count", "2", "numeric", user="100", label="animal"),
    oolong("user_most", "100", "exact", label="animal"),
    pairs("one_each", ["animal", "plant"],
          [[100, 101], [100, 102], [101, 102], [101, 103], [102, 103]]),
    pairs("both_have", ["animal", "plant"], [[100, 101], [100, 103], [101, 103]]),
    pairs("both_have_either", ["animal", "plant"],
          [[100, 101], [100, 102], [100, 103], [101, 102], [101, 103], [102, 103]]),
    pairs("both_exactly_one", ["animal", "plant"], [[101, 103]]),
    pairs("both_none", ["plant", "animal"], [[100, 103]]),
]  # fmt: skip

CODEQA = [
    ("where_defined", "pkg/impl.py", "path", {"name": "Impl"}),
    ("call_count", "2", "numeric", {"name": "helper"}),
    ("subclasses", ["Impl", "Other"], "f1", {"base": "Base"}),
    ("param_default", "3", "exact", {"function": "helper", "param": "scale"}),
    ("module_constant", "' \\t\\n'", "exact", {"name": "LIMIT"}),
    ("importers", ["pkg/impl.py"], "f1", {"module": "json"}),
]
LITERAL_FINAL = re.compile(r"^FINAL\((['\"]).*\1\)$", re.S)


def _sample(task: TrainTask, strategy: str, literal_share: float) -> int:
    """The first sample index that plays ``strategy`` without a mistake (deterministic)."""
    return next(
        k
        for k in range(300)
        if (p := teacher.policy(task, k, 0.0, literal_share)).strategy == strategy
        and p.mistake is None
    )


def _play(tasks: list[tuple[TrainTask, str, float]], db: Path) -> list[dict[str, Any]]:
    """Each ``(task, strategy, literal_share)`` played through the engine and the subprocess
    sandbox: its rollout row, SFT samples and the last target's code."""
    reg = Registry()
    reg.add(ModelSpec("lab", "scripted", "lab", options={"callable": labeller}))
    out = []
    with Store(db) as store:
        for task, strategy, share in tasks:
            k = _sample(task, strategy, share)
            name = f"teacher-{task.id}-{strategy}"
            opts = RolloutOptions(
                model="teacher", samples=k + 1, repair_share=0.0, literal_share=share,
                sub_model="lab", rollout_set=name,
            )  # fmt: skip
            asyncio.run(run_rollouts([task], opts, registry=reg, store=store))
            row = next(r for r in store.rollouts(name) if r["sample_index"] == k)
            samples, _ = sft_samples(store, ExportFilters(rollout_sets=(name,)))
            mine = sorted((s for s in samples if s["run_id"] == row["run_id"]),
                          key=lambda s: s["turn"])  # fmt: skip
            out.append({"task": task, "strategy": strategy, "row": row, "samples": mine})
    return out


def _final_code(sample: dict[str, Any]) -> str:
    text = sample["completion"][0]["content"]
    return text.split("```repl\n", 1)[1].rsplit("```", 1)[0].strip()


def _note(sample: dict[str, Any]) -> str:
    return sample["completion"][0]["content"].split("\n```repl", 1)[0]


@pytest.fixture(scope="module")
def played(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    plays: list[tuple[TrainTask, str, float]] = [(t, "labels", 0.0) for t in AGGREGATION]
    plays += [(codeqa(tree, t, a, s, **p), "ast", 0.0) for t, a, s, p in CODEQA]
    plays += [(SNIAH, "regex", 0.0), (SNIAH, "find", 1.0), (SNIAH, "find_lower", 1.0)]
    plays += [(codeqa(tree, "where_defined", "pkg/impl.py", "path", name="Impl"), s, 1.0)
              for s in ("find_definition", "grep")]  # fmt: skip
    plays += [(codeqa(tree, t, a, s, **p), "grep", 1.0) for t, a, s, p in CODEQA
              if t != "param_default" and t != "where_defined"]  # fmt: skip
    return _play(plays, tmp_path_factory.mktemp("store") / "t.db")


def test_every_play_prints_the_value_then_writes_it_out_and_scores_1(played) -> None:
    for got in played:
        row, samples, task = got["row"], got["samples"], got["task"]
        where = (task.id, got["strategy"])
        assert row["reward"] == 1.0, (where, row)
        assert row["details"]["strategy"] == got["strategy"], where
        assert row["details"]["answer_source"] == "final", where
        last = samples[-1]
        code = _final_code(last)
        assert LITERAL_FINAL.match(code), (where, code)  # FINAL('...'), never FINAL(answer)
        # the value was printed by the cell before and read from its output
        value = code[len("FINAL(") + 1 : -2]
        assert "print(" in _final_code(samples[-2]), where
        shown = last["prompt"][-1]["content"].replace("\\\\", "\\")
        assert value.replace("\\\\", "\\") in shown, (where, value)
        for s in samples:  # no target answers with a variable
            assert not re.search(r"FINAL\((?!['\"])", _final_code(s)), (where, s["turn"])
    aggregation = [g for g in played if g["task"].family in ("oolong", "pairs")]
    # the labelling cell and its sub-calls are unchanged: one batched map over every line
    assert all(g["row"]["subcalls"] == len(USERS) for g in aggregation)
    assert all("llm_query_batched(prompts)" in _final_code(g["samples"][1]) for g in aggregation)
    pairs_final = next(g for g in aggregation if g["task"].id == "train-pairs-both_have")
    assert (
        _final_code(pairs_final["samples"][-1]) == "FINAL('[(100, 101), (100, 103), (101, 103)]')"
    )


def test_no_two_families_share_the_opening_words_of_their_final_turns(played) -> None:
    openings: dict[str, set[str]] = {}
    for got in played:
        note = _note(got["samples"][-1])
        openings.setdefault(got["task"].family, set()).add(teacher_literal.opening(note))
    assert set(openings) == {"sniah", "oolong", "pairs", "codeqa"}
    for fam, mine in openings.items():
        others = set().union(*(v for f, v in openings.items() if f != fam))
        assert not mine & others, (fam, mine & others)
    assert openings["sniah"] == {"<name> is followed"}
    assert openings["pairs"] == {"Pairs of users:"}
    assert {o.split()[0] for o in openings["oolong"]} == {"Category", "User"}


def test_a_reading_turn_with_nothing_to_read_answers_the_variable() -> None:
    read = teacher_literal.defined_in("Impl")
    note, code = read([{"role": "user", "content": "[cell 2]\n[]\n\n\nTurn 3 of 6."}])
    assert code == "FINAL_VAR('found')"
    note, code = read([{"role": "user", "content": "[cell 2]\n['pkg/a.py:3']\n"}])
    assert (note, code) == ("The file `pkg/a.py` defines Impl.", "FINAL('pkg/a.py')")
    assert teacher_literal.opening(note) == "The file <name>"


def test_a_codebase_note_has_the_answer_as_its_first_and_only_backticked_literal(played) -> None:
    # session 16's student wrote "`NAME` is defined in the file `P`." and answered the leading
    # NAME: in a codebase note, the value written out is the only backticked literal
    codeqa_plays = [g for g in played if g["task"].family == "codeqa"]
    seen = set()
    for got in codeqa_plays:
        last = got["samples"][-1]
        value = ast.literal_eval(_final_code(last)[len("FINAL(") : -1])  # the string written
        literals = re.findall(r"`([^`]*)`", _note(last))
        assert literals == [value], (got["task"].id, got["strategy"], _note(last), value)
        seen.add(got["task"].params["template"])
    assert seen == {t for t, *_ in CODEQA}


def test_aggregation_opens_with_its_own_first_words(played) -> None:
    # session 16's oolong runs opened like a needle ("I look for the key ..."): the first
    # turn of oolong and pairs names the records it parses, in words no other family's first
    # turn starts with
    first: dict[str, set[str]] = {}
    for got in played:
        fam = "aggregation" if got["task"].family in ("oolong", "pairs") else "other"
        first.setdefault(fam, set()).add(teacher_literal.opening(_note(got["samples"][0]), 2))
    assert not first["aggregation"] & first["other"], first
    assert all(o.split()[0] in ("Lines", "Every") for o in first["aggregation"]), first


def test_the_compute_turn_has_one_opening_and_one_skeleton_for_every_template(played) -> None:
    # session 17's student read its answer off the labelling cell's Counter (top label
    # `unknown`) or started over: the turn after the labels now has one shape for every
    # oolong and pairs template, and only the template's expression differs
    aggregation = [g for g in played if g["task"].family in ("oolong", "pairs")]
    assert len(aggregation) == 11
    shown = aggregation[0]["samples"][2]["prompt"][-1]["content"]
    assert "'unknown': 5" in shown  # the labelling cell's counts show the off-list replies
    notes, heads, exprs = set(), set(), set()
    for got in aggregation:
        compute = got["samples"][2]
        note, code = _note(compute), _final_code(compute).splitlines()
        assert note.startswith(teacher.COMPUTE_OPENING), note
        notes.add(teacher_literal.opening(note, 8))
        heads.add("\n".join(code[:5]))
        assert code[-1] == "print(answer)", code
        middle = code[5:-1]
        assert 1 <= len(middle) <= 2 and middle[-1].startswith(("answer = ", "    ")), middle
        exprs.add("\n".join(middle))
        assert "llm_query" not in "\n".join(code) and "records = []" not in "\n".join(code)
    assert len(notes) == 1 and len(heads) == 1, (notes, heads)
    assert "if label in categories" in heads.pop()  # counts over the listed categories only
    assert len(exprs) == 11  # the template's own expression


def test_the_realistic_labeller_varies_its_replies_and_answers_some_off_the_list() -> None:
    ask = (
        "Which one of these categories does the description belong to: animal, plant, food? "
        "Answer with the category only.\nDescription: "
    )
    truth = {f"a creature number {i}": "animal" for i in range(40)}

    def replies(off: float, seed: str = "s") -> list[str]:
        lab = teacher.RealisticLabeller(seed, truth=truth.get, off_list=off)
        return [lab([{"role": "user", "content": ask + d}]) for d in truth]

    def category(reply: str) -> str:  # what the labelling cell keeps
        return next((c for c in ("animal", "plant", "food") if c in reply.lower()), "unknown")

    on = replies(0.0)
    assert {category(r) for r in on} == {"animal"} and len(set(on)) >= 4  # varied forms
    assert {category(r) for r in replies(1.0)} == {"unknown"}
    some = [category(r) for r in replies(0.3)]
    assert 0 < some.count("unknown") < len(some)
    assert replies(0.3, "other") != replies(0.3)  # another rollout, other replies
    with pytest.raises(ValueError, match="off_list"):
        teacher.RealisticLabeller("s", off_list=1.5)

"""The programmatic teacher's repair trajectories (issue 13): a share of its rollouts make a
realistic mistake that really raises (or is questioned) in the subprocess sandbox and repair
it on the next turn; the SFT export keeps the mistake in the history of later samples but
never makes it a target. Every teacher cell imports what it uses."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.scripted import turn_of

from rlmd.engine import prompts
from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry
from rlmd.store import Store
from rlmd.train import teacher
from rlmd.train.export import ExportFilters, sft_samples, write_jsonl
from rlmd.train.rollout import RolloutOptions, run_rollouts
from rlmd.train.tasks import TrainTask

NEEDLE = (
    "Some essay text. " * 60
    + "The special magic number for quiet-otter is 5150123. "
    + "More essay text. " * 60
)
SNIAH = TrainTask(
    "train-sniah-x", "sniah", "What is the special magic number for quiet-otter?", "5150123",
    "contains", context=NEEDLE, split="train", params={"key": "quiet-otter"},
)  # fmt: skip

ITEMS = {
    "a small furry rodent": "animal",
    "a tall tree with needles": "plant",
    "a large wild cat": "animal",
    "a flowering shrub": "plant",
    "a bird of prey": "animal",
}
LINES = "\n".join(
    f"Date: Jan {i + 1:02d}, 2023 || User: {100 + i % 2} || Instance: {text}"
    for i, text in enumerate(ITEMS)
)
CATS = "Label each instance with one of these categories: animal, plant."
OOLONG = TrainTask(
    "train-oolong-x", "oolong", CATS + " How many instances are labelled animal?", "3",
    "numeric", context=LINES, split="train", params={"template": "count_label", "label": "animal"},
)  # fmt: skip


def labeller(messages: list[dict[str, Any]]) -> str:
    """The sub-model of the aggregation tests: the label of the described instance."""
    desc = str(messages[-1]["content"]).rsplit("Description:", 1)[-1].strip()
    return ITEMS.get(desc, "unknown")


def _sample_with(task: TrainTask, mistake: str | None, share: float = 1.0) -> int:
    """The first sample index whose seeded draw plays ``mistake`` (deterministic)."""
    return next(k for k in range(200) if teacher.policy(task, k, share).mistake == mistake)


def _rollout(task: TrainTask, k: int, store: Store, share: float = 1.0) -> dict[str, Any]:
    """Play sample ``k`` of ``task`` through the engine and the subprocess sandbox."""
    reg = Registry()
    reg.add(ModelSpec("lab", "scripted", "lab", options={"callable": labeller}))
    # samples 0..k: the earlier indices run too (the resume key), with the same share
    opts = RolloutOptions(model="teacher", samples=k + 1, repair_share=share, sub_model="lab")
    asyncio.run(run_rollouts([task], opts, registry=reg, store=store))
    return next(r for r in store.rollouts("teacher") if r["sample_index"] == k)


def _cells(store: Store, run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = list(store.tree(run_id)["nodes"])
    while stack:
        node = stack.pop()
        stack.extend(node["children"])
        if node["kind"] == "cell":
            out.append(node)
    return sorted(out, key=lambda n: n["seq"])


@pytest.mark.parametrize(
    ("task", "mistake", "raised"),
    [
        (SNIAH, "no_import", "NameError: name 're' is not defined"),
        (OOLONG, "raw_lines", "ValueError: too many values to unpack"),
        (OOLONG, "no_import", "NameError: name 'Counter' is not defined"),
    ],
)
def test_a_repair_trajectory_really_raises_in_the_sandbox_then_succeeds(
    tmp_path: Path, task: TrainTask, mistake: str, raised: str
) -> None:
    k = _sample_with(task, mistake)
    play = teacher.policy(task, k, 1.0)
    with Store(tmp_path / "t.db") as store:
        row = _rollout(task, k, store)
        cells = _cells(store, row["run_id"])
        at = row["details"]["mistake_turns"]
        assert row["details"]["mistake"] == mistake and at == play.planned_mistakes
        assert row["reward"] == 1.0 and row["details"]["answer_source"] == "final"
        assert row["cell_errors"] == 1
        assert [c["status"] for c in cells] == [
            "error" if i in at else "ok" for i in range(len(cells))
        ]
        assert raised in cells[at[0]]["data"]["error"]
        if task is OOLONG:  # the repair did not label the instances twice
            assert row["subcalls"] == len(ITEMS)


def test_an_unchecked_final_is_questioned_by_the_verifier_then_repaired(tmp_path: Path) -> None:
    k = _sample_with(SNIAH, "unchecked_final")
    with Store(tmp_path / "t.db") as store:
        row = _rollout(SNIAH, k, store)
        cells = _cells(store, row["run_id"])
        samples, report = sft_samples(store, ExportFilters(rollout_sets=("teacher",)))
    assert row["reward"] == 1.0 and row["cell_errors"] == 0
    assert cells[1]["data"]["final"] == "None"  # answered, and the run went on
    repair = next(s for s in samples if s["run_id"] == row["run_id"] and s["repair"])
    assert "Your answer 'None' was not accepted yet" in repair["prompt"][-1]["content"]
    assert "\\D{0,40}?" in repair["completion"][0]["content"]
    assert not any("r'\\s*(\\d{5,})'" in s["completion"][0]["content"] for s in samples)


def test_the_export_makes_the_repair_a_target_and_never_the_mistake(tmp_path: Path) -> None:
    """Exact file contents of the SFT export of one repair rollout (sniah, missing import)
    recorded without the fold (``--no-fold``): the mistake and its traceback stay in the
    later prompts."""
    k = _sample_with(SNIAH, "no_import")
    play = teacher.policy(SNIAH, k, 1.0)
    with Store(tmp_path / "t.db") as store:
        opts = RolloutOptions(
            model="teacher", samples=k + 1, repair_share=1.0, fold_failed_turns=False
        )
        asyncio.run(run_rollouts([SNIAH], opts, registry=Registry(), store=store))
        row = next(r for r in store.rollouts("teacher") if r["sample_index"] == k)
        only = ExportFilters(rollout_sets=("teacher",))
        samples, report = sft_samples(store, only)
        kept = sft_samples(store, ExportFilters(rollout_sets=("teacher",), keep_mistakes=True))
    mine = [s for s in samples if s["run_id"] == row["run_id"]]
    out = tmp_path / "sft.jsonl"
    write_jsonl(mine, out)
    lines = [json.loads(x) for x in out.read_text("utf-8").splitlines()]
    replies = _replies(play, [[], *(x["prompt"] for x in lines)])

    system, question = lines[0]["prompt"][:2]
    assert system["role"] == "system" and question["role"] == "user"
    assert question["content"].startswith(f"Question: {SNIAH.question}\n")
    turns = len(replies)
    assert [x["turn"] for x in lines] == list(range(1, turns))  # turn 0 (the mistake) is not
    expected = []
    for t in range(1, turns):
        history = lines[t - 1]["prompt"][2:]
        assert [m["role"] for m in history] == ["assistant", "user"] * t
        assert [m["content"] for m in history[::2]] == replies[:t]  # the mistake included
        expected.append(
            {
                "prompt": [system, question, *history],
                "completion": [{"role": "assistant", "content": replies[t]}],
                "task_id": SNIAH.id,
                "family": "sniah",
                "run_id": row["run_id"],
                "rollout_set": "teacher",
                "model": "teacher",
                "depth": 0,
                "turn": t,
                "reward": 1.0,
                "fixes": [],
                "repair": t == 1,
            }
        )
    assert lines == expected
    error = lines[0]["prompt"][3]["content"]
    assert "NameError: name 're' is not defined" in error
    assert "import re" not in replies[0] and replies[1].count("import re") == 1
    assert all(s["completion"][0]["content"] != replies[0] for s in samples)
    # one per rollout that made a mistake (the literal plays among samples 0..k make none)
    made = sum(teacher.policy(SNIAH, j, 1.0).mistake is not None for j in range(k + 1))
    assert report.dropped["mistake"] == made and report.repairs >= 1
    # --keep-mistakes: the mistaken turn becomes a target as well
    assert [s["turn"] for s in kept[0] if s["run_id"] == row["run_id"]] == list(range(turns))


def _replies(play: teacher.Play, seen: list[list[dict[str, Any]]]) -> list[str]:
    """The play's replies: a planned turn as planned, a reading turn as it reads the messages
    of its turn (``seen[i]``, the prompt of turn ``i``'s sample)."""
    return [
        teacher.reply(*(turn(seen[i]) if callable(turn) else turn))
        for i, turn in enumerate(play.turns)
    ]


def _folded_export(tmp_path: Path, task: TrainTask, mistake: str, repeat: int = 1):
    """One repair rollout of ``task`` recorded as by default (failed turns folded), its SFT
    samples (``repeat_repair=repeat``) and the report."""
    k = _sample_with(task, mistake)
    with Store(tmp_path / "t.db") as store:
        row = _rollout(task, k, store)
        samples, report = sft_samples(
            store, ExportFilters(rollout_sets=("teacher",)), repeat_repair=repeat
        )
    return teacher.policy(task, k, 1.0), row, samples, report


def test_a_repair_sample_shows_the_mistake_as_inference_does_folded(tmp_path: Path) -> None:
    """Rollouts fold failed turns as inference does (issue 13, session 10): the repair
    sample's prompt is the system prompt and ONE user message: the question, the fold's
    note (the exception line, the variables the cell set) and the turn count; the mistaken
    reply and its traceback are in no sample; the turns after the repair continue from the
    folded message. Exact file contents."""
    play, row, samples, report = _folded_export(tmp_path, SNIAH, "no_import")
    assert play.planned_mistakes == [0] and row["details"]["mistake_turns"] == [0]
    mine = [s for s in samples if s["run_id"] == row["run_id"]]
    out = tmp_path / "sft.jsonl"
    write_jsonl(mine, out)
    lines = [json.loads(x) for x in out.read_text("utf-8").splitlines()]
    replies = _replies(play, [[], *(x["prompt"] for x in lines)])
    system, first = lines[0]["prompt"][:2]
    assert system["role"] == "system" and first["role"] == "user"
    question = first["content"].split("\n\n" + prompts.FOLDED_RAISED[:20])[0]
    assert question.startswith(f"Question: {SNIAH.question}\n")
    folded = {
        "role": "user",
        "content": "\n\n".join(
            [
                question,
                prompts.FOLDED_RAISED.format(error="NameError: name 're' is not defined"),
                prompts.FOLDED_VARIABLES.format(names="key"),
                prompts.NEXT_TURN_FOLDED.format(turn=2, max_turns=6),
            ]
        ),
    }
    turns = len(replies)
    expected = []
    for t in range(1, turns):
        history = lines[t - 1]["prompt"][2:]
        assert [m["role"] for m in history] == ["assistant", "user"] * (t - 1)
        assert [m["content"] for m in history[::2]] == replies[1:t]  # no mistake
        expected.append(
            {
                "prompt": [system, folded, *history],
                "completion": [{"role": "assistant", "content": replies[t]}],
                "task_id": SNIAH.id,
                "family": "sniah",
                "run_id": row["run_id"],
                "rollout_set": "teacher",
                "model": "teacher",
                "depth": 0,
                "turn": t,
                "reward": 1.0,
                "fixes": [],
                "repair": t == 1,
            }
        )
    assert lines == expected
    assert lines[0]["prompt"] == [system, folded]  # the repair sees the note, not the cell
    text = json.dumps(samples)
    assert "Traceback" not in text and json.dumps(replies[0])[1:-1] not in text
    assert report.repairs == sum(s["repair"] for s in samples) and report.repair_copies == 0


def test_an_aggregation_repair_is_folded_too_and_still_labels_once(tmp_path: Path) -> None:
    """oolong ``raw_lines`` recorded folded: the repair's last user message carries the
    ``ValueError`` note; the run still labels every instance once and scores 1."""
    _, row, samples, report = _folded_export(tmp_path, OOLONG, "raw_lines")
    assert row["reward"] == 1.0 and row["subcalls"] == len(ITEMS)
    repair = [s for s in samples if s["repair"] and s["run_id"] == row["run_id"]]
    assert len(repair) == 1 and report.repairs == sum(s["repair"] for s in samples)
    last = repair[0]["prompt"][-1]
    assert last["role"] == "user" and [m["role"] for m in repair[0]["prompt"]] == [
        "system",
        "user",
    ]
    assert (
        prompts.FOLDED_RAISED.format(error="ValueError: too many values to unpack")
        in (last["content"])
    )
    assert "Traceback" not in json.dumps(samples)


def test_repeat_repair_writes_each_repair_sample_n_times(tmp_path: Path) -> None:
    """``repeat_repair=3``: the samples of ``repeat_repair=1`` in order, then two passes of
    copies of the repair samples (identical records); the report counts them."""
    _, row, once, report1 = _folded_export(tmp_path / "a", SNIAH, "no_import")
    (tmp_path / "b").mkdir()
    _, row3, thrice, report3 = _folded_export(tmp_path / "b", SNIAH, "no_import", repeat=3)
    strip = [{k: v for k, v in s.items() if k != "run_id"} for s in once]
    strip3 = [{k: v for k, v in s.items() if k != "run_id"} for s in thrice]
    repairs = [s for s in strip if s["repair"]]
    assert repairs and strip3 == strip + repairs + repairs
    assert report1.repairs == report3.repairs == len(repairs)
    assert report3.repair_copies == 2 * len(repairs)
    assert report3.samples == len(thrice) == len(once) + 2 * len(repairs)
    assert report3.to_dict()["repair_copies"] == 2 * len(repairs)
    with Store(tmp_path / "b" / "t.db") as store, pytest.raises(ValueError, match="1 or more"):
        sft_samples(store, repeat_repair=0)


def test_the_cli_export_repeats_repairs_and_refuses_zero(rlmd_home: Path, tmp_path: Path) -> None:
    k = _sample_with(SNIAH, "no_import")
    with Store(rlmd_home / "rlmd.db") as store:
        _rollout(SNIAH, k, store)
    env = {**os.environ, "RLMD_HOME": str(rlmd_home)}
    base = [sys.executable, "-m", "rlmd", "train", "export", "--format", "sft"]
    counts = []
    for n in ("1", "2"):
        out = tmp_path / f"sft{n}.jsonl"
        done = subprocess.run(
            base + ["--out", str(out), "--repeat-repair", n],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        recs = [json.loads(x) for x in out.read_text("utf-8").splitlines()]
        counts.append((len(recs), sum(r["repair"] for r in recs)))
        rep = json.loads(done.stderr.splitlines()[0])
        assert rep["samples"] == len(recs)
        assert rep["repair_copies"] == (int(n) - 1) * rep["repairs"]
    assert counts[1] == (counts[0][0] + counts[0][1], 2 * counts[0][1]) and counts[0][1] >= 1
    bad = subprocess.run(
        base + ["--out", str(tmp_path / "x.jsonl"), "--repeat-repair", "0"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "repeat_repair must be 1 or more" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x.jsonl").exists()
    # ignored before: GRPO groups written once under --repeat-repair 3, and --min-reward
    # nan kept every rollout (no reward is below NaN)
    for extra, why in (
        (["--format", "grpo", "--repeat-repair", "3"], "--repeat-repair applies to --format sft"),
        (["--min-reward", "nan"], "--min-reward must be a finite number, not nan"),
    ):
        bad = subprocess.run(
            base + ["--out", str(tmp_path / "x.jsonl"), *extra],
            capture_output=True,
            text=True,
            env=env,
        )
        assert bad.returncode == 2 and why in bad.stderr, bad.stderr
        assert not (tmp_path / "x.jsonl").exists()


class RaisesThenRepairs:
    """A root model (not the teacher, no marker) whose first cell raises."""

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        turns = turn_of(messages)
        return [
            "```repl\nprint(re.findall(r'\\d{5,}', context))\n```",
            "```repl\nimport re\nprint(re.findall(r'\\d{5,}', context))\n```",
            "```repl\nFINAL(re.findall(r'\\d{5,}', context)[0])\n```",
        ][min(turns, 2)]


def test_any_models_raising_turn_is_kept_out_of_the_targets_by_rule(tmp_path: Path) -> None:
    task = TrainTask("u-1", "user", "What is the number?", "5150123", "exact", context=NEEDLE)
    reg = Registry()
    reg.add(ModelSpec("m", "scripted", "m", options={"callable": RaisesThenRepairs()}))
    with Store(tmp_path / "t.db") as store:
        asyncio.run(run_rollouts([task], RolloutOptions(model="m"), registry=reg, store=store))
        row = store.rollouts("m")[0]
        samples, report = sft_samples(store)
    assert row["reward"] == 1.0 and row["cell_errors"] == 1
    assert "mistake_turns" not in row["details"]
    assert [(s["turn"], s["repair"]) for s in samples] == [(1, True), (2, False)]
    assert "NameError" in samples[0]["prompt"][-1]["content"]
    assert report.dropped == {"mistake": 1} and report.repairs == 1


def _tasks() -> list[TrainTask]:
    """A task of every teacher template (no context needed to plan the turns)."""
    q = CATS + " Which label is most common?"
    out = []
    oolong = [
        {"template": "most_common"}, {"template": "least_common"},
        {"template": "count_label", "label": "animal"},
        {"template": "compare", "labels": ["animal", "plant"]},
        {"template": "user_count", "user": 100, "label": "plant"},
        {"template": "user_most", "label": "animal"},
    ]  # fmt: skip
    for i, p in enumerate(oolong):
        out.append(TrainTask(f"o{i}", "oolong", q, "x", "exact", context="", params=p))
    for i, t in enumerate(["one_each", "both_have", "both_exactly_one", "both_none"]):
        params = {"template": t, "labels": ["animal", "plant"]}
        out.append(TrainTask(f"p{i}", "pairs", q, "x", "pairs", context="", params=params))
    codeqa = [
        {"template": "where_defined", "name": "f"}, {"template": "call_count", "name": "f"},
        {"template": "subclasses", "base": "B"},
        {"template": "param_default", "function": "f", "param": "x"},
        {"template": "module_constant", "name": "C"}, {"template": "importers", "module": "os"},
    ]  # fmt: skip
    for i, p in enumerate(codeqa):
        out.append(TrainTask(f"c{i}", "codeqa", "q", "x", "path", context={}, params=p))
    out.append(SNIAH)
    return out


def _imports(code: str) -> tuple[set[str], set[str]]:
    """(names a cell binds by import, names it loads)."""
    tree = ast.parse(code)
    bound = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return bound, loaded


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_every_teacher_cell_imports_what_it_uses(share: float) -> None:
    """A cell copied without the turns before it must not fail on a missing import (the
    tuned 0.5B's ``re`` without ``import re``); only a ``no_import`` mistake turn does.
    (The literal plays import nothing: tests/test_train_literal.py.)"""
    for task in _tasks():
        for k in range(6):
            play = teacher.policy(task, k, share, literal_share=0.0)
            # a reading turn writes a literal out (FINAL('...')): no module to import
            planned = [(i, t[1]) for i, t in enumerate(play.turns) if not callable(t)]
            modules = set().union(*(_imports(code)[0] for _, code in planned))
            for i, code in planned:
                bound, loaded = _imports(code)
                missing = (loaded & modules) - bound
                if play.mistake == "no_import" and i in play.planned_mistakes:
                    assert missing, (task.id, k, code)
                else:
                    assert not missing, (task.id, k, i, code)


def test_the_repair_share_parameter() -> None:
    """Among the plays that are not literal (those make no mistakes)."""
    pairs = [(t, k) for t in _tasks() for k in range(12)]
    plays = {(t.id, k): teacher.policy(t, k, literal_share=0.0) for t, k in pairs}
    share = sum(p.mistake is not None for p in plays.values()) / len(pairs)
    assert 0.2 <= share <= 0.4, share  # default 0.3, seeded per (task, sample)
    assert all(teacher.policy(t, k, 1.0, 0.0).mistake for t, k in pairs)
    for t, k in pairs:
        none = teacher.policy(t, k, 0.0, 0.0)
        assert none.mistake is None and none.planned_mistakes == []
        if plays[t.id, k].mistake is None:  # the draw leaves other rollouts as they were
            assert plays[t.id, k].turns == none.turns
        else:  # one more turn: the mistake, inserted before the step it gets wrong
            assert len(plays[t.id, k].turns) == len(none.turns) + 1
    kinds = {p.mistake for p in plays.values()} - {None}
    assert kinds == {m for ms in teacher.MISTAKES.values() for m in ms}
    with pytest.raises(ValueError, match="repair_share"):
        teacher.policy(SNIAH, 0, 1.5)
    held = TrainTask("heldout-1", "sniah", "q", "1", "contains", context="x", split="heldout")
    with pytest.raises(ValueError, match="held-out"):
        teacher.policy(held, 0, 1.0)


def test_rollouts_with_no_repair_share_record_no_mistakes(tmp_path: Path) -> None:
    with Store(tmp_path / "t.db") as store:
        opts = RolloutOptions(model="teacher", samples=3, repair_share=0.0)
        asyncio.run(run_rollouts([SNIAH], opts, registry=Registry(), store=store))
        rows = store.rollouts("teacher")
        with pytest.raises(ValueError, match="repair_share"):
            bad = RolloutOptions(model="teacher", samples=4, repair_share=-0.1)
            asyncio.run(run_rollouts([SNIAH], bad, registry=Registry(), store=store))
    assert [(r["details"]["mistake"], r["details"]["mistake_turns"]) for r in rows] == [
        (None, [])
    ] * 3
    assert all(r["cell_errors"] == 0 and r["reward"] == 1.0 for r in rows)


def test_the_cli_refuses_a_repair_share_outside_0_to_1(rlmd_home: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"question": "q", "context": "c", "answer": "a"}) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "train", "rollout", "--tasks", str(tasks)]
        + ["--model", "teacher", "--repair-share", "1.5"],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
    )
    assert done.returncode == 2, done.stderr
    assert "--repair-share must be from 0 to 1, got 1.5" in done.stderr  # the flag (review17)
    assert "Traceback" not in done.stderr


LOOK = "```repl\nimport re\nx = re.findall(r'\\d{5,}', context)[0]\nprint(x)\n```"


class RepeatsOnce:
    """A root model that repeats its first cell on turn 1, then, asked again (re-sampled),
    replies ``again``."""

    def __init__(self, again: str) -> None:
        self.again, self.calls = again, 0

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        turns = turn_of(messages)
        if turns == 1:
            self.calls += 1
            return LOOK if self.calls == 1 else self.again
        return LOOK if turns == 0 else "```repl\nFINAL(x)\n```"


@pytest.mark.parametrize(
    ("again", "kept"),
    [
        ("Let me think about what this means.", LOOK),  # refused: the repeat ran
        ("```repl\nprint(x * 2)\n```", "```repl\nprint(x * 2)\n```"),  # taken
    ],
    ids=["refused", "taken"],
)
def test_the_kept_reply_of_a_resampled_turn_is_the_target(tmp_path: Path, again, kept) -> None:
    """The export's target for a re-sampled turn is the reply the engine kept: the last
    re-sample only when it was taken (it was the last call of the turn before)."""
    task = TrainTask("u-1", "user", "What is the number?", "5150123", "exact", context=NEEDLE)
    reg = Registry()
    model = RepeatsOnce(again)
    reg.add(ModelSpec("m", "scripted", "m", options={"callable": model}))
    with Store(tmp_path / "t.db") as store:
        asyncio.run(run_rollouts([task], RolloutOptions(model="m"), registry=reg, store=store))
        row = store.rollouts("m")[0]
        samples, _ = sft_samples(store)
    assert row["reward"] == 1.0
    by_turn = {s["turn"]: s["completion"][0]["content"] for s in samples}
    assert by_turn[1] == kept  # what ran, and what turn 2's prompt shows
    assert samples[-1]["prompt"][-2]["content"] == kept

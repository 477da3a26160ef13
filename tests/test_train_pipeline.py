"""rlmd.train without torch: rollouts through the real engine and subprocess sandbox with a
scripted model, rewards, the store migration, resume, export/import, SFT/GRPO datasets,
filters and template fixes, and the programmatic teacher."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry
from rlmd.store import Store
from rlmd.train import teacher
from rlmd.train.export import ExportFilters, fix_final, grpo_groups, sft_samples, write_jsonl
from rlmd.train.rewards import RewardTerms, RunFacts, correctness, reward
from rlmd.train.rollout import RolloutOptions, export_set, import_set, run_rollouts, summary
from rlmd.train.tasks import (
    SEED_LIMIT,
    SPLITS,
    TaskFileError,
    TrainTask,
    generate_split,
    load_tasks,
)

CONTEXT = "filler line\n" * 50 + "The secret number is 4417.\n" + "more filler\n" * 50

LOOK = "I search the text.\n```repl\nimport re\nm = re.search(r'secret number is (\\d+)', context)\nprint(m.group(1))\n```"
ANSWER = {
    "code": "The output shows it.\n```repl\nFINAL(m.group(1))\n```",
    "prose": "The number is printed above.\nFINAL(4417)",
    "wrong": "```repl\nFINAL(str(int(m.group(1)) - 1))\n```",
}


class Scripted:
    """A root model that looks, then answers in the task's style; it keeps every prompt it
    was sent, so the export can be compared with what the model really saw."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.seen.append([dict(m) for m in messages])
        turns = sum(1 for m in messages if m["role"] == "assistant")
        style = "code"
        for key in ANSWER:
            if f"[{key}]" in messages[1]["content"]:
                style = key
        return LOOK if turns == 0 else ANSWER[style]


def write_tasks(path: Path) -> Path:
    rows = [
        {"id": "t-code", "question": "What is the secret number? [code]", "context": CONTEXT,
         "answer": "4417", "scorer": "exact"},
        {"id": "t-prose", "question": "What is the secret number? [prose]", "context": CONTEXT,
         "answer": "4417", "scorer": "exact", "family": "prose"},
        {"id": "t-wrong", "question": "What is the secret number? [wrong]", "context": CONTEXT,
         "answer": "4417", "scorer": "exact"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def registry_with(model: Scripted) -> Registry:
    reg = Registry()
    reg.add(ModelSpec("script", "scripted", "script", options={"callable": model}))
    return reg


def rollout(tasks: list[TrainTask], model: Scripted, store: Store, samples: int) -> list[dict]:
    opts = RolloutOptions(model="script", samples=samples, rollout_set="s1")
    return asyncio.run(run_rollouts(tasks, opts, registry=registry_with(model), store=store))


def test_rollout_reward_export_resume_and_import(tmp_path: Path) -> None:
    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl"))
    model = Scripted()
    progress: list[dict] = []
    with Store(tmp_path / "a.db") as store:
        opts = RolloutOptions(model="script", samples=2, rollout_set="s1")
        rows = asyncio.run(
            run_rollouts(
                tasks, opts, registry=registry_with(model), store=store, progress=progress.append
            )
        )
        assert len(rows) == 6 and progress[-1]["done"] == 6 and progress[-1]["total"] == 6
        by = {(r["task_id"], r["sample_index"]): r for r in store.rollouts("s1")}
        assert set(by) == {(t, k) for t in ("t-code", "t-prose", "t-wrong") for k in (0, 1)}
        assert by["t-code", 0]["reward"] == 1.0 and by["t-code", 0]["iterations"] == 2
        assert by["t-prose", 1]["reward"] == 1.0
        assert by["t-prose", 1]["details"]["answer_source"] == "prose"
        assert by["t-wrong", 0]["details"]["answer"] == "4416"
        assert by["t-wrong", 0]["reward"] == 0.0

        # resume: only the new sample index runs
        calls = len(model.seen)
        again = rollout(tasks, model, store, samples=3)
        assert sorted((r["task_id"], r["sample_index"]) for r in again) == [
            ("t-code", 2),
            ("t-prose", 2),
            ("t-wrong", 2),
        ]
        assert len(model.seen) == calls + 6  # two root turns per new rollout
        assert sum(1 for p in model.seen if len(p) == 2) == 9  # 9 runs started in all
        assert rollout(tasks, model, store, samples=3) == []

        table = {r["family"]: r for r in summary(store.rollouts("s1"))}
        assert table["user"]["rollouts"] == 6 and table["prose"]["solved"] == 1.0
        assert table["all"]["rollouts"] == 9 and table["all"]["iterations"] == 2.0

        # SFT export: every root turn of the rewarded rollouts, prompts exactly as sent
        samples, report = sft_samples(store)
        assert report.dropped == {"reward": 3} and report.rollouts == 6
        assert report.samples == 4 and report.duplicates == 8  # samples 1, 2 repeat sample 0
        assert report.fixes == {"prose_final": 1}
        sent = [p for p in model.seen if "[wrong]" not in p[1]["content"]]
        for s in samples:
            assert s["prompt"] in sent
        code0, code1 = [s for s in samples if s["task_id"] == "t-code"]
        assert code0["prompt"] == model.seen[0] and code0["completion"] == [
            {"role": "assistant", "content": LOOK}
        ]
        assert code1["prompt"][:2] == code0["prompt"] and code1["prompt"][2] == {
            "role": "assistant",
            "content": LOOK,
        }
        assert "4417" in code1["prompt"][3]["content"]  # the cell's real output
        assert code1["completion"][0]["content"] == ANSWER["code"]
        prose1 = [s for s in samples if s["task_id"] == "t-prose"][1]
        assert prose1["completion"][0]["content"] == "```repl\nFINAL('4417')\n```"
        assert prose1["fixes"] == ["prose_final"]
        out = tmp_path / "sft.jsonl"
        write_jsonl(samples, out)
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert lines == samples

        # filters
        assert sft_samples(store, ExportFilters(min_iterations=3))[1].dropped == {
            "reward": 3,
            "iterations": 6,
        }
        only = sft_samples(store, ExportFilters(families=("prose",)))[0]
        assert {s["task_id"] for s in only} == {"t-prose"}
        assert sft_samples(store, ExportFilters(min_reward=-1))[1].rollouts == 9

        # GRPO groups: all-equal rewards have no advantage and are dropped by default
        assert grpo_groups(store) == []
        groups = grpo_groups(store, keep_zero_advantage=True)
        assert [g["task_id"] for g in groups] == ["t-code", "t-prose", "t-wrong"]
        assert groups[0]["prompt"] == model.seen[0] and groups[0]["rewards"] == [1.0] * 3
        assert groups[0]["completions"] == [[{"role": "assistant", "content": LOOK}]] * 3

        # export the set, import it into another store: same samples there
        n = export_set(store, "s1", tmp_path / "set.jsonl")
        assert n == 9
    with Store(tmp_path / "b.db") as other:
        assert import_set(other, tmp_path / "set.jsonl") == 9
        assert import_set(other, tmp_path / "set.jsonl") == 0
        assert sft_samples(other)[0] == samples


def test_another_task_file_under_the_same_ids_is_refused_not_skipped(tmp_path: Path) -> None:
    """User tasks' ids default to ``user-<line>`` and the set's name to the model's: a
    second task file rolled out like the first was skipped as done (no run, the first
    file's rewards in the table). It is refused, saying why; a new set runs it."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(
        '{"question": "What is the secret number? [code]", "context": "c", "answer": "4417"}\n'
    )
    second.write_text(
        '{"question": "What is the secret number? [prose] \\ud800", "context": "c", "answer": "4417"}\n'
    )
    model = Scripted()
    with Store(tmp_path / "a.db") as store:
        assert len(rollout(load_tasks(first), model, store, samples=1)) == 1
        assert rollout(load_tasks(first), model, store, samples=1) == []  # resumed: done
        with pytest.raises(ValueError, match="'s1' already has task 'user-1' with another"):
            rollout(load_tasks(second), model, store, samples=1)
        runs = len(model.seen)
        opts = RolloutOptions(model="script", samples=1, rollout_set="s2")
        reg = registry_with(model)
        rows = asyncio.run(run_rollouts(load_tasks(second), opts, registry=reg, store=store))
        assert len(rows) == 1 and len(model.seen) > runs
        opts = RolloutOptions(model="script", samples=1, rollout_set="s2")  # a lone surrogate
        assert asyncio.run(run_rollouts(load_tasks(second), opts, registry=reg, store=store)) == []


def test_rewards_terms_and_user_scorer(tmp_path: Path, monkeypatch) -> None:
    assert correctness(TrainTask("n", "f", "q", 4417, "numeric"), "4416") == 0.75
    task = TrainTask("x", "f", "q", ["a", "b"], "f1")
    assert correctness(task, "a, b") == 1.0 and correctness(task, "a") == pytest.approx(2 / 3)
    assert correctness(TrainTask("p", "f", "q", "pkg/mod.py", "path"), "It is in pkg/mod.py.") == 1
    facts = RunFacts("a, b", "completed", "final", iterations=1, subcalls=0, cell_errors=2)
    assert reward(task, facts)["reward"] == 1.0
    assert reward(task, facts, RewardTerms(error_penalty=0.1))["reward"] == 0.8
    assert reward(task, facts, RewardTerms(min_iterations=2))["gated"] == "min_iterations"
    assert reward(task, facts, RewardTerms(min_subcalls=1))["reward"] == 0.0
    fallback = RunFacts("a, b", "max_iterations", "extraction", 6, 0, 0)
    assert reward(task, fallback)["gated"] == "fallback"
    assert reward(task, fallback, RewardTerms(fallback_zero=False))["reward"] == 1.0
    assert reward(task, fallback, RewardTerms(False, overrun_zero=True))["gated"] == "overrun"
    (tmp_path / "myscore.py").write_text(
        "def half(answer, gold, task):\n    return 0.5 if answer == gold else 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert correctness(TrainTask("u", "f", "q", "yes", "myscore:half"), "yes") == 0.5
    with pytest.raises(ValueError, match="unknown scorer"):
        correctness(TrainTask("u", "f", "q", "yes", "nope"), "yes")
    # a scorer that raised ended `rlmd train rollout` with its traceback
    (tmp_path / "badscore.py").write_text(
        "def boom(answer, gold, task):\n    return 1 / 0\n"
        "def nan(answer, gold, task):\n    return float('nan')\n"
    )
    with pytest.raises(
        ValueError, match=r"scorer badscore:boom raised ZeroDivisionError: .*task u"
    ):
        correctness(TrainTask("u", "f", "q", "yes", "badscore:boom"), "yes")
    with pytest.raises(ValueError, match=r"badscore:nan returned nan, not a number \(task u\)"):
        correctness(TrainTask("u", "f", "q", "yes", "badscore:nan"), "yes")


def test_task_file_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"question": "q", "context": "c", "answer": 1}\n{"question": "q"}\n')
    with pytest.raises(TaskFileError, match=r"t.jsonl:2: missing \['context', 'answer'\]"):
        load_tasks(bad)
    bad.write_text("not json\n")
    with pytest.raises(TaskFileError, match="t.jsonl:1: not JSON"):
        load_tasks(bad)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        # a JSON scalar crashed with "TypeError: argument of type 'int' is not iterable"
        ("5", "not a JSON object (one task), got a number"),
        ("null", "not a JSON object (one task), got null"),
        ('"question context answer"', "not a JSON object (one task), got a string"),
        ('{"question": 5, "context": "c", "answer": 1}', "question must be a non-empty string"),
        # a context of 5 raised a TypeError traceback from load_context when its turn came
        ('{"question": "q", "context": 5, "answer": 1}', "context must be a string or an"),
        # an unknown scorer was found only after the task's run, every task before it done
        ('{"question": "q", "context": "c", "answer": 1, "scorer": "exakt"}', "unknown scorer"),
        ('{"question": "q", "context": "c", "answer": 1, "scorer": ":fn"}', "unknown scorer"),
        ('{"question": "q", "context": "c", "answer": 1, "choices": "ab"}', "choices must be"),
    ],
)
def test_a_bad_task_line_is_refused_before_any_task_runs(tmp_path: Path, line, why) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"question": "q", "context": "c", "answer": 1}\n' + line + "\n")
    with pytest.raises(TaskFileError, match=re.escape(f"t.jsonl:2: {why}")):
        load_tasks(bad)


def test_unreadable_task_files_and_folders_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_bytes(b"\xff\xfe{}\n")  # was a bare "'utf-8' codec can't decode" with no file
    with pytest.raises(TaskFileError, match=r"t.jsonl:1: not UTF-8 text \(byte 0xff at column 1\)"):
        load_tasks(bad)
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "manifest.json").write_text("[1]")  # was AttributeError: 'list' ... 'get'
    (folder / "tasks.jsonl").write_text("{not json\n")
    with pytest.raises(TaskFileError, match="manifest.json: not a JSON object"):
        load_tasks(folder)
    (folder / "manifest.json").write_text('{"split": "train"}')
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: not JSON"):  # was: no file named
        load_tasks(folder)
    (folder / "tasks.jsonl").write_text('{"id": "x"}\n')  # was KeyError: 'family'
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: missing or wrong field 'family'"):
        load_tasks(folder)


def test_template_fixes() -> None:
    text, fixes = fix_final("```repl\nFINAL_VAR(total)\n```", "total = 3")
    assert text == '```repl\nFINAL_VAR("total")\n```' and fixes == ["final_var_unquoted"]
    text, fixes = fix_final("```repl\nFINAL('total')\n```", "total = len(x)")
    assert text == "```repl\nFINAL(total)\n```" and fixes == ["final_of_name_string"]
    same = "```repl\nFINAL('paris')\n```"
    assert fix_final(same, "total = 1") == (same, [])  # a literal answer stays
    assert fix_final("So:\nFINAL_VAR(result)", "") == (
        "```repl\nFINAL_VAR('result')\n```",
        ["prose_final"],
    )


def _run_teacher(task: TrainTask, tmp_path: Path) -> dict:
    with Store(tmp_path / "t.db") as store:
        opts = RolloutOptions(model="teacher", samples=2)
        asyncio.run(run_rollouts([task], opts, registry=Registry(), store=store))
        rows = store.rollouts("teacher")
        samples, _ = sft_samples(store)
    assert [r["reward"] for r in rows] == [1.0, 1.0], rows
    assert all(r["iterations"] >= 2 for r in rows)
    assert samples and all("```repl" in s["completion"][0]["content"] for s in samples)
    return {"rows": rows, "samples": samples}


def test_teacher_solves_a_needle_through_the_engine(tmp_path: Path) -> None:
    text = "Some essay text. " * 200 + "The special magic number for quiet-otter is 5150123. "
    text += "More essay text. " * 200
    task = TrainTask(
        "train-sniah-x", "sniah", "What is the special magic number for quiet-otter?",
        "5150123", "contains", context=text, split="train", params={"key": "quiet-otter"},
    )  # fmt: skip
    got = _run_teacher(task, tmp_path)
    assert got["rows"][0]["details"]["answer"] == "5150123"
    held = TrainTask("heldout-1", "sniah", "q", "1", "contains", context="x", split="heldout")
    with pytest.raises(ValueError, match="held-out"):
        teacher.policy(held)


def test_teacher_answers_codebase_questions_from_the_syntax_tree(
    tmp_path: Path, codebase: Path
) -> None:
    task = TrainTask(
        "train-codeqa-x", "codeqa", "In which file is `helper2` defined?", "pkg/util.py",
        "path", context_path=str(codebase), split="train",
        params={"template": "where_defined", "name": "helper2"},
    )  # fmt: skip
    got = _run_teacher(task, tmp_path)
    assert got["rows"][0]["details"]["answer"] == "pkg/util.py"


def test_task_generation_finds_the_generators_from_any_working_directory(tmp_path: Path) -> None:
    """``bench/`` is not installed: an rlmd imported from a checkout (here through a symlinked
    package folder, as an editable install maps it) still finds ``bench/quality`` beside it,
    and says what to do when there is none."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "pk").mkdir()
    (tmp_path / "pk" / "rlmd").symlink_to(root / "rlmd")
    probe = (
        "from rlmd.train.tasks import bench_on_path; bench_on_path(); "
        "import bench.quality.suites as s; print(s.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pk")}
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(root / "bench" / "quality" / "suites.py")
    (tmp_path / "copy" / "rlmd").mkdir(parents=True)  # a copy with no bench/ beside it
    shutil.copytree(root / "rlmd", tmp_path / "copy" / "rlmd", dirs_exist_ok=True)
    env["PYTHONPATH"] = str(tmp_path / "copy")
    lost = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert lost.returncode == 1 and "source checkout of rlmd" in lost.stderr


def _adapter(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


def test_a_stopped_runs_last_checkpoint_is_the_adapter_to_convert(tmp_path):
    from rlmd.train.gguf_lora import ConverterError, adapter_dir

    run = tmp_path / "run"
    with pytest.raises(ConverterError, match="no training run 'run'"):
        adapter_dir(run)
    run.mkdir()
    with pytest.raises(ConverterError, match="stopped before its first checkpoint"):
        adapter_dir(run)
    ckpts = run / "checkpoints"
    _adapter(ckpts / "checkpoint-9")
    last = _adapter(ckpts / "checkpoint-10")  # by number, not by name: 10 after 9
    (ckpts / "checkpoint-11").mkdir()  # being written when the run stopped: no adapter yet
    (ckpts / "checkpoint-11" / "adapter_config.json").write_text("{}")
    assert adapter_dir(run) == last
    final = _adapter(run / "adapter")  # a run that reached its --steps
    assert adapter_dir(run) == final
    (run / "train.json").write_text(json.dumps({"steps": 10}))
    assert adapter_dir(run) == final
    # finished at 10, then resumed with more --steps and stopped at 12: the checkpoint is newer
    newer = _adapter(ckpts / "checkpoint-12")
    assert adapter_dir(run) == newer


@pytest.mark.parametrize("merge", [[], ["--merge"]])
def test_train_convert_without_an_adapter_fails_with_a_reason(rlmd_home, merge):
    (rlmd_home / "train" / "half" / "checkpoints").mkdir(parents=True)
    cmd = ["train", "convert", "half", "--base", "qwen2.5-coder-0.5b", *merge]
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
    )
    assert done.returncode == 1, done.stderr
    assert "no adapter in" in done.stderr and "Traceback" not in done.stderr
    assert not (rlmd_home / "train" / "half" / "adapter.gguf").exists()


def _rlmd_train(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmd", "train", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(home)},
    )


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["../elsewhere", "runs/x", "..", "[/]x"])
@pytest.mark.parametrize("merge", [[], ["--merge"]])
def test_train_convert_refuses_a_name_that_is_a_path_before_any_work(rlmd_home, name, merge):
    """The run name is a folder under ``<home>/train`` and a registry name: a path (or a
    name rich would read as markup) is refused up front with exit 2, nothing read, written
    or registered (it used to be found out by ``register`` after the merge)."""
    _adapter(rlmd_home / "elsewhere" / "adapter")  # what ../elsewhere would reach
    _adapter(rlmd_home / "train" / "runs" / "x" / "adapter")
    before = _files(rlmd_home)
    done = _rlmd_train(rlmd_home, "convert", name, "--base", "no-such-base", *merge)
    assert done.returncode == 2, done.stderr
    assert f"model name {name!r}" in done.stderr and "Traceback" not in done.stderr
    assert _files(rlmd_home) == before


def test_train_sft_refuses_an_out_name_it_could_not_register_before_training(rlmd_home):
    data = rlmd_home / "sft.jsonl"
    data.write_text("")
    done = _rlmd_train(
        rlmd_home, "sft", "--base", "no-such-base", "--data", str(data), "--out", "runs/x"
    )
    assert done.returncode == 2, done.stderr
    assert "model name 'runs/x'" in done.stderr and "Traceback" not in done.stderr
    assert not (rlmd_home / "train").exists()


def test_train_convert_of_a_run_that_does_not_exist_says_so(rlmd_home):
    done = _rlmd_train(rlmd_home, "convert", "nosuch", "--base", "no-such-base", "--merge")
    assert done.returncode == 1, done.stderr
    assert "no training run 'nosuch'" in done.stderr and "Traceback" not in done.stderr


def test_train_convert_of_a_name_too_long_for_a_file_says_there_is_no_such_run(rlmd_home):
    name = "a" * 300  # a plain name, but longer than a file name may be
    done = _rlmd_train(rlmd_home, "convert", name, "--base", "no-such-base")
    assert done.returncode == 1, done.stderr
    assert "no training run" in done.stderr and "Traceback" not in done.stderr


def test_train_reports_an_os_error_without_a_traceback(rlmd_home):
    blocker = rlmd_home / "a-file"
    blocker.write_text("")
    done = _rlmd_train(
        rlmd_home, "tasks", "--split", "train", "--size", "tiny", "--out", str(blocker / "tasks")
    )
    assert done.returncode == 1, done.stderr
    assert "Not a directory" in done.stderr and "Traceback" not in done.stderr


def test_a_shared_model_is_created_once_per_sample_index_not_once_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that is not per-run (a local GGUF: its weights) is made once per sample
    index for the whole rollout set; per-run models (scripts) still start afresh each run."""
    import rlmd.models.registry as registry_module
    from rlmd.models.scripted import ScriptedModel

    made: list[str] = []
    real = registry_module.create_model

    def counting(spec: ModelSpec) -> Any:
        made.append(spec.name)
        return real(spec)

    monkeypatch.setattr(registry_module, "create_model", counting)
    monkeypatch.setattr(ScriptedModel, "per_run", False)  # stands in for a local model
    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl"))
    with Store(tmp_path / "a.db") as store:
        rows = rollout(tasks, Scripted(), store, samples=2)
    assert len(rows) == 6 and all(r["iterations"] == 2 for r in rows)
    assert sorted(made) == ["script#s0", "script#s1"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        # each of these ran its task, then stopped the whole rollout with a traceback
        # (ValueError / ZeroDivisionError / TypeError) when the reward was computed
        ('{"question": "q", "context": "c", "answer": "abc", "scorer": "numeric"}',
         "answer must be a finite number for scorer 'numeric'"),
        ('{"question": "q", "context": "c", "answer": null, "scorer": "numeric"}',
         "answer must be a finite number for scorer 'numeric'"),
        ('{"question": "q", "context": "c", "answer": NaN, "scorer": "numeric"}',
         "answer must be a finite number for scorer 'numeric'"),
        ('{"question": "q", "context": "c", "answer": [], "scorer": "contains"}',
         "answer must be a non-empty string or a non-empty list of strings for scorer"),
        ('{"question": "q", "context": "c", "answer": 5, "scorer": "f1"}',
         "answer must be a list of strings for scorer 'f1'"),
        ('{"question": "q", "context": "c", "answer": "x", "scorer": "pairs"}',
         "answer must be a list of [a, b] integer pairs for scorer 'pairs'"),
        ('{"question": "q", "context": "c", "answer": [[1, "b"]], "scorer": "pairs"}',
         "answer must be a list of [a, b] integer pairs for scorer 'pairs'"),
        # these scored 0 on every run, whatever the model answered
        ('{"question": "q", "context": "c", "answer": null}',
         "answer must be a non-empty string or a number for scorer 'exact'"),
        ('{"question": "q", "context": "c", "answer": {"x": 1}, "scorer": "path"}',
         "answer must be a non-empty string or a number for scorer 'path'"),
        ('{"id": ["a"], "question": "q", "context": "c", "answer": 1}',
         "id must be a string or an integer"),
        # the error said "task ids are not unique", not which nor where
        ('{"id": 7, "question": "q", "context": "c", "answer": 1}',
         "task id '7' is already used on line 1"),
    ],
)  # fmt: skip
def test_an_answer_its_scorer_cannot_read_is_refused_before_any_task_runs(
    tmp_path: Path, line, why
) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"id": "7", "question": "q", "context": "c", "answer": 1}\n' + line + "\n")
    with pytest.raises(TaskFileError, match=re.escape(f"t.jsonl:2: {why}")):
        load_tasks(bad)


def test_answers_each_scorer_reads_are_accepted(tmp_path: Path) -> None:
    rows = [
        ("exact", "yes"), ("exact", 3), ("path", "a/b.py"), ("numeric", 2.5),
        ("numeric", "17"), ("contains", "x"), ("contains", ["x", "y"]), ("f1", []),
        ("f1", ["a", 2]), ("pairs", [[1, 2], ["3", 4]]), ("pairs", []), ("mod:fn", None),
    ]  # fmt: skip
    good = tmp_path / "t.jsonl"
    good.write_text(
        "".join(
            json.dumps({"question": "q", "context": "c", "answer": a, "scorer": s}) + "\n"
            for s, a in rows
        )
    )
    assert [(t.scorer, t.answer) for t in load_tasks(good)] == rows


@pytest.mark.parametrize(
    ("line", "why"),
    [
        # ran task 1, then stopped the rollout: "could not convert string to float: 'abc'"
        ('{"id": "b", "family": "f", "question": "q", "answer": "abc", "metric": "numeric", '
         '"context_ref": "c.txt"}', "answer must be a finite number for scorer 'numeric'"),
        # accepted: two tasks under one id (rollouts and their resume are keyed on it)
        ('{"id": "a", "family": "f", "question": "q", "answer": "1", "metric": "exact", '
         '"context_ref": "c.txt"}', "task id 'a' is already used on line 1"),
        # ran task 1, then "[Errno 2] No such file or directory" naming no task
        ('{"id": "b", "family": "f", "question": "q", "answer": "1", "metric": "exact", '
         '"context_ref": "gone.txt"}', "context_ref 'gone.txt' does not exist"),
        ('{"id": ["b"], "family": "f", "question": "q", "answer": "1", "metric": "exact", '
         '"context_ref": "c.txt"}', "id must be a string or an integer"),
    ],
)  # fmt: skip
def test_a_bad_task_in_a_task_set_folder_is_refused_before_any_task_runs(
    tmp_path: Path, line, why
) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"split": "train"}')
    (folder / "c.txt").write_text("ctx")
    first = '{"id": "a", "family": "f", "question": "q", "answer": "1", "metric": "exact", '
    (folder / "tasks.jsonl").write_text(first + '"context_ref": "c.txt"}\n' + line + "\n")
    with pytest.raises(TaskFileError, match=re.escape(f"tasks.jsonl:2: {why}")):
        load_tasks(folder)


# -- review13: hostile export-rollouts files, rollout options, terminal text ----------------


@pytest.fixture(scope="module")
def exported_set(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The records of a real ``export-rollouts`` file: one rollout, its run and nodes."""
    folder = tmp_path_factory.mktemp("exported")
    tasks = load_tasks(write_tasks(folder / "tasks.jsonl"))[:1]
    with Store(folder / "a.db") as store:
        opts = RolloutOptions(model="script", rollout_set="s1", sandbox="inprocess")
        asyncio.run(run_rollouts(tasks, opts, registry=registry_with(Scripted()), store=store))
        export_set(store, "s1", folder / "set.jsonl")
    return [json.loads(x) for x in (folder / "set.jsonl").read_text().splitlines()]


def _bad_imports(records: list[dict]) -> dict[str, tuple[list[Any], str]]:
    rollout = next(r for r in records if r["type"] == "rollout")
    run = next(r for r in records if r["type"] == "run")
    rest = [r for r in records if r is not rollout]
    others = [r for r in records if r is not run]
    return {
        "not an object": (
            [*records, [1, 2]],
            r":\d+: not a JSON object \(one exported record\), got a list",
        ),
        "a string": ([*records, "x"], r"not a JSON object \(one exported record\), got a string"),
        "unknown type": ([*records, {"type": "spam"}], r"type must be one of"),
        "unknown rollout field": (
            [{**rollout, "bogus": 1}, *rest],
            r":1: unknown field 'bogus' in a rollout",
        ),
        "a field that is SQL": (
            [{**rollout, "x]) VALUES (1) --": 1}, *rest],
            r"unknown field 'x\]\) VALUES \(1\) --'",
        ),
        "unknown run field": (
            [rollout, {**run, "evil": 1}, *rest[1:]],
            r":2: unknown field 'evil' in a run",
        ),
        "no rollout_set": (
            [{k: v for k, v in rollout.items() if k != "rollout_set"}, *rest],
            r":1: a rollout needs rollout_set",
        ),
        "details not an object": (
            [{**rollout, "details": "oops"}, *rest],
            r":1: rollout details must be an object",
        ),
        "reward not a number": (
            [{**rollout, "reward": "x"}, *rest],
            r":1: rollout reward must be a finite number, got 'x'",
        ),
        "sample_index negative": (
            [{**rollout, "sample_index": -1}, *rest],
            r"sample_index must be an integer >= 0",
        ),
        "the rollout's run is missing": (
            [rollout, *[r for r in others if r["type"] != "node"]],
            r":1: the run .* of this rollout is neither in the file nor in the store",
        ),
        "a node of no run": (
            [*records, {**records[-1], "id": "n-x", "run_id": "nowhere"}],
            r"node 'n-x' belongs to run 'nowhere', which is not in the file",
        ),
        "a run twice": ([*records, run], r"run id .* is already on line 2"),
        "one run under two rollouts": (
            [*records, {**rollout, "sample_index": 1}],
            r"run .* already has a rollout \(line 1\)",
        ),
    }


def test_a_bad_import_file_is_refused_naming_the_line_and_nothing_is_written(
    tmp_path: Path, exported_set: list[dict]
) -> None:
    """Review13: an ``import-rollouts`` file with an unknown field was reported as a broken
    store ("cannot be used ... Move it aside and rlmd starts a new one"), a non-object line
    raised AttributeError, a rollout without its run was imported and then broke every
    ``train export`` with a bare KeyError, a string ``details`` was kept as is; the file's
    keys were pasted into the SQL as column names."""
    for name, (records, why) in _bad_imports(exported_set).items():
        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        with Store(tmp_path / f"{len(name)}-{abs(hash(name))}.db") as store:
            with pytest.raises(ValueError, match=why) as info:
                import_set(store, path)
            assert str(path) in str(info.value), name
            assert store.rollouts() == [] and store.list_runs() == [], name


def test_an_import_file_that_is_not_text_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b'{"type": "run"}\n\xff\xfe\n')
    with Store(tmp_path / "a.db") as store, pytest.raises(ValueError, match="not UTF-8 text"):
        import_set(store, path)


def test_an_import_file_holding_a_rollout_twice_imports_it_once(
    tmp_path: Path, exported_set: list[dict]
) -> None:
    path = tmp_path / "twice.jsonl"
    rollout = next(r for r in exported_set if r["type"] == "rollout")
    path.write_text("".join(json.dumps(r) + "\n" for r in [*exported_set, rollout]))
    with Store(tmp_path / "b.db") as store:
        assert import_set(store, path) == 1
        assert import_set(store, path) == 0
        assert len(store.rollouts()) == 1 and sft_samples(store)[1].rollouts == 1


def test_import_rollouts_cli_says_the_file_is_bad_not_the_store(
    rlmd_home: Path, exported_set: list[dict]
) -> None:
    path = rlmd_home / "bad.jsonl"
    rollout = next(r for r in exported_set if r["type"] == "rollout")
    rest = [r for r in exported_set if r is not rollout]
    path.write_text("".join(json.dumps(r) + "\n" for r in [{**rollout, "bogus": 1}, *rest]))
    done = _rlmd_train(rlmd_home, "import-rollouts", str(path))
    assert done.returncode == 2, done.stderr
    assert "unknown field 'bogus'" in done.stderr
    assert "Move it aside" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"samples": 0}, r"samples must be an integer >= 1, not 0"),
        ({"samples": -1}, r"samples must be an integer >= 1"),
        ({"parallel": 0}, r"parallel must be an integer >= 1, not 0"),
        ({"temperature": float("nan")}, r"temperature must be a finite number >= 0, not nan"),
        ({"temperature": -1.0}, r"temperature must be a finite number >= 0"),
        ({"terms": RewardTerms(error_penalty=float("nan"))}, r"error_penalty must be a finite"),
        ({"terms": RewardTerms(error_penalty=float("inf"))}, r"error_penalty must be a finite"),
        ({"terms": RewardTerms(error_penalty=-0.5)}, r"error_penalty must be a finite number >= 0"),
        ({"terms": RewardTerms(min_iterations=-1)}, r"min_iterations must be an integer >= 0"),
        ({"terms": RewardTerms(min_subcalls=-2)}, r"min_subcalls must be an integer >= 0"),
    ],
)
def test_rollout_options_out_of_range_are_refused_before_any_run(
    tmp_path: Path, change: dict, why: str
) -> None:
    """Review13: ``--samples 0`` printed "no rollouts" and exited 0; ``--error-penalty nan``
    (or ``inf``) made every reward 0, runs without a failed cell too (``nan * 0``), and a
    negative penalty raised the reward of runs whose cells raised; ``--temperature nan``
    reached the sampler. Each is refused before any run."""
    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl"))
    model = Scripted()
    opts = RolloutOptions(model="script", rollout_set="s1", sandbox="inprocess", **change)
    with Store(tmp_path / "a.db") as store:
        with pytest.raises(ValueError, match=why):
            asyncio.run(run_rollouts(tasks, opts, registry=registry_with(model), store=store))
        assert model.seen == [] and store.rollouts() == []


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("--samples", "0", "--samples must be >= 1, got 0"),
        ("--parallel", "0", "--parallel must be >= 1, got 0"),
        ("--max-iterations", "0", "--max-iterations must be >= 1, got 0"),
        ("--max-depth", "0", "--max-depth must be >= 1, got 0"),
        ("--min-subcalls", "-1", "--min-subcalls must be >= 0, got -1"),
        ("--max-seconds", "0", "--max-seconds must be a number of seconds > 0, got 0.0"),
        ("--max-seconds", "nan", "--max-seconds must be a number of seconds > 0, got nan"),
        ("--temperature", "-1", "--temperature must be a finite number >= 0, got -1.0"),
        ("--error-penalty", "inf", "--error-penalty must be a finite number >= 0, got inf"),
        ("--repair-share", "2", "--repair-share must be from 0 to 1, got 2.0"),
        ("--literal-share", "nan", "--literal-share must be from 0 to 1, got nan"),
    ],
)
def test_rollout_cli_names_the_flag_that_is_out_of_range(
    rlmd_home: Path, tmp_path: Path, flag: str, value: str, why: str
) -> None:
    """Review16 left: ``--max-iterations 0`` said ``budget max_iterations must be >= 1``
    (the engine's field, not the flag the user typed), and only after the model was
    looked up; each flag is now named, before anything else is read."""
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    args = ("--tasks", str(tasks), "--model", "no-such-model", flag, value)
    done = _rlmd_train(rlmd_home, "rollout", *args)
    assert done.returncode == 2, done.stderr
    assert why in done.stderr and "budget" not in done.stderr, done.stderr


def test_a_rollout_whose_run_got_no_model_reply_stops_the_set_unrecorded(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review17: with a sandbox that cannot start (``--sandbox container`` and no docker
    engine) or a model server that does not answer, every rollout failed before any model
    reply and was recorded with reward 0; the set then resumed past them all as done. The
    rollouts now stop at the first, which is not recorded, and say why."""
    boom = tmp_path / "boom.py"
    boom.write_text("def respond(messages):\n    raise ConnectionError('server down')\n")
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    args = ("--tasks", str(tasks), "--model", f"scripted:{boom}:respond", "--set", "s")
    done = _rlmd_train(rlmd_home, "rollout", *args, "--sandbox", "inprocess")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "failed before any model reply" in done.stderr and "server down" in done.stderr
    assert "set 's' resumes where it stopped" in done.stderr
    with Store(rlmd_home / "rlmd.db") as store:
        assert store.rollouts("s") == []


def test_rollout_cli_says_an_unknown_model_without_quotes(rlmd_home: Path, tmp_path: Path) -> None:
    """Review17: the registry's ``KeyError`` was printed as its repr, the message in quotes
    (``error: "unknown model 'nope'; known: ..."``), as ``rlmd run`` no longer does."""
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    done = _rlmd_train(rlmd_home, "rollout", "--tasks", str(tasks), "--model", "nope")
    assert done.returncode == 2, done.stderr
    assert "error: unknown model 'nope'" in done.stderr, done.stderr


def test_train_rollout_draws_task_ids_and_families_with_escapes(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review13: a task id or family holding ESC went raw to the terminal in the progress
    lines and the summary table (``\\x1b[2J`` cleared the screen), and ``[red]`` in one was
    taken as rich markup; README: whatever rlmd draws shows control characters as escapes."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('a')\n```"}))
    tasks = tmp_path / "t.jsonl"
    row = {"question": "q?", "context": "abc", "answer": "a", "id": "a\x1b[2Jb[red]x"}
    tasks.write_text(json.dumps({**row, "family": "f\x1b]0;title\x07[bold]y"}) + "\n")
    from helpers.cli import rlmd  # a wide terminal: the table's cells are not cut

    args = ("--tasks", str(tasks), "--model", f"scripted:{script}", "--sandbox", "inprocess")
    done = rlmd("train", "rollout", *args, home=rlmd_home)
    assert done.returncode == 0, done.stderr
    for text in (done.stdout, done.stderr):
        assert "\x1b" not in text and "\x07" not in text
    assert "a\\x1b[2Jb[red]x #0: reward 1.00" in done.stderr
    assert "f\\x1b]0;title\\x07[bold]y" in done.stdout
    again = rlmd("train", "summary", home=rlmd_home)
    assert "\x1b" not in again.stdout and "f\\x1b]0;title\\x07[bold]y" in again.stdout


def test_the_teacher_refuses_a_task_without_its_generator_params_before_any_run(
    tmp_path: Path,
) -> None:
    """Review13: a user's task claiming family ``oolong`` (or ``codeqa``) without the
    generator's params stopped the teacher's rollout at that task, every task before it
    done, with ``error: 'label'`` (a bare KeyError)."""
    rows = [
        {"question": "What is the magic number?", "context": "x", "answer": "5",
         "family": "sniah", "scorer": "contains", "split": "train"},
        {"question": "How many are animals?", "context": "x", "answer": "5",
         "family": "oolong", "scorer": "numeric", "split": "train",
         "id": "mine-2"},
    ]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = load_tasks(path)
    with Store(tmp_path / "a.db") as store:
        opts = RolloutOptions(model="teacher", rollout_set="s", sandbox="inprocess")
        with pytest.raises(ValueError, match=r"task 'mine-2' \(family 'oolong'\).*'label'"):
            asyncio.run(run_rollouts(tasks, opts, registry=Registry(), store=store))
        assert store.rollouts() == []


def test_export_of_a_rollout_without_root_turns_drops_it_and_bad_filters_are_refused(
    tmp_path: Path, exported_set: list[dict]
) -> None:
    """Review13: ``rlmd train export --max-depth -1``, or a rollout whose run kept no root
    turns (imported without its nodes), stopped the export with ``error: zip() argument 2
    is longer than argument 1``."""
    path = tmp_path / "bare.jsonl"
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in exported_set if r["type"] in ("rollout", "run"))
    )
    with Store(tmp_path / "a.db") as store:
        assert import_set(store, path) == 1
        samples, report = sft_samples(store)
        assert samples == [] and report.dropped == {"no_turns": 1}
        for bad, why in (
            ({"max_depth": -1}, "max_depth must be an integer >= 0"),
            ({"min_iterations": -1}, "min_iterations must be an integer >= 0"),
            ({"max_chars": 0}, "max_chars must be an integer >= 1"),
        ):
            with pytest.raises(ValueError, match=why):
                sft_samples(store, ExportFilters(**bad))
            with pytest.raises(ValueError, match=why):
                grpo_groups(store, ExportFilters(**bad))


def test_a_task_file_with_a_bom_loads_and_a_huge_integer_names_the_line(tmp_path: Path) -> None:
    """Review13: a task file saved with a UTF-8 byte-order mark (Windows editors) was refused
    as 'not JSON (Unexpected UTF-8 BOM)'; an id of 5,000 digits stopped the load with
    Python's 'Exceeds the limit (4300 digits)' naming no file or line."""
    row = '{"question": "q?", "context": "c", "answer": "a"}'
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + row.encode() + b"\n")
    assert [t.question for t in load_tasks(bom)] == ["q?"]
    huge = tmp_path / "huge.jsonl"
    huge.write_text(row + "\n" + row[:-1] + ', "id": ' + "9" * 5000 + "}\n")
    with pytest.raises(TaskFileError, match=r"huge.jsonl:2: not JSON"):
        load_tasks(huge)


# -- review14: a set that does not exist, seeds shared by the splits, the summary's width ----


def _one_rollout_set(rlmd_home: Path, tmp_path: Path, family: str = "f") -> None:
    """Record one rollout (set ``mine``, family ``family``) in ``rlmd_home``'s store."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('a')\n```"}))
    tasks = tmp_path / "t.jsonl"
    row = {"question": "q?", "context": "abc", "answer": "a", "id": "t1", "family": family}
    tasks.write_text(json.dumps(row) + "\n")
    args = ("--model", f"scripted:{script}", "--sandbox", "inprocess", "--set", "mine")
    done = _rlmd_train(rlmd_home, "rollout", "--tasks", str(tasks), *args)
    assert done.returncode == 0, done.stderr


def test_a_rollout_set_that_does_not_exist_is_refused_and_no_file_is_written(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review13 left: ``export-rollouts --set NOSUCH`` wrote an empty file (over an existing
    one too) and exited 0; ``export --set`` and ``summary --set`` of a misspelt set were as
    quiet. Each now names the set, lists the sets there are and exits 2, writing nothing."""
    with Store(rlmd_home / "x.db") as store:
        with pytest.raises(ValueError, match=r"no rollout set 'NOSUCH'.*sets: none yet"):
            export_set(store, "NOSUCH", tmp_path / "never.jsonl")
    assert not (tmp_path / "never.jsonl").exists()
    _one_rollout_set(rlmd_home, tmp_path)
    kept = tmp_path / "kept.jsonl"
    kept.write_text("earlier work\n")
    fresh = tmp_path / "fresh.jsonl"
    for args in (
        ("export-rollouts", "--set", "NOSUCH", "--out", str(kept)),
        ("export-rollouts", "--set", "NOSUCH", "--out", str(fresh)),
        ("export", "--format", "sft", "--set", "mine", "--set", "NOSUCH", "--out", str(kept)),
        ("export", "--format", "grpo", "--set", "NOSUCH", "--out", str(fresh)),
        ("summary", "--set", "NOSUCH"),
    ):
        done = _rlmd_train(rlmd_home, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "no rollout set 'NOSUCH'" in done.stderr and "'mine' (1)" in done.stderr, args
        assert "Traceback" not in done.stderr and done.stdout == "", args
    assert kept.read_text() == "earlier work\n" and not fresh.exists()
    done = _rlmd_train(rlmd_home, "export-rollouts", "--set", "mine", "--out", str(fresh))
    assert done.returncode == 0 and '"type": "rollout"' in fresh.read_text()


@pytest.mark.parametrize("seed", [SEED_LIMIT, SEED_LIMIT + 5, -1, -SEED_LIMIT])
@pytest.mark.parametrize("split", ["train", "heldout"])
def test_a_seed_the_other_split_could_use_is_refused(tmp_path: Path, split, seed) -> None:
    """Review13 left: ``rlmd train tasks --split train --seed 1000003`` drew the held-out
    split's seed 0 (held-out seeds are offset by 1,000,003), and ``--split heldout --seed
    -1000003`` the train split's seed 0. Seeds are now 0 .. 1,000,002 for both splits."""
    assert SPLITS["train"]["seed_offset"] == 0 and SPLITS["heldout"]["seed_offset"] == SEED_LIMIT
    with pytest.raises(ValueError, match=rf"seed must be an integer from 0 to {SEED_LIMIT - 1}"):
        generate_split(split, tmp_path / "out", seed=seed, size="tiny")
    assert not (tmp_path / "out").exists()


def test_train_tasks_cli_refuses_a_held_out_seed_for_the_train_split(rlmd_home: Path) -> None:
    out = rlmd_home / "tasks"
    done = _rlmd_train(
        rlmd_home, "tasks", "--split", "train", "--seed", "1000003", "--out", str(out)
    )
    assert done.returncode == 2, done.stderr
    assert "seed must be an integer from 0 to 1000002, not 1000003" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


SUMMARY_ROWS = [
    {"family": fam, "rollouts": 12, "reward": 0.417, "correctness": 0.5, "solved": 0.417,
     "iterations": 3.25, "subcalls": 10.5, "uses_subcalls": 0.333, "cell_errors": 14}
    for fam in ("sniah", "oolong", "pairs", "codeqa", "needle_in_a_long_haystack", "all")
]  # fmt: skip


@pytest.mark.parametrize("width", [200, 120, 80, 60, 40, 24])
def test_the_rollout_summary_fits_a_narrow_terminal_without_cutting_a_word(width: int) -> None:
    """Review13 left: on 80 columns the summary's headers were cut (``rollo…``, ``itera…``,
    ``cell…``), and so were long families (``needl…``). Every header, family and number is
    now shown whole within the width (a family may fold at the narrowest)."""
    from rich.console import Console

    from rlmd.cli.train import summary_table

    console = Console(width=width, record=True, color_system=None)
    console.print(summary_table(SUMMARY_ROWS, width))
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    words = set(text.split())
    assert set(SUMMARY_ROWS[0]) - {"family"} <= words
    assert {"0.417", "3.25", "10.5", "0.333", "14"} <= words
    assert "needle_in_a_long_haystack" in "".join(text.split())
    assert {"sniah", "oolong", "pairs", "codeqa", "all"} <= words


def test_train_summary_on_80_columns_shows_whole_headers(rlmd_home: Path, tmp_path: Path) -> None:
    _one_rollout_set(rlmd_home, tmp_path, family="needle_in_a_long_haystack")
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "train", "summary"],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home), "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and "needle_in_a_long_haystack" in done.stdout
    assert {"rollouts", "correctness", "iterations", "uses_subcalls", "cell_errors"} <= set(
        done.stdout.split()
    )
    assert all(len(line) <= 80 for line in done.stdout.splitlines())


# -- review15: a GRPO export that keeps no group says why ----------------------------------


def test_a_grpo_export_that_keeps_no_group_says_why_and_what_to_do(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review14 left: ``rlmd train export --format grpo`` printed ``0 grpo records`` and
    nothing more when every group was dropped (one sample per task, or the same reward in
    every sample). It now counts what it dropped and says what would keep a group."""
    out = tmp_path / "g.jsonl"
    grpo = ("export", "--format", "grpo", "--out", str(out))
    done = _rlmd_train(rlmd_home, *grpo)
    assert done.returncode == 0, done.stderr
    assert "0 grpo records" in done.stderr and "no rollouts" in done.stderr
    assert "rlmd train rollout" in done.stderr

    _one_rollout_set(rlmd_home, tmp_path)  # one sample of task t1
    done = _rlmd_train(rlmd_home, *grpo)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert '"dropped": {"one_sample": 1}' in done.stderr
    assert "1 task had one sample" in re.sub(r"\s+", " ", done.stderr)
    assert "--samples" in done.stderr and out.read_text() == ""

    script = tmp_path / "s.json"  # a second sample, the same answer: the same reward
    tasks = tmp_path / "t.jsonl"
    args = ("--model", f"scripted:{script}", "--sandbox", "inprocess", "--set", "mine")
    done = _rlmd_train(rlmd_home, "rollout", "--tasks", str(tasks), "--samples", "2", *args)
    assert done.returncode == 0, done.stderr
    done = _rlmd_train(rlmd_home, *grpo)
    flat = re.sub(r"\s+", " ", done.stderr)
    assert '"dropped": {"zero_advantage": 1}' in flat
    assert "1 task had the same reward in every sample" in flat
    assert "--keep-zero-advantage" in flat
    done = _rlmd_train(rlmd_home, *grpo, "--keep-zero-advantage")
    assert done.returncode == 0 and "1 grpo records" in done.stderr
    assert "warning" not in done.stderr
    assert json.loads(out.read_text())["rewards"] == [1.0, 1.0]

    done = _rlmd_train(rlmd_home, *grpo, "--family", "other")
    assert "2 rollouts of another --family" in re.sub(r"\s+", " ", done.stderr)


# -- review15: odd task and data files -----------------------------------------------------


@pytest.mark.parametrize(
    "text, why",
    [
        ("", r"t.jsonl: no task in the file \(it is empty\)"),
        ("\n  \n\n", r"t.jsonl: no task in the file \(it holds only blank lines\)"),
        ('{"question": "q", "context": "c", "answer": "a", "family": 3}\n', r":1: family must be a non-empty string, not 3"),
        ('{"question": "q", "context": "c", "answer": "a", "family": " "}\n', r":1: family must be"),
        ('{"question": "q", "context": "c", "answer": "a", "split": "dev"}\n', r":1: split must be one of user, train, heldout"),
    ],
)  # fmt: skip
def test_an_empty_task_file_and_odd_family_or_split_are_refused(tmp_path, text, why) -> None:
    """A new user's walk (review15): ``rlmd train rollout --tasks empty.jsonl`` printed
    "no rollouts" and exited 0; ``"family": 3`` became family ``"3"``; ``"split": "dev"``
    was recorded and then dropped by every export (which keeps train and user tasks)."""
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TaskFileError, match=why):
        load_tasks(path)


def test_an_empty_task_file_is_a_usage_error_of_rollout(rlmd_home: Path, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    done = _rlmd_train(
        rlmd_home, "rollout", "--tasks", str(tmp_path / "empty.jsonl"),
        "--model", "scripted:x.json", "--sandbox", "inprocess",
    )  # fmt: skip
    assert (
        done.returncode == 2 and "empty.jsonl: no task in the file (it is empty)" in done.stderr
    ), done.stderr


MESSAGE = [{"role": "user", "content": "q"}]
REPLY = [{"role": "assistant", "content": "```repl\nFINAL(1)\n```"}]
SFT_OK = {"prompt": MESSAGE, "completion": REPLY, "turn": 0}
GROUP_OK = {"prompt": MESSAGE, "completions": [REPLY, REPLY], "rewards": [1, 0.0]}


@pytest.mark.parametrize(
    "lines, why",
    [
        ([], r"no SFT sample in the file \(it is empty\)"),
        (["not json"], r":1: not JSON"),
        ([SFT_OK, [1, 2]], r":2: not a JSON object \(one SFT sample\), got a list"),
        ([{"prompt": MESSAGE}], r":1: completion must be a non-empty list of messages, got nothing"),
        ([{**SFT_OK, "prompt": "hi"}], r":1: prompt must be a non-empty list of messages, got a string"),
        ([{**SFT_OK, "completion": [{"role": "assistant"}]}], r":1: completion\[0\] must be a message"),
        ([{**SFT_OK, "turn": "2"}], r":1: turn must be an integer, not '2'"),
    ],
)  # fmt: skip
def test_a_bad_sft_file_is_refused_naming_the_line(tmp_path, lines, why) -> None:
    from rlmd.train.datafile import DataFileError, check_sft

    path = tmp_path / "sft.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    with pytest.raises(DataFileError, match=why):
        check_sft(path)


@pytest.mark.parametrize(
    "lines, why",
    [
        ([], r"no GRPO group in the file"),
        (["42"], r":1: not a JSON object \(one GRPO group\), got a number"),
        ([{"prompt": MESSAGE}], r":1: completions must be a non-empty list"),
        ([{**GROUP_OK, "rewards": 5}], r":1: rewards must be a list of finite numbers"),
        ([{**GROUP_OK, "rewards": [1, "NaN"]}], r":1: rewards must be a list of finite numbers"),
        ([{**GROUP_OK, "rewards": [1]}], r":1: 1 rewards for 2 completions"),
        ([{**GROUP_OK, "completions": [REPLY, "x"]}], r":1: completions\[1\] must be a non-empty list"),
    ],
)  # fmt: skip
def test_a_bad_grpo_file_is_refused_naming_the_line(tmp_path, lines, why) -> None:
    from rlmd.train.datafile import DataFileError, read_groups

    path = tmp_path / "g.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    with pytest.raises(DataFileError, match=why):
        read_groups(path)
    path.write_text(json.dumps(GROUP_OK) + "\n")
    assert read_groups(path) == [GROUP_OK]


def test_what_export_writes_passes_the_data_checks(tmp_path: Path) -> None:
    from rlmd.train.datafile import check_sft, read_groups

    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl"))
    with Store(tmp_path / "a.db") as store:
        rollout(tasks, Scripted(), store, samples=2)
        write_jsonl(sft_samples(store)[0], tmp_path / "sft.jsonl")
        write_jsonl(grpo_groups(store, keep_zero_advantage=True), tmp_path / "g.jsonl")
    assert check_sft(tmp_path / "sft.jsonl") == 4
    assert len(read_groups(tmp_path / "g.jsonl")) == 3


def test_sft_and_grpo_check_their_data_before_loading_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review15: ``rlmd train sft`` loaded the base model (minutes on a CPU) before reading
    ``--data``, so an empty file failed only then, with the datasets library's error;
    ``grpo`` stopped on a line that is not an object with a bare ``TypeError``."""
    pytest.importorskip("torch")
    pytest.importorskip("datasets")
    from rlmd.train import grpo, sft
    from rlmd.train.datafile import DataFileError

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(sft, "load_base", never)
    monkeypatch.setattr(grpo, "load_base", never)
    empty, listed = tmp_path / "empty.jsonl", tmp_path / "list.jsonl"
    empty.write_text("")
    listed.write_text("[1]\n")
    with pytest.raises(DataFileError, match="empty.jsonl: no SFT sample"):
        sft.train_sft("qwen2.5-coder-0.5b", empty, tmp_path / "out")
    with pytest.raises(DataFileError, match="list.jsonl:1: not a JSON object"):
        grpo.train_grpo("qwen2.5-coder-0.5b", listed, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["empty", "file", "project"])
def test_train_tasks_refuses_an_out_it_would_spill_into(tmp_path, monkeypatch, kind) -> None:
    """Review15: ``rlmd train tasks --out ""`` wrote manifest.json, tasks.jsonl and contexts/
    into the current folder; ``--out .`` in a project would overwrite its manifest.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "manifest.json").write_text('{"mine": true}')
    out = {"empty": "", "file": "manifest.json", "project": "."}[kind]
    with pytest.raises(ValueError, match="--out is empty|is a file|holds other files"):
        generate_split("train", out, size="tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    assert (tmp_path / "manifest.json").read_text() == '{"mine": true}'


# -- review16: one reader of numbered JSONL lines -------------------------------------------


def _read_by_each(path: Path, tmp_path: Path) -> dict[str, str]:
    """What each ``rlmd train`` reader of a JSONL file says of ``path``."""
    from rlmd.train.datafile import check_sft, read_groups

    said: dict[str, str] = {}
    with Store(tmp_path / "import.db") as store:
        readers = {
            "tasks": lambda: load_tasks(path),
            "sft": lambda: check_sft(path),
            "grpo": lambda: read_groups(path),
            "import": lambda: import_set(store, path),
        }
        for name, read in readers.items():
            with pytest.raises(ValueError) as info:
                read()
            said[name] = str(info.value)
    return said


@pytest.mark.parametrize(
    "data, said",
    [
        (b"\n\n", ": no {what} in the file (it holds only blank lines)"),
        (b"{}\n[1]\n", ":2: not a JSON object (one {what}), got a list"),
        (b"\xef\xbb\xbf{}\n{\n", ":2: not JSON (Expecting property name"),
        (b"{}\n{}\n  \xff{}\n", ":3: not UTF-8 text (byte 0xff at column 3)"),
        (b"{}\n" + b"[" * 100_000 + b"]" * 100_000, ":2: JSON nested too deeply to read"),
    ],
)
def test_every_jsonl_reader_of_train_says_file_line_what(tmp_path: Path, data, said) -> None:
    """Review15 left three readers of numbered JSONL lines (task files, SFT/GRPO data,
    rollout imports), each with its own wording ("a task must be a JSON object, got int",
    "each line must be a JSON object (one SFT sample)", "a record must be ..."); a file
    that is not UTF-8 named no line, and an import file with a byte-order mark was not
    JSON. One reader now: ``file:line: what is wrong`` (review19: a line nested thousands
    deep ended ``rlmd train rollout``/``import-rollouts`` in a RecursionError traceback)."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    what = {"tasks": "task", "sft": "SFT sample", "grpo": "GRPO group"}
    what["import"] = "exported record"
    for name, message in _read_by_each(path, tmp_path).items():
        expected = str(path) + said.format(what=what[name])
        assert message.startswith(expected), (name, message)


def test_a_fifo_or_a_folder_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A FIFO given as ``--data`` or ``--tasks`` was "no such file"; given to
    ``import-rollouts`` it blocked the read forever."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for message in _read_by_each(fifo, tmp_path).values():
        assert message.startswith(f"{fifo}: not a regular file"), message
    folder = tmp_path / "data"
    folder.mkdir()
    from rlmd.train.datafile import DataFileError, check_sft

    with pytest.raises(DataFileError, match=r"data: a folder, not a file of SFT samples"):
        check_sft(folder)


# -- session 16: an SFT export that keeps no sample says why; an empty set name ------------


def test_an_sft_export_that_keeps_no_sample_says_why_and_what_to_do(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review16 left: ``rlmd train export --format sft`` wrote an empty file and said only
    ``0 sft records`` (the GRPO export says why). It now names what dropped every rollout
    or turn and the flag that would keep it."""
    out = tmp_path / "s.jsonl"
    sft = ("export", "--format", "sft", "--out", str(out))
    done = _rlmd_train(rlmd_home, *sft)
    assert done.returncode == 0, done.stderr
    flat = re.sub(r"\s+", " ", done.stderr)
    assert "0 sft records" in flat and "holds no rollouts" in flat and "rlmd train rollout" in flat

    _one_rollout_set(rlmd_home, tmp_path)  # reward 1, a few turns
    done = _rlmd_train(rlmd_home, *sft, "--min-iterations", "99")
    flat = re.sub(r"\s+", " ", done.stderr)
    assert done.returncode == 0 and out.read_text() == "", done.stderr
    assert "warning: no sample left: 1 rollout had fewer turns than --min-iterations" in flat

    done = _rlmd_train(rlmd_home, *sft, "--min-reward", "2")
    assert "1 rollout scored under --min-reward" in re.sub(r"\s+", " ", done.stderr)
    done = _rlmd_train(rlmd_home, *sft, "--family", "other")
    assert "1 rollout of another --family" in re.sub(r"\s+", " ", done.stderr)
    done = _rlmd_train(rlmd_home, *sft)
    assert done.returncode == 0 and "0 sft records" not in done.stderr
    assert "warning" not in done.stderr and out.read_text().strip()


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_rollout_set_name_is_refused_before_anything_runs(
    rlmd_home: Path, tmp_path: Path, name: str
) -> None:
    """Review16 left: ``rlmd train rollout --set ''`` (an unset shell variable) recorded a
    set that no ``--set`` could name. It is refused, and nothing is recorded."""
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"question": "q?", "context": "abc", "answer": "a"}) + "\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('a')\n```"}))
    args = ("--model", f"scripted:{script}", "--sandbox", "inprocess", "--set", name)
    done = _rlmd_train(rlmd_home, "rollout", "--tasks", str(tasks), *args)
    assert done.returncode == 2 and "rollout set name is empty" in done.stderr, done.stderr
    done = _rlmd_train(rlmd_home, "summary")
    assert "t1" not in done.stdout and "user-1" not in done.stdout
    with pytest.raises(ValueError, match="rollout set name is empty"):
        RolloutOptions(model="m", rollout_set=name)

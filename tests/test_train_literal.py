"""The teacher's literal strategies (issue 13, session 15): short programs that write the
question's key or name literally, print what they found, and answer on the next turn with the
value read from the printed output. Each one solves its train task through the real engine
and the subprocess sandbox; the reading turn reads the REPL output, never the gold."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rlmd.models.registry import Registry
from rlmd.store import Store
from rlmd.train import teacher, teacher_literal
from rlmd.train.export import ExportFilters, sft_samples
from rlmd.train.rollout import RolloutOptions, run_rollouts
from rlmd.train.tasks import TrainTask


def needle(written: str) -> TrainTask:
    text = "Some essay text. " * 80
    text += f"The special magic number for {written} is: 5150123. " + "More essay text. " * 80
    return TrainTask(
        "train-sniah-x", "sniah", "What is the special magic number for quiet-otter?",
        "5150123", "contains", context=text, split="train", params={"key": "quiet-otter"},
    )  # fmt: skip


SNIAH = needle("quiet-otter")

FILES = {
    "pkg/__init__.py": "",
    "pkg/base.py": "class Base:\n    pass\n\n\nLIMIT = ' \\t\\n'\n",
    "pkg/impl.py": (
        "import json\nfrom pkg.base import Base\n\n\nclass Impl(Base):\n    def run(self):\n"
        "        return helper(1) + self.helper2(2)\n\n\ndef helper(x):\n    return x\n"
    ),
    "pkg/other.py": (
        "import pkg.base\n\n\nclass Other(pkg.base.Base):\n    def helper2(self, y):\n"
        "        return helper(y)\n\n\ndef helper(z):\n    return z\n"
    ),
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "code"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def codeqa(root: Path, template: str, answer: Any, scorer: str, **params: Any) -> TrainTask:
    return TrainTask(
        f"train-codeqa-{template}", "codeqa", f"a {template} question", answer, scorer,
        context_path=str(root), split="train", params={"template": template, **params},
    )  # fmt: skip


def _sample_playing(task: TrainTask, strategy: str) -> int:
    """The first sample index whose seeded draws play ``strategy`` (deterministic)."""
    return next(k for k in range(200) if teacher.policy(task, k).strategy == strategy)


def _play(task: TrainTask, k: int, tmp_path: Path) -> tuple[dict[str, Any], list[dict]]:
    """Sample ``k`` of ``task`` through the engine and the subprocess sandbox: its rollout
    row and its SFT samples."""
    with Store(tmp_path / "t.db") as store:
        opts = RolloutOptions(model="teacher", samples=k + 1)
        asyncio.run(run_rollouts([task], opts, registry=Registry(), store=store))
        row = next(r for r in store.rollouts("teacher") if r["sample_index"] == k)
        samples, _ = sft_samples(store, ExportFilters(rollout_sets=("teacher",)))
    return row, [s for s in samples if s["run_id"] == row["run_id"]]


@pytest.mark.parametrize(
    ("strategy", "written"), [("find", "quiet-otter"), ("find_lower", "Quiet-Otter")]
)
def test_a_needle_found_printed_and_read_back(tmp_path: Path, strategy: str, written: str) -> None:
    task = needle(written)
    k = _sample_playing(task, strategy)
    row, samples = _play(task, k, tmp_path)
    assert row["reward"] == 1.0 and row["iterations"] == 2, row
    assert row["details"]["strategy"] == strategy and row["details"]["mistake"] is None
    first, second = (s["completion"][0]["content"] for s in samples)
    # the key written literally, no regex; the answer written out, read from the output
    find = "context.lower().find('quiet-otter')" if strategy == "find_lower" else "find("
    assert find in first and "import re" not in first and "'quiet-otter'" in first
    assert 'FINAL("5150123")' in second or "FINAL('5150123')" in second
    assert "5150123" in samples[1]["prompt"][-1]["content"]  # it was printed, then read


def test_the_reader_falls_back_to_code_when_the_output_holds_no_number() -> None:
    read = teacher_literal.sniah("quiet-otter", lower=False)[1]
    assert callable(read)
    note, code = read([{"role": "user", "content": "[cell 1]\n-1\n\n\nTurn 2 of 6."}])
    assert "re.search" in code and "FINAL(" in code


@pytest.mark.parametrize(
    ("template", "answer", "scorer", "params", "strategy", "literal"),
    [
        ("where_defined", "pkg/impl.py", "path", {"name": "Impl"}, "find_definition",
         "find_definition('Impl')"),
        ("where_defined", "pkg/impl.py", "path", {"name": "Impl"}, "grep", "'class Impl'"),
        ("call_count", "2", "numeric", {"name": "helper"}, "grep", "'def helper('"),
        ("subclasses", ["Impl", "Other"], "f1", {"base": "Base"}, "grep", "'Base'"),
        ("importers", ["pkg/impl.py"], "f1", {"module": "json"}, "grep", "'import json'"),
        ("module_constant", "' \\t\\n'", "exact", {"name": "LIMIT"}, "grep", "'LIMIT = '"),
    ],
)  # fmt: skip
def test_a_codebase_question_answered_by_a_literal_search(
    tmp_path: Path, tree: Path, template: str, answer: Any, scorer: str,
    params: dict[str, Any], strategy: str, literal: str,
) -> None:  # fmt: skip
    task = codeqa(tree, template, answer, scorer, **params)
    k = _sample_playing(task, strategy)
    row, samples = _play(task, k, tmp_path)
    assert row["reward"] == 1.0 and row["iterations"] == 2, row
    assert row["details"]["strategy"] == strategy
    search = samples[0]["completion"][0]["content"]
    assert literal in search and "import ast" not in search
    assert "FINAL(" in samples[1]["completion"][0]["content"]


def test_the_share_of_literal_plays_is_a_seeded_choice_and_zero_turns_it_off() -> None:
    draws = [teacher.policy(SNIAH, k).strategy for k in range(200)]
    assert draws == [teacher.policy(SNIAH, k).strategy for k in range(200)]
    literal = sum(s in ("find", "find_lower") for s in draws)
    assert 120 <= literal <= 180  # LITERAL_SHARE 0.75 of 200
    assert {teacher.policy(SNIAH, k, literal_share=0.0).strategy for k in range(50)} == {"regex"}
    param = codeqa(Path("."), "param_default", "1", "exact", function="f", param="x")
    assert teacher.policy(param, 0, literal_share=1.0).strategy == "ast"  # none for defaults
    with pytest.raises(ValueError, match="literal_share"):
        teacher.policy(SNIAH, 0, literal_share=1.5)

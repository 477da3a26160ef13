"""A LoRA adapter `rlmd train sft` registered answers its sub-calls with its base model by
default (issue 13, session 18): the adapter is trained on root turns, and measured it labels
worse than its base (session 17: 13 of 36 listed categories against the base's 29). A
sub-model named explicitly (``--sub-model``, ``[run] sub_model``) still wins. No GGUF is
loaded: the registry's adapter file is read, and rollouts run scripted models."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rlmd.config import Settings, build_run_config
from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry, adapter_sub_model
from rlmd.store import Store
from rlmd.train.gguf_lora import register
from rlmd.train.rollout import RolloutOptions, run_rollouts
from rlmd.train.tasks import TrainTask


def test_a_registered_adapter_runs_its_sub_calls_on_its_base(rlmd_home: Path) -> None:
    register("tuned", "qwen2.5-coder-0.5b", rlmd_home / "adapter.gguf")
    config = build_run_config(Settings(), model="tuned")
    assert config.root_model == "tuned" and config.sub_model == "qwen2.5-coder-0.5b"
    assert config.model_for_depth(1) == "qwen2.5-coder-0.5b"  # child roots too
    # a named sub-model wins: the flag, then the [run] table
    assert build_run_config(Settings(), model="tuned", sub_model="tuned").sub_model == "tuned"
    ran = build_run_config(Settings(run={"sub_model": "qwen2.5-coder-1.5b"}), model="tuned")
    assert ran.sub_model == "qwen2.5-coder-1.5b"
    # [run] model = the adapter: the same default
    assert build_run_config(Settings(run={"model": "tuned"})).sub_model == "qwen2.5-coder-0.5b"


def test_only_an_adapter_with_a_lora_has_a_base_sub_model(rlmd_home: Path) -> None:
    register("merged", str(rlmd_home / "merged.gguf"), None)  # a merged fine-tune: no base
    register("on-path", str(rlmd_home / "base.gguf"), rlmd_home / "a.gguf")
    assert adapter_sub_model("merged") is None
    assert adapter_sub_model("on-path") == f"local:{rlmd_home / 'base.gguf'}"
    assert build_run_config(Settings(), model="merged").sub_model is None
    for name in ("qwen2.5-coder-0.5b", "openai:gpt-4.1-mini", "../x", "", "nosuch"):
        assert adapter_sub_model(name) is None, name
    (rlmd_home / "models" / "adapters" / "broken.json").write_text("{not json")
    assert adapter_sub_model("broken") is None


def _rollout(opts: RolloutOptions, registry: Registry, db: Path) -> dict[str, Any]:
    task = TrainTask("t", "user", "Who answers?", "BASE", "exact", context="x", split="heldout")
    with Store(db) as store:
        asyncio.run(run_rollouts([task], opts, registry=registry, store=store))
        return store.rollouts(opts.set_name)[0]


def test_a_rollout_of_an_adapter_asks_its_base_unless_told_otherwise(
    rlmd_home: Path, tmp_path: Path
) -> None:
    # the adapter's entry names a base the registry answers with a script, and the root is
    # scripted too (registry.add replaces the adapter's local entry): no GGUF is loaded
    register("tuned", "base-model", rlmd_home / "adapter.gguf")
    root = "```repl\nr = llm_query('who are you?')\nFINAL(r)\n```"
    reg = Registry()
    reg.add(ModelSpec("tuned", "scripted", "tuned", options={"callable": lambda m: root}))
    reg.add(ModelSpec("base-model", "scripted", "b", options={"callable": lambda m: "BASE"}))
    reg.add(ModelSpec("other", "scripted", "o", options={"callable": lambda m: "OTHER"}))
    row = _rollout(RolloutOptions(model="tuned", rollout_set="a"), reg, tmp_path / "a.db")
    assert row["reward"] == 1.0 and row["subcalls"] == 1
    opts = RolloutOptions(model="tuned", rollout_set="b", sub_model="other")
    assert _rollout(opts, reg, tmp_path / "b.db")["reward"] == 0.0  # it answered OTHER

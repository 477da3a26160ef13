"""One real optimisation step (SFT and the group-relative update) on a tiny, randomly
initialised Qwen2-architecture model, then the adapter through llama.cpp's converter into
llama.cpp, as a registry model.

The tiny model borrows the Qwen2.5 tokenizer from the pulled 0.5B GGUF (CI pulls it:
``RLMD_TEST_MODEL``), so llama.cpp's converter knows its vocabulary; its weights are random
(2 layers, width 32). Training never runs in CI beyond this model."""

from __future__ import annotations

import asyncio
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")
llama_cpp = pytest.importorskip("llama_cpp")

from rlmd.cli.main import main as cli_main  # noqa: E402
from rlmd.models.base import ModelSpec  # noqa: E402
from rlmd.models.local import LocalModel  # noqa: E402
from rlmd.models.registry import Registry  # noqa: E402
from rlmd.store import Store  # noqa: E402
from rlmd.train.export import ExportFilters, sft_samples  # noqa: E402
from rlmd.train.gguf_lora import (  # noqa: E402
    convert_adapter,
    convert_model,
    merge_adapter,
    quantize,
    register,
)
from rlmd.train.grpo import GRPOOptions, sample_ids, train_grpo  # noqa: E402
from rlmd.train.rollout import RolloutOptions, run_rollouts  # noqa: E402
from rlmd.train.sft import (  # noqa: E402
    SFTOptions,
    build_trainer,
    check_lengths,
    length_report,
    load_base,
    train_sft,
)
from rlmd.train.tasks import load_tasks  # noqa: E402

pytestmark = pytest.mark.timeout(1800)


def _gguf() -> Path:
    env = os.environ.get("RLMD_TEST_MODEL")
    if env and Path(env).is_file():
        return Path(env)
    found = sorted((Path.home() / ".local/share/rlmd/models").glob("qwen2.5-coder-0.5b*.gguf"))
    if not found:
        pytest.skip("the 0.5B GGUF is not pulled (rlmd models pull qwen2.5-coder-0.5b)")
    return found[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    gguf = _gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=max(len(tok), 151_936),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4_096,
        tie_word_embeddings=True,
    )
    folder = tmp_path_factory.mktemp("tiny") / "base"
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_gguf(tiny: Path) -> Path:
    """The tiny model as a GGUF (llama.cpp's own converter), for inference through llama.cpp."""
    return convert_model(tiny, tiny.parent / "tiny.gguf")


SAMPLE = {
    "prompt": [
        {"role": "system", "content": "You answer with a ```repl block."},
        {"role": "user", "content": "Question: how long is the context?"},
    ],
    "completion": [{"role": "assistant", "content": "```repl\nprint(len(context))\n```"}],
}


def _lora_b(folder: Path) -> dict:
    from safetensors.torch import load_file

    weights = load_file(str(folder / "adapter" / "adapter_model.safetensors"))
    return {k: v for k, v in weights.items() if "lora_B" in k}


def _logits(model: Path, prompt: str, lora: Path | None = None) -> list[float]:
    llm = llama_cpp.Llama(
        model_path=str(model),
        lora_path=str(lora) if lora else None,
        n_ctx=256,
        logits_all=True,  # else llama-cpp-python keeps no scores to compare
        verbose=False,
    )
    llm.eval(_ids(llm, prompt))
    return list(llm.scores[llm.n_tokens - 1][:4096])


def _ids(llm: Any, prompt: str) -> list[int]:
    return llm.tokenize(prompt.encode(), special=True)


def _hf_logits(base: Path, prompt_ids: list[int], adapter: Path | None = None) -> list[float]:
    model, _ = load_base(str(base))
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    with torch.no_grad():
        return model(torch.tensor([prompt_ids])).logits[0, -1, :4096].tolist()


def test_sft_step_adapter_to_llama_cpp(tiny: Path, tiny_gguf: Path, tmp_path: Path, capsys) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    run = tmp_path / "run"
    opts = SFTOptions(steps=1, learning_rate=1e-2, rank=4, alpha=8, max_length=256, save_steps=1)
    record = train_sft(str(tiny), data, run, opts)
    assert record["steps"] == 1 and record["samples"] == 1
    assert math.isfinite(record["final_loss"]) and record["final_loss"] > 0
    log = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert log[0]["step"] == 1 and log[0]["learning_rate"] > 0
    assert (run / "loss.png").stat().st_size > 0
    # LoRA B starts at zero; one step moved it
    assert any(float(v.abs().sum()) > 0 for v in _lora_b(run).values())
    # resumable: a second run with more steps continues from the checkpoint
    record2 = train_sft(str(tiny), data, run, SFTOptions(**{**opts.__dict__, "steps": 2}))
    assert record2["resumed"] and record2["steps"] == 2

    base_gguf = tiny_gguf
    adapter = convert_adapter(run)
    prompt = "<|im_start|>user\nhow long is the context?<|im_end|>\n<|im_start|>assistant\n"
    plain, tuned = _logits(base_gguf, prompt), _logits(base_gguf, prompt, adapter)
    shift = [b - a for a, b in zip(plain, tuned, strict=True)]
    assert max(abs(d) for d in shift) > 1e-4
    # llama.cpp applies the adapter as training did (same tokens, same LoRA scale alpha/r):
    # its shift of the logits is the one the PEFT model shows
    ids = _ids(llama_cpp.Llama(model_path=str(base_gguf), vocab_only=True, verbose=False), prompt)
    hf_plain, hf_tuned = _hf_logits(tiny, ids), _hf_logits(tiny, ids, run / "adapter")
    assert max(abs(a - b) for a, b in zip(plain, hf_plain, strict=True)) < 1e-3
    hf_shift = [b - a for a, b in zip(hf_plain, hf_tuned, strict=True)]
    gap = max(abs(a - b) for a, b in zip(shift, hf_shift, strict=True))
    assert gap < 0.05 * max(abs(d) for d in hf_shift)

    register("tiny-tuned", str(base_gguf), adapter)
    spec = Registry().spec("tiny-tuned")
    assert spec.provider == "local" and spec.options["lora_path"] == str(adapter.resolve())
    assert cli_main(["models"]) == 0
    assert "tiny-tuned" in capsys.readouterr().out


def test_a_merged_adapter_is_one_gguf_that_runs_like_base_plus_lora(
    tiny: Path, tiny_gguf: Path, tmp_path: Path, rlmd_home: Path
) -> None:
    """``rlmd train convert --merge``: the adapter folded into the base, converted and
    quantised, is one plain GGUF (no LoRA at inference, so llama.cpp keeps its repacked CPU
    kernels) whose logits are those of base + adapter."""
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    run = tmp_path / "run"
    opts = SFTOptions(steps=1, learning_rate=1e-2, rank=4, alpha=8, max_length=256, save_steps=1)
    train_sft(str(tiny), data, run, opts)
    prompt = "<|im_start|>user\nhow long is the context?<|im_end|>\n<|im_start|>assistant\n"
    plain = _logits(tiny_gguf, prompt)
    with_lora = _logits(tiny_gguf, prompt, convert_adapter(run))
    shift = max(abs(a - b) for a, b in zip(plain, with_lora, strict=True))
    assert shift > 1e-4

    merged = merge_adapter(run, str(tiny), quant="f16")
    assert merged == run / "merged-f16.gguf" and not (run / "merge-tmp").exists()
    got = _logits(merged, prompt)
    assert max(abs(a - b) for a, b in zip(got, with_lora, strict=True)) < 0.05 * shift

    small = quantize(merged, tmp_path / "merged-q4_k_m.gguf", "q4_k_m")  # merge_adapter's last step
    assert small.stat().st_size < merged.stat().st_size
    assert all(math.isfinite(x) for x in _logits(small, prompt))

    register("tiny-merged", str(small), None, merged_from=str(run / "adapter"))
    spec = Registry().spec("tiny-merged")
    assert spec.provider == "local" and spec.model == str(small)
    assert "lora_path" not in spec.options


def _block_of(name: str) -> int:
    return int(name.split(".layers.")[1].split(".")[0])


def test_lora_on_the_top_blocks_only(tiny: Path, tiny_gguf: Path, tmp_path: Path) -> None:
    """``lora_layers=1`` on the 2-block tiny model: the lower block holds no adapter and runs
    with no autograd graph (its output never requires grad, so no backward pass runs through
    it); the top block's adapter is trained (loss finite, its B matrices moved from zero);
    the adapter converts to GGUF, llama.cpp loads it, and its shift of the logits is the
    PEFT model's."""
    from datasets import Dataset

    opts = SFTOptions(steps=1, learning_rate=1e-2, rank=4, alpha=8, max_length=256,
                      save_steps=1, lora_layers=1)  # fmt: skip
    assert not opts.gradient_checkpointing  # the default: the point of training the top only
    model, tok = load_base(str(tiny))
    graph: dict[int, list[bool]] = {0: [], 1: []}
    for i, block in enumerate(model.model.layers):
        block.register_forward_hook(
            lambda _m, _i, out, i=i: graph[i].append(
                (out[0] if isinstance(out, tuple) else out).requires_grad
            )
        )
    trainer = build_trainer(model, tok, Dataset.from_list([SAMPLE]), opts, tmp_path / "ck")
    # TRL defaults to bf16 autocast, which a CPU without bf16 instructions runs through a
    # scalar fallback: on a CPU, "auto" precision trains in float32
    assert not trainer.args.bf16 and not trainer.args.fp16
    trainer.train()
    assert graph == {0: [False], 1: [True]}
    adapted = {_block_of(n) for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapted == {1}

    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    run = tmp_path / "run"
    record = train_sft(str(tiny), data, run, opts)
    assert math.isfinite(record["final_loss"]) and record["final_loss"] > 0
    assert record["options"]["lora_layers"] == 1
    config = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert config["layers_to_transform"] == [1]
    b = _lora_b(run)
    assert b and {_block_of(k) for k in b} == {1}
    assert all(float(v.abs().sum()) > 0 for v in b.values())

    adapter = convert_adapter(run)
    prompt = "<|im_start|>user\nhow long is the context?<|im_end|>\n<|im_start|>assistant\n"
    plain, tuned = _logits(tiny_gguf, prompt), _logits(tiny_gguf, prompt, adapter)
    shift = [b - a for a, b in zip(plain, tuned, strict=True)]
    assert max(abs(d) for d in shift) > 1e-4
    ids = _ids(llama_cpp.Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False), prompt)
    hf_plain, hf_tuned = _hf_logits(tiny, ids), _hf_logits(tiny, ids, run / "adapter")
    hf_shift = [b - a for a, b in zip(hf_plain, hf_tuned, strict=True)]
    gap = max(abs(a - b) for a, b in zip(shift, hf_shift, strict=True))
    assert gap < 0.05 * max(abs(d) for d in hf_shift)

    # resuming with another adapter shape is refused before any training, and loses nothing
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    with pytest.raises(ValueError, match="layers_to_transform \\[1\\] there, None asked"):
        train_sft(
            str(tiny), data, run, SFTOptions(**{**opts.__dict__, "steps": 2, "lora_layers": 0})
        )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    # the same shape resumes
    assert train_sft(str(tiny), data, run, SFTOptions(**{**opts.__dict__, "steps": 2}))["resumed"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lora_layers", -1, "lora_layers must be >= 0"),
        ("threads", 0, "threads must be >= 1"),
        ("steps", 0, "steps must be >= 1"),
        ("precision", "fp16", "precision must be"),
        # numpy's seed range: transformers' set_seed refused these after the model loaded
        ("seed", -1, "seed must be an integer from 0 to 4294967295, got -1"),
        ("seed", 2**32, "seed must be an integer from 0 to 4294967295, got 4294967296"),
    ],  # fmt: skip
)
def test_sft_options_out_of_range_are_refused_before_loading(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    with pytest.raises(ValueError, match=message):  # the base does not exist: not loaded
        train_sft(str(tmp_path / "no-base"), data, tmp_path / "run", SFTOptions(**{field: value}))


GROUP = {
    "prompt": SAMPLE["prompt"],
    "completions": [SAMPLE["completion"], [{"role": "assistant", "content": "FINAL(3)"}]],
    "rewards": [1.0, 0.0],
}


def test_grpo_step_changes_the_adapter_and_continues(tiny: Path, tmp_path: Path) -> None:
    """One real group-relative step on the tiny model, LoRA on the top block only (as
    ``sft --lora-layers 1``); a second run with the same folder continues from the adapter
    and AdamW's state; another adapter shape is refused."""
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(GROUP) + "\n")
    run = tmp_path / "g"
    opts = GRPOOptions(steps=1, learning_rate=1e-2, lora_layers=1, threads=1, precision="fp32")
    got = train_grpo(str(tiny), data, run, opts)
    assert len(got["losses"]) == 1 and math.isfinite(got["losses"][0])
    assert (got["groups"], got["completions_dropped_too_long"], got["resumed"]) == (1, 0, False)
    lora_b = _lora_b(run)
    assert any(float(v.abs().sum()) > 0 for v in lora_b.values())
    assert {k.split(".layers.")[1].split(".")[0] for k in lora_b} == {"1"}  # top block only
    assert json.loads((run / "adapter" / "adapter_config.json").read_text())["r"] == 16
    assert (run / "optimizer.pt").exists()
    assert json.loads((run / "train.json").read_text())["options"]["lora_layers"] == 1

    again = train_grpo(str(tiny), data, run, opts)
    assert again["resumed"] and [json.loads(x)["step"] for x in
                                 (run / "log.jsonl").read_text().splitlines()] == [1, 2]  # fmt: skip
    state = torch.load(run / "optimizer.pt")
    assert all(int(s["step"]) == 2 for s in state["state"].values())  # Adam's state carried on
    with pytest.raises(ValueError, match="layers_to_transform \\[1\\] there, None asked"):
        train_grpo(str(tiny), data, run, GRPOOptions(**{**opts.__dict__, "lora_layers": 0}))

    with pytest.raises(ValueError, match="no group whose rewards differ"):
        data.write_text(json.dumps({**GROUP, "rewards": [1.0, 1.0]}) + "\n")
        train_grpo(str(tiny), data, tmp_path / "h", GRPOOptions(steps=1))


def test_grpo_max_length_drops_long_completions_never_cuts_them(tiny: Path, tmp_path: Path) -> None:
    """``max_length`` was accepted and never applied: a completion over it is now dropped
    (scoring a cut turn would score a reply the model never ended there), and a group left
    with one reward with it; none left is refused, naming the length that keeps them."""
    from transformers import AutoTokenizer

    from rlmd.train.grpo import prepare_groups, sample_ids

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    long = [{"role": "assistant", "content": "```repl\n" + "print(1)\n" * 80 + "```"}]
    group = {**GROUP, "completions": [SAMPLE["completion"], long, GROUP["completions"][1]],
             "rewards": [1.0, 0.0, 1.0]}  # fmt: skip
    short = len(sample_ids(tokenizer, SAMPLE["prompt"], SAMPLE["completion"])[0])
    longest = len(sample_ids(tokenizer, SAMPLE["prompt"], long)[0])
    assert short < longest
    kept, report = prepare_groups(tokenizer, [group], longest)
    assert [g["rewards"] for g in kept] == [[1.0, 0.0, 1.0]]
    kept, report = prepare_groups(tokenizer, [group], longest - 1)
    assert kept == [] and report["completions_dropped_too_long"] == 1  # rewards 1, 1 left
    assert report["longest"] == longest
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(group) + "\n")
    with pytest.raises(ValueError, match=f"within {longest - 1} tokens.*--max-length to {longest}"):
        train_grpo(str(tiny), data, tmp_path / "g", GRPOOptions(max_length=longest - 1))


def test_grpo_loss_is_the_advantage_weighted_logprob_and_each_step_is_logged(
    tiny: Path, tmp_path: Path
) -> None:
    """The first step's loss is ``-mean_i(A_i * mean log p(completion_i))`` over the
    completions with a non-zero advantage, computed here with the base model (a fresh
    LoRA's B is zero) and full logits: so the per-completion backward passes and the
    completion-only vocabulary projection (``logits_to_keep``) score what they should.
    Each step's log line and progress record name the group's task, rewards and
    advantages."""
    from rlmd.train.grpo import advantages, completion_logprob

    third = [{"role": "assistant", "content": "```repl\nprint(context[:10])\n```"}]
    group = {**GROUP, "task_id": "t-1", "completions": [*GROUP["completions"], third],
             "rewards": [1.0, 0.0, 0.5]}  # fmt: skip
    adv = advantages(group["rewards"])
    assert adv[2] == 0 and adv[0] == pytest.approx(-adv[1]) and adv[0] == pytest.approx(1.0, 1e-3)
    assert advantages([0.25, 0.25]) == [0.0, 0.0]

    model, tokenizer = load_base(str(tiny))
    expected = 0.0
    with torch.no_grad():
        for completion, a in zip(group["completions"], adv, strict=True):
            ids, head = sample_ids(tokenizer, group["prompt"], completion)
            x = torch.tensor([ids])
            logp = torch.log_softmax(model(input_ids=x).logits[0].float(), dim=-1)
            full = logp[head - 1 : -1].gather(1, x[0, head:].unsqueeze(1)).mean()
            assert float(completion_logprob(model, ids, head)) == pytest.approx(float(full), 1e-5)
            expected -= a * float(full) / 2  # two completions have a non-zero advantage
    from peft import get_peft_model

    from rlmd.train.sft import lora_config

    peft = get_peft_model(model, lora_config(model, GRPOOptions(lora_layers=1)))
    with torch.no_grad():  # the wrapped model passes logits_to_keep on: 3 positions projected
        assert peft(input_ids=torch.tensor([ids]), logits_to_keep=3).logits.shape[1] == 3

    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(group) + "\n")
    seen: list[dict] = []
    opts = GRPOOptions(steps=1, learning_rate=1e-2, lora_layers=1, threads=1, precision="fp32",
                       clip=0)  # fmt: skip
    got = train_grpo(str(tiny), data, tmp_path / "g", opts, progress=seen.append)
    assert got["losses"][0] == pytest.approx(expected, rel=1e-4)
    logged = [json.loads(x) for x in (tmp_path / "g" / "log.jsonl").read_text().splitlines()]
    assert logged == seen and len(logged) == 1
    (g,) = logged[0]["groups"]
    assert g["task_id"] == "t-1" and g["rewards"] == [1.0, 0.0, 0.5]
    assert g["advantages"] == [round(a, 4) for a in adv]
    lengths = [sample_ids(tokenizer, group["prompt"], c) for c in group["completions"]]
    assert g["prompt_tokens"] == lengths[0][1]
    assert g["completion_tokens"] == [len(ids) - head for ids, head in lengths]
    assert g["ratios"] == [None, None, None]  # no clip, no ratio
    assert logged[0]["step_seconds"] > 0 and (got["steps_done"], got["stopped"]) == (1, "steps")


def test_the_clipped_surrogate_stops_pulling_a_token_past_the_clip() -> None:
    """GRPO's clip: a token whose probability already rose more than ε over the run's
    start gets no more push up from a positive advantage (nor one that fell, from a
    negative one); inside the clip the gradient is the unclipped one."""
    from rlmd.train.grpo import clipped_surrogate

    old = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    now = torch.log(torch.tensor([0.5, 0.7, 0.3])).requires_grad_()  # ratios 1, 1.4, 0.6
    clipped_surrogate(now, old, 1.0, 0.2).backward()
    assert now.grad[0] > 0 and now.grad[1] == 0 and now.grad[2] > 0
    now.grad = None
    clipped_surrogate(now, old, -1.0, 0.2).backward()
    assert now.grad[0] < 0 and now.grad[1] < 0 and now.grad[2] == 0


def test_grpo_clips_against_the_policy_at_the_runs_start(tiny: Path, tmp_path: Path) -> None:
    """By default (clip 0.2) each scored completion's ratio is logged: 1.0 at the first
    step (the policy is still the run's start), then it moves; a zero advantage has none.
    The first step's clipped loss is -mean(A) over the scored completions: 0."""
    third = [{"role": "assistant", "content": "```repl\nprint(context[:10])\n```"}]
    group = {**GROUP, "task_id": "t-1", "completions": [*GROUP["completions"], third],
             "rewards": [1.0, 0.0, 0.5]}  # fmt: skip
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(group) + "\n")
    opts = GRPOOptions(steps=3, learning_rate=1e-3, lora_layers=1, threads=1, precision="fp32")
    got = train_grpo(str(tiny), data, tmp_path / "g", opts)
    logged = [json.loads(x) for x in (tmp_path / "g" / "log.jsonl").read_text().splitlines()]
    ratios = [r["groups"][0]["ratios"] for r in logged]
    assert ratios[0] == [1.0, 1.0, None] and got["losses"][0] == pytest.approx(0, abs=1e-6)
    for later in ratios[1:]:  # the winner's tokens more likely, the loser's less
        assert later[0] > 1.0 > later[1] and later[2] is None
    assert ratios[2][0] > ratios[1][0] and ratios[2][1] < ratios[1][1]
    assert got["options"]["clip"] == 0.2


def test_grpo_max_seconds_ends_the_run_after_a_step_and_saves(
    tiny: Path, tmp_path: Path, rlmd_home: Path, capsys
) -> None:
    """``--max-seconds``: a budget smaller than one step stops the run after its first step
    (never before it), with the adapter, ``train.json`` and the reason written; the CLI
    prints one line per step."""
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps({**GROUP, "task_id": "t-1"}) + "\n")
    args = ["train", "grpo", "--base", str(tiny), "--data", str(data), "--out", "g",
            "--steps", "5", "--max-seconds", "1e-9", "--lora-layers", "1", "--threads", "1",
            "--precision", "fp32", "--no-convert"]  # fmt: skip
    assert cli_main(args) == 0
    run = rlmd_home / "train" / "g"
    record = json.loads((run / "train.json").read_text())
    assert (record["steps"], record["steps_done"], record["stopped"]) == (5, 1, "max_seconds")
    assert len((run / "log.jsonl").read_text().splitlines()) == 1
    assert (run / "adapter" / "adapter_model.safetensors").exists()
    assert "step 1: loss" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lora_layers", -1, "lora_layers must be >= 0"),
        ("threads", 0, "threads must be >= 1"),
        ("max_length", 0, "max_length must be >= 1"),
        ("max_seconds", 0, "max_seconds must be a finite number > 0"),
        ("max_seconds", float("nan"), "max_seconds must be a finite number > 0"),
        ("clip", 1.0, "clip must be a number in \\[0, 1\\)"),
        ("clip", -0.1, "clip must be a number in \\[0, 1\\)"),
        ("groups_per_step", 0, "groups_per_step must be >= 1"),
        ("precision", "fp16", "precision must be"),
        # torch.manual_seed raised "Overflow when unpacking long long" for 2**64
        ("seed", 2**64, "seed must be an integer from 0 to 4294967295"),
        ("seed", -1, "seed must be an integer from 0 to 4294967295"),
    ],  # fmt: skip
)
def test_grpo_options_out_of_range_are_refused_before_loading(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(GROUP) + "\n")
    with pytest.raises(ValueError, match=message):  # the base does not exist: not loaded
        train_grpo(str(tmp_path / "no-base"), data, tmp_path / "run", GRPOOptions(**{field: value}))


def test_grpo_cli_passes_the_adapter_options(tiny: Path, tmp_path: Path, rlmd_home: Path) -> None:
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(GROUP) + "\n")
    args = ["train", "grpo", "--base", str(tiny), "--data", str(data), "--out", "g",
            "--lora-layers", "1", "--threads", "1", "--precision", "fp32", "--max-length", "512",
            "--groups-per-step", "1", "--save-steps", "1", "--seed", "7", "--no-convert"]  # fmt: skip
    assert cli_main(args) == 0
    options = json.loads((rlmd_home / "train" / "g" / "train.json").read_text())["options"]
    assert {k: options[k] for k in ("lora_layers", "threads", "precision", "max_length", "seed")} == {
        "lora_layers": 1, "threads": 1, "precision": "fp32", "max_length": 512, "seed": 7}  # fmt: skip


def test_sft_seed_repeats_a_run_and_another_seed_changes_it(
    tiny: Path, tmp_path: Path, rlmd_home: Path
) -> None:
    """``rlmd train sft --seed N``: the same seed and data give the same adapter bit for bit
    (how a run is repeated), another seed another one (how run-to-run spread is measured)."""
    from safetensors.numpy import load_file

    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")

    def adapter(out: str, seed: int) -> dict[str, Any]:
        args = ["train", "sft", "--base", str(tiny), "--data", str(data), "--out", out,
                "--steps", "1", "--lora-layers", "1", "--threads", "1", "--precision", "fp32",
                "--max-length", "256", "--save-steps", "1", "--seed", str(seed), "--no-convert"]  # fmt: skip
        assert cli_main(args) == 0
        run = rlmd_home / "train" / out
        assert json.loads((run / "train.json").read_text())["options"]["seed"] == seed
        return load_file(run / "adapter" / "adapter_model.safetensors")

    first, again, other = adapter("a", 1), adapter("b", 1), adapter("c", 2)
    assert first.keys() == again.keys() == other.keys()
    assert all((first[k] == again[k]).all() for k in first)
    assert any((first[k] != other[k]).any() for k in first)


def test_resuming_under_another_seed_is_refused_before_the_model_loads(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The epoch's sample order follows the seed: resuming a run's checkpoints under another
    seed would repeat some samples and skip others (review20). It is refused, naming both
    seeds, before the base loads; the run's own seed resumes."""
    import rlmd.train.sft as sft_mod

    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    run = tmp_path / "run"
    opts = SFTOptions(steps=1, learning_rate=1e-2, rank=4, alpha=8, max_length=256,
                      save_steps=1, lora_layers=1, threads=1, precision="fp32", seed=3)  # fmt: skip
    train_sft(str(tiny), data, run, opts)
    assert json.loads((run / "options.json").read_text())["seed"] == 3
    real_load = sft_mod.load_base
    loads: list[str] = []
    monkeypatch.setattr(
        sft_mod, "load_base", lambda *a, **k: loads.append("x") or real_load(*a, **k)
    )
    with pytest.raises(ValueError, match="trained with --seed 3, not 4"):
        train_sft(str(tiny), data, run, SFTOptions(**{**asdict(opts), "seed": 4}))
    assert loads == [] and json.loads((run / "options.json").read_text())["seed"] == 3
    record = train_sft(str(tiny), data, run, SFTOptions(**{**asdict(opts), "steps": 2}))
    assert loads == ["x"] and record["resumed"] and record["steps"] == 2


NEEDLE = "filler line\n" * 40 + "The secret number is 4417.\n" + "more filler\n" * 40


def _look_then_answer(messages: list[dict[str, Any]]) -> str:
    if not any(m["role"] == "assistant" for m in messages):
        return "I search.\n```repl\nimport re\nm = re.search(r'number is (\\d+)', context)\nprint(m.group(1))\n```"
    return "It is printed above.\n```repl\nFINAL(m.group(1))\n```"


def test_training_text_is_the_inference_prompt_plus_target(
    tiny: Path, tiny_gguf: Path, tmp_path: Path
) -> None:
    """A rollout through the real engine and sandbox, exported and tokenised for training,
    is token for token what llama.cpp evaluates at inference (the local provider, the GGUF's
    chat template) followed by the target turn and <|im_end|>, with the loss on the target
    only; for every turn, not only the first."""
    task = {"id": "t", "question": "What is the secret number?", "context": NEEDLE,
            "answer": "4417", "scorer": "exact"}  # fmt: skip
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    reg = Registry()
    reg.add(ModelSpec("script", "scripted", "script", options={"callable": _look_then_answer}))
    with Store(tmp_path / "rlmd.db") as store:
        opts = RolloutOptions(model="script", samples=1, rollout_set="s")
        rows = asyncio.run(
            run_rollouts(load_tasks(tmp_path / "tasks.jsonl"), opts, registry=reg, store=store)
        )
        assert rows[0]["reward"] == 1.0
        samples, _ = sft_samples(store, ExportFilters())
    assert [s["turn"] for s in samples] == [0, 1]

    from datasets import Dataset

    model, tokenizer = load_base(str(tiny))
    ds = Dataset.from_list(
        [{"prompt": s["prompt"], "completion": s["completion"]} for s in samples]
    )
    opts = SFTOptions(steps=1, rank=4, alpha=8, max_length=4_096)
    trained = build_trainer(model, tokenizer, ds, opts, tmp_path / "ck").train_dataset

    local = LocalModel(ModelSpec("tiny", "local", str(tiny_gguf), options={"n_ctx": 4_096}))
    try:
        for sample, row in zip(samples, trained, strict=True):
            c = asyncio.run(local.complete(sample["prompt"], max_tokens=1))
            llm = local._llm
            seen = [int(t) for t in llm.input_ids[: c.input_tokens]]
            target = sample["completion"][0]["content"] + "<|im_end|>\n"
            target_ids = llm.tokenize(target.encode(), add_bos=False, special=True)
            assert row["input_ids"] == seen + target_ids
            assert row["labels"] == [-100] * len(seen) + target_ids
            # GRPO scores the same text (rlmd train grpo)
            got = sample_ids(tokenizer, sample["prompt"], sample["completion"])
            assert got == (seen + target_ids, len(seen))
    finally:
        asyncio.run(local.aclose())


def test_a_length_cap_that_keeps_only_first_turns_is_refused(tiny: Path) -> None:
    """Prompts grow with the history: a tight cap silently keeps only opening turns (the
    cause of a fine-tune that repeated its first cell and never answered)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    history = [{"role": "assistant", "content": "```repl\nprint(1)\n```"},
               {"role": "user", "content": "[cell 1]\n1\n" + "output line\n" * 60}]  # fmt: skip
    first = {**SAMPLE, "turn": 0}
    later = {"prompt": SAMPLE["prompt"] + history, "turn": 1,
             "completion": [{"role": "assistant", "content": "```repl\nFINAL(1)\n```"}]}  # fmt: skip
    report = length_report(tokenizer, [first, later], 100)
    assert report["kept"] == [True, False]
    assert report["by_turn"] == {0: [1, 1], 1: [0, 1]} and report["answering"] == [0, 1]
    with pytest.raises(ValueError, match=f"only first turns.*--max-length to {report['longest']}"):
        check_lengths(report, 100)
    roomy = length_report(tokenizer, [first, later], report["longest"])
    assert roomy["kept"] == [True, True]
    check_lengths(roomy, report["longest"])


def test_a_gguf_base_is_dequantised_once_then_loaded_from_its_copy(
    tiny_gguf: Path, rlmd_home: Path, monkeypatch
) -> None:
    from transformers import AutoModelForCausalLM

    from rlmd.train.sft import dequantised_cache

    loads: list[tuple[str, Any]] = []
    real = AutoModelForCausalLM.from_pretrained

    def spy(folder, *args, **kw):
        loads.append((str(folder), kw.get("gguf_file")))
        return real(folder, *args, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    first, _ = load_base(str(tiny_gguf))
    cache = dequantised_cache(tiny_gguf)
    assert loads == [(str(tiny_gguf.parent), tiny_gguf.name)]
    assert (cache / "rlmd-complete").exists() and str(cache).startswith(str(rlmd_home))
    second, tokenizer = load_base(str(tiny_gguf))
    assert loads[1] == (str(cache), None)  # the copy, not the GGUF again
    assert tokenizer.pad_token is not None
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a copy left half-written (no completion mark) is redone from the GGUF
    (cache / "rlmd-complete").unlink()
    load_base(str(tiny_gguf))
    assert loads[2] == (str(tiny_gguf.parent), tiny_gguf.name)
    assert (cache / "rlmd-complete").exists()


def test_a_failed_quantisation_keeps_the_gguf_an_earlier_merge_registered(
    tiny: Path, tmp_path: Path, rlmd_home: Path, monkeypatch
) -> None:
    """A quantisation that fails half-way (a full disk) writes into the work folder, not over
    ``RUN/merged-QUANT.gguf``, which a registered ``NAME-merged`` model still points to."""
    from rlmd.train import gguf_lora

    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(SAMPLE) + "\n")
    run = tmp_path / "run"
    opts = SFTOptions(steps=1, learning_rate=1e-2, rank=4, alpha=8, max_length=256)
    train_sft(str(tiny), data, run, opts)
    earlier = run / "merged-q4_k_m.gguf"
    earlier.write_bytes(b"the GGUF of an earlier merge")

    def half_written(src: Path, dst: Path, quant: str) -> Path:
        Path(dst).write_bytes(b"half")
        raise gguf_lora.ConverterError("No space left on device")

    monkeypatch.setattr(gguf_lora, "quantize", half_written)
    with pytest.raises(gguf_lora.ConverterError, match="No space left"):
        merge_adapter(run, str(tiny), quant="q4_k_m")
    assert earlier.read_bytes() == b"the GGUF of an earlier merge"
    assert not (run / "merge-tmp").exists()

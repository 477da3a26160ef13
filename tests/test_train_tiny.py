"""One real optimisation step (SFT and the group-relative update) on a tiny, randomly
initialised Qwen2-architecture model, then the adapter through llama.cpp's converter into
llama.cpp, as a registry model.

The tiny model borrows the Qwen2.5 tokenizer from the pulled 0.5B GGUF (CI pulls it:
``RLMD_TEST_MODEL``), so llama.cpp's converter knows its vocabulary; its weights are random
(2 layers, width 32). Training never runs in CI beyond this model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")
llama_cpp = pytest.importorskip("llama_cpp")

from rlmd.cli.main import main as cli_main  # noqa: E402
from rlmd.models.registry import Registry  # noqa: E402
from rlmd.train.gguf_lora import convert_adapter, convert_model, register  # noqa: E402
from rlmd.train.grpo import GRPOOptions, train_grpo  # noqa: E402
from rlmd.train.sft import SFTOptions, train_sft  # noqa: E402

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
        max_position_embeddings=2_048,
        tie_word_embeddings=True,
    )
    folder = tmp_path_factory.mktemp("tiny") / "base"
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


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
    llm.eval(llm.tokenize(prompt.encode()))
    return list(llm.scores[llm.n_tokens - 1][:4096])


def test_sft_step_adapter_to_llama_cpp(tiny: Path, tmp_path: Path, capsys) -> None:
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

    base_gguf = convert_model(tiny, tmp_path / "tiny.gguf")
    adapter = convert_adapter(run)
    prompt = "<|im_start|>user\nhow long is the context?<|im_end|>\n<|im_start|>assistant\n"
    plain, tuned = _logits(base_gguf, prompt), _logits(base_gguf, prompt, adapter)
    assert max(abs(a - b) for a, b in zip(plain, tuned, strict=True)) > 1e-4

    register("tiny-tuned", str(base_gguf), adapter)
    spec = Registry().spec("tiny-tuned")
    assert spec.provider == "local" and spec.options["lora_path"] == str(adapter.resolve())
    assert cli_main(["models"]) == 0
    assert "tiny-tuned" in capsys.readouterr().out


def test_grpo_step_changes_the_adapter(tiny: Path, tmp_path: Path) -> None:
    group = {
        "prompt": SAMPLE["prompt"],
        "completions": [SAMPLE["completion"], [{"role": "assistant", "content": "FINAL(3)"}]],
        "rewards": [1.0, 0.0],
    }
    data = tmp_path / "grpo.jsonl"
    data.write_text(json.dumps(group) + "\n")
    got = train_grpo(str(tiny), data, tmp_path / "g", GRPOOptions(steps=1, learning_rate=1e-2))
    assert len(got["losses"]) == 1 and math.isfinite(got["losses"][0])
    assert any(float(v.abs().sum()) > 0 for v in _lora_b(tmp_path / "g").values())
    with pytest.raises(ValueError, match="no group whose rewards differ"):
        data.write_text(json.dumps({**group, "rewards": [1.0, 1.0]}) + "\n")
        train_grpo(str(tiny), data, tmp_path / "h", GRPOOptions(steps=1))

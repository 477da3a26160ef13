"""A small group-relative policy update (GRPO-style) over exported rollout groups.

Input: ``rlmd train export --format grpo`` groups (``{"prompt", "completions", "rewards"}``:
several samples of the same task's first root turn and their rollouts' rewards). Per group
the advantage of sample ``i`` is ``(r_i - mean(r)) / (std(r) + 1e-4)``; the loss is
``-mean_i(A_i * mean log p(completion_i | prompt))`` over the completion's tokens, one AdamW
step on LoRA weights per ``groups_per_step`` groups. No KL term and no clipping: the samples
come from rollouts already recorded (an offline, single-update-per-sample variant), which is
what a CPU can afford; TRL's ``GRPOTrainer`` is the online choice on a GPU.

The output folder has the layout of :mod:`rlmd.train.sft` (``adapter/``, ``base/``,
``log.jsonl``, ``loss.png``), so :func:`rlmd.train.gguf_lora.convert_adapter` takes it; a
second run with the same folder continues from its adapter.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmd.train.sft import load_base, plot_log, save_base_config


@dataclass
class GRPOOptions:
    steps: int = 1
    learning_rate: float = 1e-4
    rank: int = 16
    alpha: int = 32
    groups_per_step: int = 1
    max_length: int = 1_024
    device: str = "cpu"
    seed: int = 0


def completion_logprob(model: Any, tokenizer: Any, prompt: list, completion: list) -> Any:
    """Mean log-probability (a 0-d tensor with grad) of ``completion``'s tokens after
    ``prompt``, both chat message lists, under the model's chat template."""
    import torch

    def ids(messages: list, gen: bool) -> list[int]:
        out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen)
        return list(out["input_ids"] if isinstance(out, Mapping) else out)

    head = ids(prompt, True)
    full = ids(prompt + completion, False)
    if full[: len(head)] != head or len(full) <= len(head):
        raise ValueError("the chat template does not extend the prompt with the completion")
    x = torch.tensor([full], device=model.device)
    logits = model(input_ids=x).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    target = x[0, 1:]
    token_logp = logp.gather(1, target.unsqueeze(1)).squeeze(1)
    return token_logp[len(head) - 1 :].mean()


def train_grpo(
    base: str, data: str | Path, out: str | Path, opts: GRPOOptions | None = None
) -> dict[str, Any]:
    """Run ``opts.steps`` group-relative updates of LoRA weights on ``base`` over the groups in
    ``data`` (JSONL) into ``out``.

    Returns:
        ``{"steps", "losses", "groups", "seconds"}``.

    Raises:
        ValueError: no group with two or more different rewards.
    """
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    opts = opts or GRPOOptions()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(opts.seed)
    groups = [json.loads(x) for x in Path(data).read_text("utf-8").splitlines() if x.strip()]
    groups = [g for g in groups if len(set(g["rewards"])) > 1]
    if not groups:
        raise ValueError(f"{data}: no group whose rewards differ (nothing to learn from)")
    model, tokenizer = load_base(base, opts.device)
    save_base_config(model, out / "base")
    if (out / "adapter" / "adapter_config.json").exists():
        model = PeftModel.from_pretrained(model, out / "adapter", is_trainable=True)
    else:
        lora = LoraConfig(
            r=opts.rank, lora_alpha=opts.alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        model = get_peft_model(model, lora)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=opts.learning_rate)
    log_path = out / "log.jsonl"
    started = time.monotonic()
    done = sum(1 for _ in open(log_path)) if log_path.exists() else 0
    losses = []
    for step in range(opts.steps):
        batch = [
            groups[((done + step) * opts.groups_per_step + j) % len(groups)]
            for j in range(opts.groups_per_step)
        ]
        optim.zero_grad()
        total = torch.zeros((), device=model.device)
        n = 0
        for g in batch:
            r = torch.tensor(g["rewards"], dtype=torch.float32)
            adv = (r - r.mean()) / (r.std() + 1e-4)
            for completion, a in zip(g["completions"], adv.tolist(), strict=True):
                if a == 0:
                    continue
                lp = completion_logprob(model, tokenizer, g["prompt"], completion)
                total = total - a * lp
                n += 1
        loss = total / max(n, 1)
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
        with open(log_path, "a", encoding="utf-8") as f:
            rec = {
                "step": done + step + 1,
                "loss": losses[-1],
                "learning_rate": opts.learning_rate,
                "seconds": round(time.monotonic() - started, 2),
            }
            f.write(json.dumps(rec) + "\n")
    model.save_pretrained(out / "adapter")
    plot_log(log_path, out / "loss.png")
    return {
        "steps": opts.steps,
        "losses": losses,
        "groups": len(groups),
        "seconds": round(time.monotonic() - started, 1),
    }

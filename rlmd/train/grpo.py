"""A small group-relative policy update (GRPO-style) over exported rollout groups.

Input: ``rlmd train export --format grpo`` groups (``{"prompt", "completions", "rewards"}``:
several samples of the same task's first root turn and their rollouts' rewards). Per group
the advantage of sample ``i`` is ``(r_i - mean(r)) / (std(r) + 1e-4)``; the loss is
``-mean_i(A_i * mean log p(completion_i | prompt))`` over the completion's tokens, one AdamW
step on LoRA weights per ``groups_per_step`` groups. **Clipped** (``clip`` ε, default 0.2,
GRPO's and PPO's surrogate): per token, ``min(ρ·A, clip(ρ, 1-ε, 1+ε)·A)`` with ``ρ`` the
token's probability now over its probability under the policy at the start of this run (the
base on a fresh run; computed once per completion before the first step), so a completion
stops pulling once its tokens moved ε away. Without it (``clip`` 0) the loss is the plain
``-A·mean log p`` above, and repeated passes over a few groups push a winner's first turn
without bound: session 14's 27 steps over 4 groups made the 0.5B answer every turn with
``1332``, one winner's content-free first turn. A completion with advantage 0 is not
scored (it adds nothing to the gradient); each scored completion's backward pass runs before
the next one's forward (gradients accumulate), so memory holds one completion's graph, and
the vocabulary projection runs on the completion's positions only (``logits_to_keep``): the
prompt's ~1,000 positions skip it. No KL term and no clipping: the samples
come from rollouts already recorded (an offline, single-update-per-sample variant), which is
what a CPU can afford; TRL's ``GRPOTrainer`` is the online choice on a GPU.

**The text scored** is the one :mod:`rlmd.train.sft` trains on (:func:`sample_ids`): the
prompt as the base's chat template renders it with the generation prompt, which is token for
token what llama.cpp evaluates at inference through the local provider (the GGUF's own
template; ``tests/test_train_tiny.py`` checks both), then the completion and ``<|im_end|>``.
A completion whose text is over ``max_length`` tokens is dropped, never cut (a cut turn
would be scored as if the model had stopped there); a group left with one reward is dropped.

**Adapter and cost**: as ``sft`` (:class:`GRPOOptions`): LoRA on the top ``lora_layers``
blocks (:func:`rlmd.train.sft.lora_config`), ``threads``, ``precision``.

**Per step** ``log.jsonl`` holds ``{"step", "loss", "learning_rate", "seconds" (since the
run's start), "step_seconds", "groups": [{"task_id", "rewards", "advantages",
"prompt_tokens", "completion_tokens", "ratios"}]}`` (``ratios``: each completion's mean
``ρ`` before the step, 1.0 on the first; ``null`` for advantage 0 or without ``clip``); ``progress`` (the CLI prints it) gets the same
record. ``max_seconds`` ends the run early, after the step after which another step of the
last one's length would pass it (at least one step runs); ``train.json`` says so
(``"stopped": "max_seconds"``).

The output folder has the layout of :mod:`rlmd.train.sft` (``adapter/``, ``base/``,
``log.jsonl``, ``loss.png``, ``train.json``), so :func:`rlmd.train.gguf_lora.convert_adapter`
takes it. It also keeps ``optimizer.pt`` (AdamW's state): a second run with the same folder
continues from the adapter and the optimizer state, at the next group; one with another
adapter shape (rank, alpha, blocks) is refused. The adapter and optimizer state are saved
every ``save_steps`` steps and at the end.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlmd.train.datafile import read_groups
from rlmd.train.sft import (
    check_adapter_options,
    check_adapter_shape,
    load_base,
    lora_config,
    plot_log,
    save_base_config,
    uses_bf16,
)


@dataclass
class GRPOOptions:
    """Knobs of :func:`train_grpo` (the adapter ones as :class:`rlmd.train.sft.SFTOptions`).

    ``max_length``: the most tokens (prompt + completion) a scored completion may have.
    ``groups_per_step``: groups per optimizer step. ``save_steps``: save the adapter and the
    optimizer state every N steps. ``lora_layers``: LoRA on the top N blocks (``None``/0:
    all). ``threads``: torch CPU threads (``None``: torch's default). ``precision``:
    ``"fp32"``, ``"bf16"`` (autocast) or ``"auto"`` (bf16 on CUDA, fp32 elsewhere).
    ``max_seconds``: a wall-clock budget in seconds for the steps (``None``: none; see the
    module docstring). ``clip``: the surrogate's ε (0: the unclipped loss)."""

    steps: int = 1
    learning_rate: float = 1e-4
    rank: int = 16
    alpha: int = 32
    groups_per_step: int = 1
    max_length: int = 2_048
    device: str = "cpu"
    seed: int = 0
    save_steps: int = 5
    lora_layers: int | None = 8
    threads: int | None = None
    precision: str = "auto"
    max_seconds: float | None = None
    clip: float = 0.2


def check_options(opts: GRPOOptions) -> None:
    """Raise ``ValueError`` for options no run can use (before minutes of loading):
    ``steps``, ``rank``, ``alpha``, ``groups_per_step``, ``max_length`` or ``save_steps``
    below 1, ``max_seconds`` not a finite number above 0, ``clip`` outside [0, 1), and as
    :func:`rlmd.train.sft.check_adapter_options`."""
    check_adapter_options(
        opts, ("steps", "rank", "alpha", "groups_per_step", "max_length", "save_steps")
    )
    budget = opts.max_seconds
    if budget is not None and not (
        isinstance(budget, int | float) and math.isfinite(budget) and budget > 0
    ):
        raise ValueError(f"max_seconds must be a finite number > 0, got {budget!r}")
    if not (isinstance(opts.clip, int | float) and 0 <= opts.clip < 1):
        raise ValueError(f"clip must be a number in [0, 1), got {opts.clip!r}")


def sample_ids(tokenizer: Any, prompt: list, completion: list) -> tuple[list[int], int]:
    """``(token ids, prompt length)`` of ``prompt`` + ``completion`` (chat message lists) as
    training sees them: the prompt rendered by the chat template with the generation prompt
    (what llama.cpp evaluates), then the completion's tokens and ``<|im_end|>``, as TRL's
    ``SFTTrainer`` tokenises a prompt-completion sample.

    Raises:
        ValueError: the template's rendering of prompt + completion does not begin with its
            rendering of the prompt (the completion could not be scored on its own)."""

    def ids(messages: list, gen: bool) -> list[int]:
        out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen)
        return list(out["input_ids"] if isinstance(out, Mapping) else out)

    head = ids(prompt, True)
    full = ids(prompt + completion, False)
    if full[: len(head)] != head or len(full) <= len(head):
        raise ValueError("the chat template does not extend the prompt with the completion")
    return full, len(head)


def token_logprobs(model: Any, ids: list[int], prompt_len: int) -> Any:
    """Log-probabilities (a 1-d tensor with grad) of the tokens of ``ids`` after the first
    ``prompt_len`` (see :func:`sample_ids`). Only the positions that predict those tokens go
    through the vocabulary projection (``logits_to_keep``)."""
    import torch

    x = torch.tensor([ids], device=model.device)
    keep = len(ids) - prompt_len + 1  # the last prompt position predicts the first token
    logits = model(input_ids=x, logits_to_keep=keep).logits[0, -keep:-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    target = x[0, prompt_len:]
    return logp.gather(1, target.unsqueeze(1)).squeeze(1)


def completion_logprob(model: Any, ids: list[int], prompt_len: int) -> Any:
    """Mean log-probability (a 0-d tensor with grad) of the completion's tokens
    (:func:`token_logprobs`)."""
    return token_logprobs(model, ids, prompt_len).mean()


def clipped_surrogate(logp: Any, old: Any, advantage: float, clip: float) -> Any:
    """GRPO's clipped objective for one completion (a 0-d tensor to maximise): the mean over
    tokens of ``min(ρ·A, clip(ρ, 1-clip, 1+clip)·A)``, ``ρ = exp(logp - old)``; its gradient
    is 0 for a token already moved past the clip in the advantage's direction."""
    import torch

    ratio = torch.exp(logp - old)
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
    return torch.minimum(ratio * advantage, clipped * advantage).mean()


def advantages(rewards: list[float]) -> list[float]:
    """Group-relative advantages: ``(r_i - mean) / (std + 1e-4)``, ``std`` the sample standard
    deviation (n - 1), as ``torch.std``; all 0 when the rewards are all equal."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    return [(r - mean) / (std + 1e-4) for r in rewards]


def prepare_groups(tokenizer: Any, groups: list[dict], max_length: int) -> tuple[list[dict], dict]:
    """The groups to learn from, each completion tokenised (:func:`sample_ids`): completions
    over ``max_length`` tokens dropped, then groups whose rewards no longer differ.

    Returns:
        ``(groups, report)``: each group ``{"task_id", "ids": [(ids, prompt_len)],
        "rewards": [...]}``;
        report ``{"groups": kept, "groups_in": total, "completions_dropped_too_long": n,
        "longest": tokens}``."""
    kept, dropped, longest = [], 0, 0
    for g in groups:
        ids, rewards = [], []
        for completion, reward in zip(g["completions"], g["rewards"], strict=True):
            full, head = sample_ids(tokenizer, g["prompt"], completion)
            longest = max(longest, len(full))
            if len(full) > max_length:
                dropped += 1
                continue
            ids.append((full, head))
            rewards.append(float(reward))
        if len(set(rewards)) > 1:
            kept.append({"task_id": g.get("task_id"), "ids": ids, "rewards": rewards})
    report = {"groups": len(kept), "groups_in": len(groups),
              "completions_dropped_too_long": dropped, "longest": longest}  # fmt: skip
    return kept, report


def train_grpo(
    base: str,
    data: str | Path,
    out: str | Path,
    opts: GRPOOptions | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``opts.steps`` group-relative updates of LoRA weights on ``base`` over the groups in
    ``data`` (JSONL) into ``out`` (continuing from its adapter and optimizer state, if any);
    fewer when ``opts.max_seconds`` runs out. ``progress`` gets each step's log record.

    Returns:
        The ``train.json`` record: ``{"base", "data", "steps" (asked), "steps_done",
        "stopped" ("steps" or "max_seconds"), "losses", "groups", "groups_in",
        "completions_dropped_too_long", "longest", "resumed", "seconds", "options"}``.

    Raises:
        DataFileError: ``data`` is empty or a line is not a group
            (:func:`rlmd.train.datafile.read_groups`).
        ValueError: an option out of range (:func:`check_options`); no group with two or
            more different rewards (before or after the ``max_length`` cap; the message
            names the longest completion); ``out`` holds an adapter of another shape.
        FileNotFoundError: see :func:`rlmd.train.sft.resolve_base`.
    """
    import torch
    from peft import PeftModel, get_peft_model

    opts = opts or GRPOOptions()
    check_options(opts)
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    out = Path(out)
    groups_in = read_groups(data)
    if not any(len(set(g["rewards"])) > 1 for g in groups_in):
        raise ValueError(f"{data}: no group whose rewards differ (nothing to learn from)")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(opts.seed)
    model, tokenizer = load_base(base, opts.device)
    groups, report = prepare_groups(tokenizer, groups_in, opts.max_length)
    if not groups:
        raise ValueError(
            f"{data}: no group whose rewards differ within {opts.max_length} tokens; raise "
            f"--max-length to {report['longest']} (the longest completion) to keep them all"
        )
    save_base_config(model, out / "base")
    config = lora_config(model, opts)
    adapter, optim_path = out / "adapter", out / "optimizer.pt"
    resumed = (adapter / "adapter_config.json").exists()
    if resumed:
        check_adapter_shape(adapter, config)
        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    else:
        model = get_peft_model(model, config)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=opts.learning_rate)
    if resumed and optim_path.exists():
        optim.load_state_dict(torch.load(optim_path, map_location=opts.device))
        for group in optim.param_groups:
            group["lr"] = opts.learning_rate
    bf16 = uses_bf16(opts)
    device_type = "cuda" if opts.device == "cuda" else "cpu"
    log_path = out / "log.jsonl"
    started = time.monotonic()
    done = sum(1 for _ in open(log_path)) if log_path.exists() else 0

    def save() -> None:
        model.save_pretrained(adapter)
        torch.save(optim.state_dict(), optim_path)

    old_logp: dict[tuple[int, int], Any] = {}
    if opts.clip > 0:  # the policy at the start of this run, once per scored completion
        with torch.no_grad():
            for gi, g in enumerate(groups):
                for ci, ((ids, head), a) in enumerate(
                    zip(g["ids"], advantages(g["rewards"]), strict=True)
                ):
                    if a != 0:
                        old_logp[gi, ci] = token_logprobs(model, ids, head).detach()
    losses: list[float] = []
    stopped = "steps"
    last = 0.0
    for step in range(opts.steps):
        if step and opts.max_seconds is not None:
            if time.monotonic() - started + last > opts.max_seconds:
                stopped = "max_seconds"
                break
        t0 = time.monotonic()
        picked = [
            ((done + step) * opts.groups_per_step + j) % len(groups)
            for j in range(opts.groups_per_step)
        ]
        batch = [groups[gi] for gi in picked]
        optim.zero_grad()
        advs = [advantages(g["rewards"]) for g in batch]
        scored = sum(1 for adv in advs for a in adv if a != 0)
        loss_value = 0.0
        ratios: list[list[float | None]] = []
        autocast = torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else nullcontext()
        for gi, g, adv in zip(picked, batch, advs, strict=True):
            ratios.append([])
            for ci, ((ids, head), a) in enumerate(zip(g["ids"], adv, strict=True)):
                if a == 0:
                    ratios[-1].append(None)
                    continue
                with autocast:
                    if opts.clip > 0:
                        logp = token_logprobs(model, ids, head)
                        old = old_logp[gi, ci]
                        term = -clipped_surrogate(logp, old, a, opts.clip) / scored
                        rho = float(torch.exp(logp.detach() - old).mean())
                        ratios[-1].append(round(rho, 4))
                    else:
                        term = -a * completion_logprob(model, ids, head) / scored
                        ratios[-1].append(None)
                term.backward()  # frees this completion's graph before the next forward
                loss_value += float(term.detach())
        optim.step()
        losses.append(loss_value)
        last = time.monotonic() - t0
        rec = {
            "step": done + step + 1,
            "loss": loss_value,
            "learning_rate": opts.learning_rate,
            "seconds": round(time.monotonic() - started, 2),
            "step_seconds": round(last, 2),
            "groups": [
                {
                    "task_id": g["task_id"],
                    "rewards": g["rewards"],
                    "advantages": [round(a, 4) for a in adv],
                    "prompt_tokens": g["ids"][0][1],
                    "completion_tokens": [len(ids) - head for ids, head in g["ids"]],
                    "ratios": rho,
                }
                for g, adv, rho in zip(batch, advs, ratios, strict=True)
            ],
        }
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        if progress:
            progress(rec)
        if (step + 1) % opts.save_steps == 0:
            save()
    save()
    plot_log(log_path, out / "loss.png")
    record = {
        "base": base,
        "data": str(data),
        "steps": opts.steps,
        "steps_done": len(losses),
        "stopped": stopped,
        "losses": losses,
        **report,
        "resumed": resumed,
        "seconds": round(time.monotonic() - started, 1),
        "options": asdict(opts),
    }
    (out / "train.json").write_text(json.dumps(record, indent=2))
    return record

"""LoRA supervised fine-tuning on exported root turns (``rlmd train sft``).

The base model comes from the GGUF file rlmd already pulled (transformers reads qwen2 GGUF
and dequantises it to float32) or from a Hugging Face folder. PEFT puts LoRA adapters on all
linear layers of the top ``lora_layers`` transformer blocks (default 8; 0 = every block; the
blocks below then run without an autograd graph, see :class:`SFTOptions`); TRL's
``SFTTrainer`` trains on ``{"prompt", "completion"}`` samples (:mod:`rlmd.train.export`)
with the loss on the completion (the target root turn) only. The text trained on is, token for token, the prompt llama.cpp renders at inference (the
GGUF's own chat template) followed by the target turn and ``<|im_end|>``.

**Length cap and turns.** A root turn's prompt grows with every turn (the history), so a
tight ``max_length`` drops later turns first: at 1,024 tokens the teacher's data kept every
opening turn and none of its third turns, so almost no ``FINAL`` turn was left, and the
model learned to write its opening cell whatever the history (it then repeated it and never
answered). Samples over ``max_length`` are dropped (never cut: a cut target teaches a
truncated turn); the record counts kept and dropped samples per turn, and training refuses
a cap that drops every later turn or every answering (``FINAL``) turn of the data.

An output folder ``OUT`` holds::

    checkpoints/checkpoint-N/   Trainer checkpoints: a second run with the same OUT resumes
    adapter/                    the final PEFT adapter (adapter_config.json + weights)
    base/config.json            the base model's config (the GGUF converter needs it)
    log.jsonl                   one line per step: step, loss, learning_rate, seconds
    loss.png                    loss and learning rate per step
    options.json                the options of the run that started last (its seed is
                                checked when a run resumes)
    train.json                  what ran: base, data, samples kept / dropped, steps, seconds

Needs ``pip install 'rlmd[train]'`` (torch 2.13.0 CPU, transformers, peft, trl, datasets).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any, Protocol

from rlmd import paths
from rlmd.train.datafile import check_sft

log = logging.getLogger(__name__)


@dataclass
class SFTOptions:
    """Training knobs (defaults sized for a CPU: short samples, few steps).

    ``lora_layers``: LoRA on the top N transformer blocks only (``None`` or ``0``: all of
    them). The blocks below hold no trainable weight and, without gradient checkpointing,
    run with no autograd graph: no activations kept, no backward pass through them, so a
    step costs one forward pass of the whole model plus the backward pass of the top N.
    ``gradient_checkpointing``: recompute activations in the backward pass instead of
    keeping them (less memory, one more forward pass of every block; with it on, the
    trainer makes the embeddings' output require grad, so the backward pass runs through
    every block again). ``threads``: torch's CPU threads (``None``: torch's default, the
    core count). ``precision``: ``"fp32"``, ``"bf16"`` (autocast) or ``"auto"`` (bf16 on
    CUDA, fp32 elsewhere). TRL's own default is bf16, which on a CPU without bf16 matrix
    instructions (AVX512-BF16/AMX; this project's 2-core AMD EPYC VM has AVX2 only) runs
    the matrix products through PyTorch's generic (non-BLAS) GEMM: the all-block step of
    ``bench/train_step.py`` was found there, in ``MmBackward`` on ``BFloat16``."""

    steps: int = 30
    learning_rate: float = 2e-4
    rank: int = 16
    alpha: int = 32
    max_length: int = 2_048
    batch_size: int = 1
    grad_accum: int = 1
    save_steps: int = 5
    device: str = "cpu"
    seed: int = 0
    gradient_checkpointing: bool = False
    lora_layers: int | None = 8
    threads: int | None = None
    precision: str = "auto"


def resolve_base(base: str) -> tuple[str, str | None]:
    """``(folder, gguf file name or None)`` for ``from_pretrained``: ``base`` is a Hugging Face
    folder, a ``.gguf`` path, or a pulled local model name (``qwen2.5-coder-0.5b``).

    Raises:
        FileNotFoundError: nothing usable by that name (the message says what to pull).
    """
    path = Path(base).expanduser()
    if path.is_dir():
        return str(path), None
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), path.name
    from rlmd.models.pull import local_model_path

    try:
        found = local_model_path(base)
    except (KeyError, ValueError):
        found = None
    if found is None:
        raise FileNotFoundError(
            f"base model {base!r}: not a folder, a .gguf file or a pulled local model "
            f"(run `rlmd models pull {base}`)"
        )
    return str(found.parent), found.name


def dequantised_cache(gguf: Path) -> Path:
    """Where :func:`load_base` keeps the float32 copy of the GGUF base ``gguf``:
    ``<rlmd home>/cache/train-base/<stem>-<key>/``, the key a hash of the file's path, size
    and mtime (a changed file gets a new copy). About 4 bytes per parameter on disk (0.5B:
    ~2 GB; 1.5B: ~6 GB); delete the folder to reclaim it."""
    st = gguf.stat()
    ident = f"{gguf.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return paths.home() / "cache" / "train-base" / f"{gguf.stem}-{sha256(ident).hexdigest()[:16]}"


def load_base(base: str, device: str = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``base`` (see :func:`resolve_base`), float32 on ``device``.

    A GGUF base is dequantised once (minutes on a CPU: 5.5 min for the 0.5B at load 3-6,
    session 6) and kept as a float32 Hugging Face folder (:func:`dequantised_cache`): a
    resumed or later run loads that copy instead."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf = resolve_base(base)
    cache = dequantised_cache(Path(folder) / gguf) if gguf else None
    if cache is not None and (cache / _CACHE_DONE).exists():
        folder, gguf = str(cache), None
    kw: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kw)
    if gguf:
        # Dequantised to float32 on load, yet marked as a GGUF-quantised model, which the
        # Trainer refuses to train: the weights in memory are plain floats.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        assert cache is not None
        _keep(model, tokenizer, cache)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


_CACHE_DONE = "rlmd-complete"
"""Written last into a dequantised copy: a folder without it (a crash mid-write) is redone."""


def _keep(model: Any, tokenizer: Any, cache: Path) -> None:
    """Write the dequantised base to ``cache`` (into a temporary folder renamed into place,
    so a reader never sees half a copy). A failure (a full disk) only costs the next run
    the dequantisation again."""
    tmp = cache.with_name(f"{cache.name}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _CACHE_DONE).write_text("")
        shutil.rmtree(cache, ignore_errors=True)
        os.replace(tmp, cache)
    except OSError as exc:
        log.warning("could not keep the dequantised base in %s: %s", cache, exc)
        shutil.rmtree(tmp, ignore_errors=True)


def save_base_config(model: Any, folder: Path) -> None:
    """Write the base model's ``config.json`` to ``folder`` for llama.cpp's LoRA converter,
    with ``architectures`` set (a config read from a GGUF has none, and the converter picks
    its model class by it)."""
    if not getattr(model.config, "architectures", None):
        model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(folder)


def _length(tokenizer: Any, sample: dict[str, Any]) -> int:
    """Tokens of prompt + completion as the chat template renders them for training."""
    ids = tokenizer.apply_chat_template(sample["prompt"] + sample["completion"], tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


def _answers(sample: dict[str, Any]) -> bool:
    return "FINAL" in sample["completion"][-1]["content"]


def length_report(tokenizer: Any, samples: list[dict[str, Any]], max_length: int) -> dict:
    """What a ``max_length`` cap keeps of ``samples`` (SFT records, see
    :mod:`rlmd.train.export`): ``{"kept": [bool per sample], "by_turn": {turn: [kept,
    total]}, "answering": [kept, total], "longest": tokens}`` (``turn`` from the record,
    0 when absent; "answering" = targets that call ``FINAL``)."""
    lengths = [_length(tokenizer, s) for s in samples]
    kept = [n <= max_length for n in lengths]
    by_turn: dict[int, list[int]] = {}
    answering = [0, 0]
    for sample, ok in zip(samples, kept, strict=True):
        row = by_turn.setdefault(int(sample.get("turn") or 0), [0, 0])
        row[0] += ok
        row[1] += 1
        if _answers(sample):
            answering[0] += ok
            answering[1] += 1
    return {
        "kept": kept,
        "by_turn": dict(sorted(by_turn.items())),
        "answering": answering,
        "longest": max(lengths, default=0),
    }


def check_lengths(report: dict, max_length: int) -> None:
    """Raise ``ValueError`` when the cap leaves nothing, drops every turn after the first,
    or drops every answering turn that the data has (see the module docstring)."""
    later = [v for t, v in report["by_turn"].items() if t > 0]
    fix = f"; raise --max-length to {report['longest']} (the longest sample) to keep them all"
    if not any(report["kept"]):
        raise ValueError(f"no sample fits in {max_length} tokens{fix}")
    if later and sum(k for k, _ in later) == 0:
        raise ValueError(
            f"a {max_length}-token cap keeps only first turns: the model would learn to write "
            f"its opening cell whatever the history{fix}"
        )
    kept, total = report["answering"]
    if total and not kept:
        raise ValueError(
            f"a {max_length}-token cap drops all {total} turns that answer with FINAL{fix}"
        )


def lora_layer_ids(model: Any, lora_layers: int | None) -> list[int] | None:
    """Indices of the transformer blocks that get LoRA for ``lora_layers`` (the top N of
    ``model.config.num_hidden_layers``), or ``None`` for all of them (``lora_layers`` None,
    0, or at least the block count).

    Raises:
        ValueError: ``lora_layers`` is negative."""
    if lora_layers is not None and lora_layers < 0:
        raise ValueError(f"lora_layers must be >= 0 (0 = all blocks), got {lora_layers}")
    total = int(model.config.num_hidden_layers)
    if not lora_layers or lora_layers >= total:
        return None
    return list(range(total - lora_layers, total))


class AdapterOptions(Protocol):
    """What :func:`lora_config` and :func:`uses_bf16` read of a run's options
    (:class:`SFTOptions`, :class:`rlmd.train.grpo.GRPOOptions`)."""

    rank: int
    alpha: int
    lora_layers: int | None
    precision: str
    device: str


def lora_config(model: Any, opts: AdapterOptions) -> Any:
    """The PEFT ``LoraConfig`` of a run: rank/alpha from ``opts``, all linear layers of the
    blocks :func:`lora_layer_ids` picks (the output head is never adapted)."""
    import torch
    from peft import LoraConfig

    layers = lora_layer_ids(model, opts.lora_layers)
    # PEFT takes layers_to_transform with a list of module names only, not "all-linear":
    # the same set, named (every Linear inside the blocks; the output head is outside them)
    names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and ".layers." in n})  # fmt: skip
    return LoraConfig(
        r=opts.rank,
        lora_alpha=opts.alpha,
        lora_dropout=0.0,
        target_modules="all-linear" if layers is None else names,
        task_type="CAUSAL_LM",
        layers_to_transform=layers,
        layers_pattern="layers" if layers is not None else None,
    )


def check_resume(checkpoints: Path, config: Any) -> None:
    """Refuse to resume from a checkpoint in ``checkpoints`` whose adapter differs from
    ``config`` (rank, alpha or adapted blocks): the optimizer state would not fit it.

    Raises:
        ValueError: as :func:`check_adapter_shape`, for the newest checkpoint."""
    found = sorted(checkpoints.glob("checkpoint-*/adapter_config.json"), key=_step_of)
    if found:
        check_adapter_shape(found[-1].parent, config, "resume")


def check_resume_seed(out: Path, seed: int) -> None:
    """Refuse to resume the checkpoints in ``out`` under another seed than the run that
    wrote them (recorded in ``out/options.json`` when a run starts): transformers draws the
    epoch's sample order from the seed, so the epoch in progress would repeat some samples
    and skip others, and ``train.json`` would record the new seed only.

    Raises:
        ValueError: the seeds differ (the message names both)."""
    started = out / "options.json"
    if not started.exists() or not any((out / "checkpoints").glob("checkpoint-*")):
        return
    was = json.loads(started.read_text()).get("seed")
    if was is not None and was != seed:
        raise ValueError(
            f"{out} holds checkpoints trained with --seed {was}, not {seed}: resume with "
            f"--seed {was} (the epoch's sample order follows the seed), or train into a new --out"
        )


def check_adapter_shape(adapter: Path, config: Any, verb: str = "continue") -> None:
    """Refuse to train on from the adapter folder ``adapter`` when its
    ``adapter_config.json`` has another rank, alpha or adapted blocks than ``config``.

    Raises:
        ValueError: the values differ; the message says which and how to ``verb`` (the
            same options) or start over (a new ``--out``)."""
    saved = json.loads((adapter / "adapter_config.json").read_text())
    want = {"r": config.r, "lora_alpha": config.lora_alpha,
            "layers_to_transform": config.layers_to_transform}  # fmt: skip
    have = {k: saved.get(k) for k in want}
    if want != have:
        diff = ", ".join(
            f"{k} {have[k]} there, {want[k]} asked" for k in want if want[k] != have[k]
        )
        raise ValueError(
            f"{adapter} holds another adapter ({diff}): {verb} with the options "
            f"it was trained with (--rank, --alpha, --lora-layers), or train into a new --out"
        )


def _step_of(adapter_config: Path) -> int:
    tail = adapter_config.parent.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


SEED_END = 2**32
"""Seeds are ``0 .. SEED_END - 1``: transformers' ``set_seed`` (which the SFT trainer calls
after the model has loaded) passes the seed to ``numpy.random.seed``, which refuses any
other value ("Seed must be between 0 and 2**32 - 1")."""


def check_options(opts: SFTOptions) -> None:
    """Raise ``ValueError`` for options no run can use (before minutes of loading):
    ``steps``, ``rank``, ``alpha``, ``max_length``, ``batch_size``, ``grad_accum``,
    ``save_steps`` or ``threads`` below 1, and as :func:`check_adapter_options`."""
    check_adapter_options(
        opts, ("steps", "rank", "alpha", "max_length", "batch_size", "grad_accum", "save_steps")
    )


def check_adapter_options(opts: Any, counts: tuple[str, ...]) -> None:
    """Raise ``ValueError`` for a training run's options out of range: any of the fields
    ``counts`` or ``threads`` below 1, ``lora_layers`` below 0, a ``learning_rate`` not above
    0, a ``precision`` other than auto, fp32 or bf16, a ``seed`` outside ``0 ..
    SEED_END - 1`` (shared by ``sft`` and ``grpo``)."""
    for name in counts:
        if getattr(opts, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(opts, name)}")
    if opts.threads is not None and opts.threads < 1:
        raise ValueError(f"threads must be >= 1, got {opts.threads}")
    if opts.lora_layers is not None and opts.lora_layers < 0:
        raise ValueError(f"lora_layers must be >= 0 (0 = all blocks), got {opts.lora_layers}")
    if not opts.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {opts.learning_rate}")
    if opts.precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be auto, fp32 or bf16, got {opts.precision!r}")
    seed = opts.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_END:
        raise ValueError(f"seed must be an integer from 0 to {SEED_END - 1}, got {seed!r}")


def uses_bf16(opts: AdapterOptions) -> bool:
    """Whether a run autocasts to bf16: ``precision`` ``"bf16"``, or ``"auto"`` on CUDA."""
    return opts.precision == "bf16" or (opts.precision == "auto" and opts.device == "cuda")


def build_trainer(
    model: Any,
    tokenizer: Any,
    ds: Any,
    opts: SFTOptions,
    checkpoints: Path,
    callbacks: Sequence[Any] = (),
) -> Any:
    """TRL's ``SFTTrainer`` for ``ds`` (``{"prompt", "completion"}`` rows) with a LoRA
    adapter on ``model`` (:func:`lora_config`); its ``train_dataset`` holds the tokenised
    samples (``input_ids``, ``labels`` -100 outside the completion) exactly as trained."""
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=str(checkpoints),
        max_steps=opts.steps,
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=opts.grad_accum,
        learning_rate=opts.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=opts.steps // 10,  # the first warmup step has lr 0: none for short runs
        logging_steps=1,
        save_steps=opts.save_steps,
        save_total_limit=2,
        completion_only_loss=True,
        max_length=opts.max_length,
        use_cpu=opts.device == "cpu",
        report_to=[],
        gradient_checkpointing=opts.gradient_checkpointing,
        bf16=uses_bf16(opts),  # TRL defaults to bf16: see SFTOptions.precision
        fp16=False,
        seed=opts.seed,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=ds,
        processing_class=tokenizer,
        peft_config=lora_config(model, opts),
        callbacks=list(callbacks),
    )
    return trainer


def train_sft(
    base: str, data: str | Path, out: str | Path, opts: SFTOptions | None = None
) -> dict[str, Any]:
    """Fine-tune ``base`` on the SFT JSONL ``data`` into folder ``out`` (resuming from its
    last checkpoint if there is one).

    Returns:
        The ``train.json`` record: ``{"base", "data", "samples", "dropped_too_long",
        "kept_by_turn": {turn: [kept, total]}, "answering_kept": [kept, total], "steps",
        "final_loss", "seconds", "options"}``.

    Raises:
        DataFileError: ``data`` is empty or a line is not an SFT sample
            (:func:`rlmd.train.datafile.check_sft`), found before the model loads.
        ValueError: an option out of range (:func:`check_options`); ``max_length`` keeps no
            sample, or drops every later turn or every answering turn
            (:func:`check_lengths`); ``out`` holds checkpoints of another adapter shape
            (:func:`check_resume`) or another seed (:func:`check_resume_seed`).
        FileNotFoundError: see :func:`resolve_base`.
    """
    import torch
    from datasets import load_dataset
    from transformers import TrainerCallback

    opts = opts or SFTOptions()
    check_options(opts)
    check_sft(data)  # before the model loads (minutes): a bad line failed only after it
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    check_resume_seed(out, opts.seed)  # before the model loads (minutes)
    (out / "options.json").write_text(json.dumps(asdict(opts), indent=2))
    torch.manual_seed(opts.seed)
    model, tokenizer = load_base(base, opts.device)
    check_resume(out / "checkpoints", lora_config(model, opts))
    ds = load_dataset("json", data_files=str(data), split="train")
    lengths = length_report(tokenizer, list(ds), opts.max_length)
    check_lengths(lengths, opts.max_length)
    ds = ds.select([i for i, ok in enumerate(lengths["kept"]) if ok])
    ds = ds.select_columns(["prompt", "completion"])
    save_base_config(model, out / "base")
    log_path = out / "log.jsonl"
    started = time.monotonic()

    class Log(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                rec = {
                    "step": state.global_step,
                    "loss": logs["loss"],
                    "learning_rate": logs.get("learning_rate"),
                    "seconds": round(time.monotonic() - started, 2),
                }
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")

    trainer = build_trainer(model, tokenizer, ds, opts, out / "checkpoints", [Log()])
    resume = any((out / "checkpoints").glob("checkpoint-*"))
    result = trainer.train(resume_from_checkpoint=True if resume else None)
    trained: Any = trainer.model
    trained.save_pretrained(out / "adapter")
    plot_log(log_path, out / "loss.png")
    record = {
        "base": base,
        "data": str(data),
        "samples": len(ds),
        "dropped_too_long": len(lengths["kept"]) - len(ds),
        "kept_by_turn": lengths["by_turn"],
        "answering_kept": lengths["answering"],
        "steps": trainer.state.global_step,
        "resumed": resume,
        "final_loss": _last_loss(log_path),
        "train_loss": getattr(result, "training_loss", None),
        "seconds": round(time.monotonic() - started, 1),
        "options": asdict(opts),
    }
    (out / "train.json").write_text(json.dumps(record, indent=2))
    return record


def _last_loss(log_path: Path) -> float | None:
    if not log_path.exists():
        return None
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.strip()]
    return lines[-1]["loss"] if lines else None


def plot_log(log_path: Path, png: Path) -> bool:
    """Plot loss and learning rate per step from ``log.jsonl`` into ``png``; returns whether
    a plot was written (``False`` without matplotlib or with an empty log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not log_path.exists():
        return False
    recs = [json.loads(x) for x in log_path.read_text().splitlines() if x.strip()]
    if not recs:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], "o-", label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax2 = ax.twinx()
    ax2.plot([r["step"] for r in recs], [r["learning_rate"] or 0 for r in recs], "r--", label="lr")
    ax2.set_ylabel("learning rate")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return True

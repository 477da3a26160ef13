"""``rlmd train``: task sets, rollouts, datasets, fine-tuning, back into llama.cpp.

    rlmd train tasks --split train|heldout --out DIR [--size tiny|small|medium] [--seed N]
    rlmd train rollout --tasks F --model NAME [--samples K] [--temperature T] [--set NAME]
                       [--parallel N] [--max-iterations N] [--max-seconds S] [--max-depth N]
                       [--sub-model NAME] [--min-iterations N] [--min-subcalls N]
                       [--error-penalty X] [--overrun-zero] [--keep-fallback]
                       [--repair-share X] [--literal-share X] [--no-fold]
    rlmd train summary [--set NAME] [--json]
    rlmd train export --format sft|grpo --out F [--set NAME ...] [--min-reward X]
                      [--min-iterations N] [--max-depth N] [--model M ...] [--family F ...]
                      [--max-chars N] [--keep-zero-advantage] [--keep-mistakes]
                      [--repeat-repair N]
    rlmd train export-rollouts --set NAME --out F      rlmd train import-rollouts F
    rlmd train sft --base MODEL --data F --out NAME [--steps N] [--lr X] [--rank R]
                   [--max-length N] [--device cpu|cuda|mps] [--no-convert]
                   [--lora-layers N] [--gradient-checkpointing] [--threads N]
                   [--precision auto|fp32|bf16] [--seed N]
    rlmd train grpo --base MODEL --data F --out NAME [--steps N] [--lr X] [--no-convert]
        [--max-length N] [--lora-layers N] [--threads N] [--precision auto|fp32|bf16]
        [--groups-per-step N] [--save-steps N] [--max-seconds S] [--clip E] [--seed N]
    rlmd train convert NAME --base MODEL [--merge [--quant q4_k_m|q5_k_m|q8_0|f16|f32]]

Training output goes to ``<rlmd home>/train/NAME``; after ``sft``/``grpo`` the adapter is
converted to GGUF and registered as model ``NAME`` (``rlmd models`` lists it); ``convert
--merge`` instead merges it into the base, quantises, and registers ``NAME-merged``. Exit codes: 0
done, 1 failed, 2 bad usage (missing extra, unknown model, bad task file).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from rlmd import paths
from rlmd.cli.term import LazyConsole, markup, message

err = LazyConsole(stderr=True, highlight=False, soft_wrap=True)
out = LazyConsole(highlight=False, soft_wrap=True)
TRAIN_HINT = "pip install 'rlmd[train]'"


def add_parser(sub: Any) -> None:
    """Add the ``train`` command to the ``rlmd`` sub-parsers ``sub``."""
    p = sub.add_parser("train", help="rollouts, datasets and LoRA fine-tuning of local models")
    t = p.add_subparsers(dest="train_command", required=True)
    g = t.add_parser("tasks", help="write a generated task set (train or held-out split)")
    g.add_argument("--split", choices=["train", "heldout"], required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--size", choices=["tiny", "small", "medium"], default="small")
    g.add_argument(
        "--seed",
        type=int,
        default=0,
        help="0 to 1000002 (the held-out split adds 1000003, so the splits never share one)",
    )
    r = t.add_parser("rollout", help="run tasks through the engine and record rewarded runs")
    r.add_argument("--tasks", required=True, help="task-set folder or JSONL file")
    r.add_argument("--model", required=True, help="registry model name, or 'teacher'")
    r.add_argument("--samples", type=int, default=1, help="rollouts per task (default 1)")
    r.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default 0)"
    )
    r.add_argument("--set", dest="rollout_set", help="rollout set name (default: the model)")
    r.add_argument("--parallel", type=int, default=1, help="rollouts run at once (default 1)")
    r.add_argument("--max-iterations", type=int, default=6, help="root turns per run (default 6)")
    r.add_argument(
        "--max-seconds", type=float, default=300.0, help="wall-clock seconds per run (default 300)"
    )
    r.add_argument(
        "--max-depth",
        type=int,
        default=1,
        help="RLM loops at depths 0..N-1 (default 1: rlm_query is a plain sub-call)",
    )
    r.add_argument(
        "--sub-model",
        help="model for sub-calls (default: the root model; a LoRA adapter's base model; "
        "for the teacher 'teacher-labeller', or 'teacher-oracle' for exact labels)",
    )
    r.add_argument("--sandbox", default="subprocess", help="REPL backend (default subprocess)")
    r.add_argument(
        "--min-iterations",
        type=int,
        default=0,
        help="reward 0 for a run with fewer root turns (default 0: no gate)",
    )
    r.add_argument(
        "--min-subcalls",
        type=int,
        default=0,
        help="reward 0 for a run with fewer sub-calls and child runs (default 0: no gate)",
    )
    r.add_argument(
        "--error-penalty",
        type=float,
        default=0.0,
        help="subtracted from the reward per cell that raised (default 0)",
    )
    r.add_argument(
        "--overrun-zero",
        action="store_true",
        help="reward 0 for a run that ended on a budget limit (not completed)",
    )
    r.add_argument(
        "--keep-fallback",
        action="store_true",
        help="score extraction answers too (by default an answer from the fallback "
        "extraction call after a budget ran out scores 0)",
    )
    r.add_argument(
        "--repair-share",
        type=float,
        default=None,
        help="teacher only: share of rollouts that make a mistake and repair it "
        "(default 0.3; 0 for none)",
    )
    r.add_argument(
        "--literal-share",
        type=float,
        default=None,
        help="teacher only: share of rollouts that play a short literal program where the "
        "task has one (find the key, print, read the answer; default 0.75; 0 for none)",
    )
    r.add_argument(
        "--no-fold",
        action="store_true",
        help="keep failed turns in the root model's later prompts (inference folds them)",
    )
    s = t.add_parser("summary", help="reward by task family, iterations, sub-calls")
    s.add_argument("--set", dest="rollout_set")
    s.add_argument("--json", action="store_true")
    e = t.add_parser("export", help="SFT samples (per root turn) or GRPO groups as JSONL")
    e.add_argument("--format", choices=["sft", "grpo"], required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--set", dest="sets", action="append", default=[])
    e.add_argument("--min-reward", type=float, default=1e-9)
    e.add_argument("--min-iterations", type=int, default=2)
    e.add_argument("--max-depth", type=int, default=1)
    e.add_argument("--model", dest="models", action="append", default=[])
    e.add_argument("--family", dest="families", action="append", default=[])
    e.add_argument("--max-chars", type=int, default=100_000)
    e.add_argument("--keep-zero-advantage", action="store_true")
    e.add_argument(
        "--keep-mistakes",
        action="store_true",
        help="also make turns that raised, gave a refused FINAL or are marked mistakes targets",
    )
    e.add_argument(
        "--repeat-repair",
        type=int,
        default=1,
        help="sft: write each repair sample (the turn after a mistake) N times (default 1)",
    )
    x = t.add_parser("export-rollouts", help="a rollout set with its trajectories, one JSONL")
    x.add_argument("--set", dest="rollout_set", required=True)
    x.add_argument("--out", required=True)
    i = t.add_parser("import-rollouts", help="read an export-rollouts file into this store")
    i.add_argument("file")
    for name, helptext in (("sft", "LoRA SFT (TRL)"), ("grpo", "group-relative LoRA update")):
        f = t.add_parser(name, help=helptext)
        f.add_argument("--base", required=True, help="pulled model name, .gguf or HF folder")
        f.add_argument("--data", required=True)
        f.add_argument("--out", required=True, help="model name (and output folder)")
        f.add_argument("--steps", type=int, default=30 if name == "sft" else 1)
        f.add_argument("--lr", type=float, default=2e-4 if name == "sft" else 1e-4)
        f.add_argument("--rank", type=int, default=16)
        f.add_argument("--alpha", type=int, default=32)
        f.add_argument("--max-length", type=int, default=2_048)
        f.add_argument("--device", choices=["cpu", "cuda", "mps"], default="cpu")
        f.add_argument("--save-steps", type=int, default=5)
        f.add_argument(
            "--seed",
            type=int,
            default=0,
            help="seeds the LoRA initialisation and the sample order: 0 to 2**32 - 1 "
            "(default 0); the same seed, data and machine give the same run, another seed "
            "measures run-to-run spread",
        )
        f.add_argument("--no-convert", action="store_true")
        f.add_argument(
            "--lora-layers",
            type=int,
            default=8,
            help="LoRA on the top N transformer blocks only; the blocks below run without "
            "a backward pass (default 8; 0 = every block)",
        )
        f.add_argument("--threads", type=int, help="torch CPU threads (default: all cores)")
        f.add_argument(
            "--precision",
            choices=["auto", "fp32", "bf16"],
            default="auto",
            help="auto: bf16 autocast on cuda, fp32 elsewhere (bf16 on a CPU without bf16 "
            "instructions is many times slower)",
        )
        if name == "sft":
            f.add_argument(
                "--gradient-checkpointing",
                action="store_true",
                help="recompute activations in the backward pass: less memory, slower "
                "(default off)",
            )
        else:
            f.add_argument(
                "--groups-per-step", type=int, default=1, help="groups per update (default 1)"
            )
            f.add_argument(
                "--clip",
                type=float,
                default=0.2,
                help="the clipped surrogate's epsilon: a completion's tokens stop pulling once "
                "their probability moved this far from the run's start (default 0.2; 0 = off)",
            )
            f.add_argument(
                "--max-seconds",
                type=float,
                help="stop before a step that would end past S seconds of training (judged by "
                "the last step's length; at least one step runs)",
            )
    c = t.add_parser("convert", help="adapter → llama.cpp GGUF, registered as a model")
    c.add_argument("name")
    c.add_argument("--base", required=True)
    c.add_argument(
        "--merge",
        action="store_true",
        help="merge the adapter into the base and quantise (model NAME-merged)",
    )
    c.add_argument("--quant", default="q4_k_m", choices=["q4_k_m", "q5_k_m", "q8_0", "f16", "f32"])


def train_dir(name: str) -> Path:
    return paths.home() / "train" / name


def run(args: argparse.Namespace) -> int:
    """Run ``rlmd train ...``; returns the exit code."""
    try:
        return COMMANDS[args.train_command](args)
    except ImportError as exc:
        hint = "" if exc.name == "bench" else f"; training needs `{TRAIN_HINT}`"
        err.print(f"[red]error:[/] {markup(exc)}{hint}")
        return 2
    except (ValueError, KeyError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {markup(message(exc))}")
        return 2
    except RuntimeError as exc:
        from rlmd.train.gguf_lora import ConverterError  # not imported on every rlmd start
        from rlmd.train.rollout import RolloutError

        if not isinstance(exc, ConverterError | RolloutError):
            raise
        err.print(f"[red]error:[/] {markup(exc)}")
        return 1
    except BrokenPipeError:
        raise  # stdout's reader went away (`| head`): rlmd's main stops quietly
    except OSError as exc:  # a folder it cannot write, a full disk, a name too long
        err.print(f"[red]error:[/] {markup(exc)}")
        return 1


def cmd_tasks(args: argparse.Namespace) -> int:
    from rlmd.train.tasks import generate_split

    tasks = generate_split(args.split, args.out, seed=args.seed, size=args.size)
    fams: dict[str, int] = {}
    for task in tasks:
        fams[task.family] = fams.get(task.family, 0) + 1
    err.print(f"{len(tasks)} {args.split} tasks in {markup(args.out)}: {fams}")
    return 0


_ROLLOUT_COUNTS = {
    "--samples": ("samples", 1),
    "--parallel": ("parallel", 1),
    "--min-iterations": ("min_iterations", 0),
    "--min-subcalls": ("min_subcalls", 0),
}
"""``rlmd train rollout``'s whole-number flags: (the attribute, the least value)."""


def rollout_problem(args: argparse.Namespace) -> str | None:
    """A message naming the ``rlmd train rollout`` flag whose value no rollout can use, else
    ``None``. The budget flags are checked by :class:`~rlmd.engine.budget.Budget` itself,
    whose error names its field (``max_iterations``): the message names the flag the user
    typed (review16)."""
    for flag, (name, least) in _ROLLOUT_COUNTS.items():
        value = getattr(args, name)
        if value < least:
            return f"{flag} must be >= {least}, got {value}"
    from rlmd.cli.budget_flags import budget_flag_problem

    budget = {name: name for name in ("max_iterations", "max_depth", "max_seconds")}
    problem = budget_flag_problem(args, budget)  # the engine's check, named by the flag
    if problem:
        return problem
    for flag, name in (("--temperature", "temperature"), ("--error-penalty", "error_penalty")):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            return f"{flag} must be a finite number >= 0, got {value}"
    for flag, name in (("--repair-share", "repair_share"), ("--literal-share", "literal_share")):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:  # NaN is refused too
            return f"{flag} must be from 0 to 1, got {value}"
    return None


def cmd_rollout(args: argparse.Namespace) -> int:
    import asyncio

    problem = rollout_problem(args)
    if problem:
        err.print(f"[red]error:[/] {markup(problem)}")
        return 2

    from rlmd import config
    from rlmd.store import Store
    from rlmd.train.rewards import RewardTerms
    from rlmd.train.rollout import RolloutOptions, run_rollouts, summary
    from rlmd.train.tasks import load_tasks

    tasks = load_tasks(args.tasks)
    extra = {} if args.repair_share is None else {"repair_share": args.repair_share}
    if args.literal_share is not None:
        extra["literal_share"] = args.literal_share
    opts = RolloutOptions(
        model=args.model,
        samples=args.samples,
        temperature=args.temperature,
        rollout_set=args.rollout_set,
        parallel=args.parallel,
        budget={
            "max_iterations": args.max_iterations,
            "max_seconds": args.max_seconds,
            "max_depth": args.max_depth,
        },
        sandbox=args.sandbox,
        sub_model=args.sub_model,
        terms=RewardTerms(
            fallback_zero=not args.keep_fallback,
            error_penalty=args.error_penalty,
            overrun_zero=args.overrun_zero,
            min_iterations=args.min_iterations,
            min_subcalls=args.min_subcalls,
        ),
        fold_failed_turns=not args.no_fold,
        **extra,
    )
    registry = config.load(Path.cwd()).registry()

    def progress(p: dict[str, Any]) -> None:
        err.print(
            f"[{p['done']}/{p['total']}] {markup(p['task_id'])} #{p['sample_index']}: reward "
            f"{p['reward']:.2f}, {p['iterations']} turns, {p['subcalls']} sub-calls, "
            f"{p['seconds']:.1f} s"
        )

    with Store(paths.store_path()) as store:
        try:
            asyncio.run(
                run_rollouts(tasks, opts, registry=registry, store=store, progress=progress)
            )
        finally:
            asyncio.run(registry.aclose())
        _print_summary(summary(store.rollouts(opts.set_name)))
    return 0


def _print_summary(rows: list[dict[str, Any]]) -> None:
    if not rows:
        err.print("no rollouts")
        return
    out.print(summary_table(rows, out.width))


def summary_table(rows: list[dict[str, Any]], width: int) -> Any:
    """A rich table of :func:`rlmd.train.rollout.summary` rows that fits ``width`` terminal
    columns without cutting a header, a family or a number: one row per family when that
    fits, else one column per family (a row per measure), else a block of rows per family.
    Families are shown with control characters escaped, never as markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from rlmd.cli.term import visible

    keys = list(rows[0])
    measures = keys[1:]
    wide = Table(box=box.SIMPLE_HEAD)
    for key in keys:
        wide.add_column(key, justify="left" if key == "family" else "right", no_wrap=True)
    for r in rows:
        wide.add_row(Text(visible(r["family"])), *(str(r[k]) for k in measures))
    if _fits(wide, width):
        return wide
    tall = Table(box=box.SIMPLE_HEAD)
    tall.add_column("", no_wrap=True)
    for r in rows:
        tall.add_column(Text(visible(r["family"])), justify="right", no_wrap=True)
    for key in measures:
        tall.add_row(key, *(str(r[key]) for r in rows))
    if _fits(tall, width):
        return tall
    blocks = Table(box=None, show_header=False, pad_edge=False)  # a family per block: any width
    blocks.add_column(overflow="fold")
    blocks.add_column(justify="right", overflow="fold")
    for n, r in enumerate(rows):
        blocks.add_row(Text(visible(r["family"]), style="bold"), "")
        for key in measures:
            blocks.add_row(f"  {key}", str(r[key]))
        if n < len(rows) - 1:
            blocks.add_row("", "")
    return blocks


def _fits(table: Any, width: int) -> bool:
    """Whether ``table`` draws within ``width`` columns without wrapping a cell."""
    from rich.console import Console

    return Console(width=100_000).measure(table).maximum <= width  # measured unclamped


def cmd_summary(args: argparse.Namespace) -> int:
    from rlmd.store import Store
    from rlmd.train.rollout import check_sets, summary

    with Store(paths.store_path()) as store:
        if args.rollout_set is not None:
            check_sets(store, [args.rollout_set])
        rows = summary(store.rollouts(args.rollout_set))
    if args.json:
        print(json.dumps(rows))
    else:
        _print_summary(rows)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlmd.store import Store
    from rlmd.train.export import (
        ExportFilters,
        grpo_groups,
        sft_samples,
        why_no_groups,
        why_no_samples,
        write_jsonl,
    )
    from rlmd.train.rollout import check_sets

    # Refused rather than ignored: a GRPO export with --repeat-repair 3 wrote the groups
    # once, and --min-reward nan kept every rollout (no reward compares below NaN).
    if args.format != "sft" and args.repeat_repair != 1:
        err.print("[red]error:[/] --repeat-repair applies to --format sft only")
        return 2
    if not math.isfinite(args.min_reward):
        err.print(f"[red]error:[/] --min-reward must be a finite number, not {args.min_reward}")
        return 2
    filters = ExportFilters(
        min_reward=args.min_reward,
        min_iterations=args.min_iterations,
        max_depth=args.max_depth,
        models=tuple(args.models),
        families=tuple(args.families),
        max_chars=args.max_chars,
        rollout_sets=tuple(args.sets),
        keep_mistakes=args.keep_mistakes,
    )
    with Store(paths.store_path()) as store:
        check_sets(store, args.sets)  # before --out is written: a misspelt set wrote 0 records
        if args.format == "sft":
            records, report = sft_samples(store, filters, repeat_repair=args.repeat_repair)
            err.print(json.dumps(report.to_dict()))
        else:
            dropped: Counter = Counter()
            records = grpo_groups(
                store, filters, keep_zero_advantage=args.keep_zero_advantage, dropped=dropped
            )
            err.print(json.dumps({"groups": len(records), "dropped": dict(dropped)}))
    write_jsonl(records, args.out)
    err.print(f"{len(records)} {args.format} records in {markup(args.out)}")
    if not records:  # it said "0 ... records" and nothing more
        why = why_no_samples(report) if args.format == "sft" else why_no_groups(dropped)
        err.print(f"[yellow]warning:[/] {markup(why)}")
    return 0


def cmd_export_rollouts(args: argparse.Namespace) -> int:
    from rlmd.store import Store
    from rlmd.train.rollout import export_set

    with Store(paths.store_path()) as store:
        n = export_set(store, args.rollout_set, args.out)
    err.print(f"{n} rollouts of {markup(repr(args.rollout_set))} in {markup(args.out)}")
    return 0


def cmd_import_rollouts(args: argparse.Namespace) -> int:
    from rlmd.store import Store
    from rlmd.train.rollout import import_set

    with Store(paths.store_path()) as store:
        n = import_set(store, args.file)
    err.print(f"{n} rollouts imported")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    if not args.no_convert:  # it is registered after training: refuse a bad name before
        from rlmd.train.gguf_lora import check_name

        check_name(args.out)
    folder = train_dir(args.out)
    if args.train_command == "sft":
        from rlmd.train.sft import SFTOptions, train_sft

        record = train_sft(
            args.base,
            args.data,
            folder,
            SFTOptions(
                steps=args.steps,
                learning_rate=args.lr,
                rank=args.rank,
                alpha=args.alpha,
                max_length=args.max_length,
                device=args.device,
                save_steps=args.save_steps,
                lora_layers=args.lora_layers,
                gradient_checkpointing=args.gradient_checkpointing,
                threads=args.threads,
                precision=args.precision,
                seed=args.seed,
            ),
        )
    else:
        from rlmd.train.grpo import GRPOOptions, train_grpo

        record = train_grpo(
            args.base,
            args.data,
            folder,
            GRPOOptions(
                steps=args.steps,
                learning_rate=args.lr,
                rank=args.rank,
                alpha=args.alpha,
                max_length=args.max_length,
                device=args.device,
                save_steps=args.save_steps,
                groups_per_step=args.groups_per_step,
                lora_layers=args.lora_layers,
                threads=args.threads,
                precision=args.precision,
                max_seconds=args.max_seconds,
                clip=args.clip,
                seed=args.seed,
            ),
            progress=_grpo_progress,
        )
    err.print(json.dumps(record))
    if not args.no_convert:
        _convert(args.out, args.base)
    return 0


def _grpo_progress(rec: dict[str, Any]) -> None:
    """One stderr line per ``grpo`` step: loss, time, and each group's rewards."""
    groups = "; ".join(
        f"{markup(g['task_id'])} rewards {[round(r, 3) for r in g['rewards']]}"
        for g in rec["groups"]
    )
    err.print(
        f"step {rec['step']}: loss {rec['loss']:.4f}, {rec['step_seconds']:.1f} s "
        f"({rec['seconds']:.0f} s in all); {groups}"
    )


def _convert(name: str, base: str) -> None:
    from rlmd.train.gguf_lora import adapter_dir, convert_adapter, register

    run = train_dir(name)
    source = adapter_dir(run)
    if source.name != "adapter":  # a run stopped before --steps: say which step it is
        err.print(f"{run} did not finish its steps; converting its last checkpoint, {source}")
    gguf = convert_adapter(run)
    entry = register(name, base, gguf)
    err.print(f"model {name!r} registered ({entry}); try: rlmd run --model {name} ...")


def cmd_convert(args: argparse.Namespace) -> int:
    from rlmd.train.gguf_lora import check_name

    check_name(args.name)  # before any work: a path would read or write outside the home
    if not args.merge:
        _convert(args.name, args.base)
        return 0
    from rlmd.train.gguf_lora import adapter_dir, merge_adapter, register

    run = train_dir(args.name)
    source = adapter_dir(run)
    err.print(f"merging {source} into {markup(args.base)}, quantising to {args.quant}")
    gguf = merge_adapter(run, args.base, quant=args.quant)
    name = f"{args.name}-merged"
    entry = register(name, str(gguf.resolve()), None, merged_from=str(source))
    err.print(f"model {name!r} registered ({entry}); try: rlmd run --model {name} ...")
    return 0


COMMANDS = {
    "tasks": cmd_tasks,
    "rollout": cmd_rollout,
    "summary": cmd_summary,
    "export": cmd_export,
    "export-rollouts": cmd_export_rollouts,
    "import-rollouts": cmd_import_rollouts,
    "sft": cmd_fit,
    "grpo": cmd_fit,
    "convert": cmd_convert,
}

"""The cost of one LoRA SFT step on CPU: every block adapted, gradient checkpointing, TRL's
default bf16 autocast (sessions 5-10's setting) against LoRA on the top N blocks without
checkpointing (the blocks below then run with no autograd graph) in fp32, on the same
samples, in the same run; ``--attribution`` adds all blocks + checkpointing in fp32 (what
the precision alone changes).

Run: ``.venv/bin/python bench/train_step.py --data sft.jsonl [--base qwen2.5-coder-0.5b]
[--samples 3] [--rounds 2] [--layers 8] [--threads N]`` (with ``RLMD_HOME`` pointing at a
home whose ``cache/train-base`` holds the dequantised base, else the first worker makes it).

Each configuration runs in its own process (its peak RSS is then its own), ``rounds`` times,
alternating (peer, candidate, peer, candidate, ...), so a busy neighbour hits both alike. A
worker loads the base, builds :func:`rlmd.train.sft.build_trainer` on the chosen samples and
trains ``samples`` steps at batch 1 (the same samples in the same order for both: same data,
same seed); a callback times each optimizer step. Samples are picked by token length: the
25th, 50th and 90th percentile of the file (``--samples 3``), so short and long turns count.

Checked outside the timing: step 1's loss (the LoRA B matrices start at zero, so the model
is the base in both) is the same for both configurations to 3 % (bf16 rounding), and the
candidate's adapter holds weights for the top N blocks only.

Prints per-step seconds, tokens, loss, peak RSS, then the ratio candidate / peer of the
summed step seconds; writes ``bench/out/train_step.json``. **Target**: the candidate's
step costs <= 0.5x the peer's (at least 2x faster); exits 1 when missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_RATIO = 0.5


def pick(data: Path, base: str, n: int) -> tuple[list[int], list[int]]:
    """Indices of ``n`` samples of ``data`` at spread token-length percentiles (all under
    2,048 tokens), and their lengths."""
    from rlmd.train.sft import _length, load_base

    rows = [json.loads(x) for x in data.read_text().splitlines() if x.strip()]
    _, tok = load_base(base)
    lengths = [_length(tok, r) for r in rows]
    order = sorted((n_, i) for i, n_ in enumerate(lengths) if n_ <= 2_048)
    qs = [0.25, 0.5, 0.9] if n == 3 else [(k + 1) / (n + 1) for k in range(n)]
    chosen = [order[min(len(order) - 1, int(q * len(order)))][1] for q in qs]
    return chosen, [lengths[i] for i in chosen]


def worker(args: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from rlmd.train.sft import SFTOptions, build_trainer, load_base

    cfg = json.loads(args.worker)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(x) for x in Path(args.data).read_text().splitlines() if x.strip()]
    idx = [int(i) for i in args.indices.split(",")]
    ds = Dataset.from_list([{"prompt": rows[i]["prompt"], "completion": rows[i]["completion"]}
                            for i in idx])  # fmt: skip
    opts = SFTOptions(
        steps=len(idx),
        save_steps=10**6,
        max_length=2_048,
        lora_layers=cfg["lora_layers"],
        gradient_checkpointing=cfg["gradient_checkpointing"],
        precision=cfg["precision"],
    )
    t0 = time.monotonic()
    model, tok = load_base(args.base)
    load_s = time.monotonic() - t0
    times: list[float] = []
    cpu: list[float] = []  # CPU seconds of all the process's threads: less load-dependent
    losses: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):  # type: ignore[no-untyped-def]
            self.t, self.c = time.monotonic(), time.process_time()

        def on_step_end(self, a, state, control, **kw):  # type: ignore[no-untyped-def]
            times.append(time.monotonic() - self.t)
            cpu.append(time.process_time() - self.c)

        def on_log(self, a, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(model, tok, ds, opts, Path(tmp) / "ck", [Timer()])
        # the order the trainer feeds the samples in (same seed, same data: same for both)
        fed = [len(r["input_ids"]) for r in trainer.train_dataset]
        trainable = sorted({n.split(".layers.")[1].split(".")[0] for n, p in
                            trainer.model.named_parameters() if p.requires_grad and ".layers." in n},
                           key=int)  # fmt: skip
        trainer.train()
    print(
        json.dumps(
            {
                "config": cfg,
                "load_s": round(load_s, 1),
                "step_s": [round(t, 2) for t in times],
                "step_cpu_s": [round(t, 2) for t in cpu],
                "loss": losses,
                "tokens_in_dataset_order": fed,
                "adapted_blocks": [int(b) for b in trainable],
                "threads": torch.get_num_threads(),
                "max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            }
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--base", default="qwen2.5-coder-0.5b")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--attribution", action="store_true", help="also all blocks in fp32")
    ap.add_argument("--worker")
    ap.add_argument("--indices")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    idx, lengths = pick(Path(args.data), args.base, args.samples)
    print(f"samples {idx}, tokens {lengths}", flush=True)
    configs = {
        "peer: all blocks, checkpointing, bf16 (sessions 5-10)": {
            "lora_layers": 0,
            "gradient_checkpointing": True,
            "precision": "bf16",
        },
        f"candidate: top {args.layers} blocks, no checkpointing, fp32": {
            "lora_layers": args.layers,
            "gradient_checkpointing": False,
            "precision": "fp32",
        },
    }
    if args.attribution:  # what fp32 alone gives: the peer's adapter in fp32
        configs["attribution: all blocks, checkpointing, fp32"] = {
            "lora_layers": 0,
            "gradient_checkpointing": True,
            "precision": "fp32",
        }
    runs: dict[str, list[dict]] = {k: [] for k in configs}
    for r in range(args.rounds):
        names = list(configs) if r % 2 == 0 else list(configs)[::-1]
        for name in names:
            cmd = [sys.executable, __file__, "--data", args.data, "--base", args.base,
                   "--worker", json.dumps(configs[name]), "--indices", ",".join(map(str, idx)),
                   "--threads", str(args.threads)]  # fmt: skip
            load = os.getloadavg()[0]
            started = time.strftime("%H:%M:%S", time.gmtime())
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 2
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            rec |= {"round": r, "start_utc": started, "load_before": round(load, 2),
                    "load_after": round(os.getloadavg()[0], 2)}  # fmt: skip
            runs[name].append(rec)
            print(f"{name} round {r}: {rec}", flush=True)
    peer, cand = (runs[k] for k in list(configs)[:2])
    total = {k: sum(sum(r["step_s"]) for r in v) for k, v in runs.items()}
    ratio = total[list(configs)[1]] / total[list(configs)[0]]
    print("\n| config | rounds | s/step (median) | CPU s/step (median) | s per round | peak RSS GB "
          "| step-1 loss |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for k, v in runs.items():
        steps = [s for r in v for s in r["step_s"]]
        per_round = ", ".join(f"{sum(r['step_s']):.0f}" for r in v)
        rss = max(r["max_rss_gb"] for r in v)
        cpus = [s for r in v for s in r["step_cpu_s"]]
        print(f"| {k} | {len(v)} | {statistics.median(steps):.1f} | {statistics.median(cpus):.1f} "
              f"| {per_round} | {rss:.2f} | "
              f"{v[0]['loss'][0]:.4f} |")  # fmt: skip
    ok_loss = abs(peer[0]["loss"][0] - cand[0]["loss"][0]) <= 3e-2 * abs(peer[0]["loss"][0])
    blocks = len(peer[0]["adapted_blocks"])
    top = list(range(blocks - args.layers, blocks))
    ok_blocks = cand[0]["adapted_blocks"] == top
    cpu = {k: sum(sum(r["step_cpu_s"]) for r in v) for k, v in runs.items()}
    cpu_ratio = cpu[list(configs)[1]] / cpu[list(configs)[0]]
    print(f"\nratio candidate / peer (summed step seconds): {ratio:.3f} (target <= {TARGET_RATIO})")
    print(f"ratio candidate / peer (summed step CPU seconds): {cpu_ratio:.3f}")
    print(f"step-1 loss equal: {ok_loss}; candidate adapts blocks {cand[0]['adapted_blocks']}")
    Path(ROOT / "bench/out").mkdir(exist_ok=True)
    (ROOT / "bench/out/train_step.json").write_text(
        json.dumps({"samples": idx, "tokens": lengths, "runs": runs, "ratio": ratio}, indent=1)
    )
    if not (ok_loss and ok_blocks):
        print("CHECK FAILED", file=sys.stderr)
        return 2
    if ratio > TARGET_RATIO:
        print(f"MISSED TARGET: ratio {ratio:.3f} > {TARGET_RATIO}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

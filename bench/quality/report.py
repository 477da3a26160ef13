"""Markdown tables and PNG plots from a ``results.json``."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

FAMILY_ORDER = ("sniah", "oolong", "pairs", "codeqa", "codeintel", "judge")


def _systems(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["system"] for r in results))


def _fmt_tokens(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else f"{n:.0f}"


def _short(text: Any, n: int = 60) -> str:
    s = " ".join(str(text or "").split()).replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def summary_rows(results: list[dict]) -> list[dict[str, Any]]:
    """One row per system: mean score per family and overall, mean time, tokens, calls."""
    rows = []
    for system in _systems(results):
        rs = [r for r in results if r["system"] == system]
        row: dict[str, Any] = {"system": system, "tasks": len(rs)}
        for fam in FAMILY_ORDER:
            fs = [r["score"] for r in rs if r["family"] == fam]
            row[fam] = mean(fs) if fs else None
        row["overall"] = mean(r["score"] for r in rs)
        row["time_s"] = mean(r["wall_s"] for r in rs)
        row["tokens"] = mean(r["input_tokens"] + r["output_tokens"] for r in rs)
        row["calls"] = mean(r["calls"] for r in rs)
        row["completed"] = sum(1 for r in rs if r["status"] in ("completed",))
        rows.append(row)
    return rows


def markdown(data: dict[str, Any]) -> str:
    results = data["results"]
    tasks = {t["id"]: t for t in data.get("tasks", [])}
    systems = _systems(results)
    fams = [f for f in FAMILY_ORDER if any(r["family"] == f for r in results)]
    out = ["### Summary (mean score per family, 0–1)", ""]
    out.append(
        "| system | "
        + " | ".join(fams)
        + " | all | finished | mean time (s) | mean tokens | mean calls |"
    )
    out.append("|---|" + "---:|" * (len(fams) + 5))
    for row in summary_rows(results):
        cells = ["–" if row[f] is None else f"{row[f]:.2f}" for f in fams]
        out.append(
            f"| {row['system']} | "
            + " | ".join(cells)
            + f" | **{row['overall']:.2f}** | {row['completed']}/{row['tasks']} | {row['time_s']:.0f}"
            f" | {_fmt_tokens(row['tokens'])} | {row['calls']:.1f} |"
        )
    out += ["", "### Score per task", ""]
    out.append("| task | family | context tokens | gold | " + " | ".join(systems) + " |")
    out.append("|---|---|---:|---|" + "---:|" * len(systems))
    by_task: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in results:
        by_task[r["task_id"]][r["system"]] = r
    for tid, per in by_task.items():
        any_r = next(iter(per.values()))
        gold = tasks.get(tid, {}).get("answer", "")
        cells = [f"{per[s]['score']:.2f}" if s in per else "" for s in systems]
        out.append(
            f"| {tid} | {any_r['family']} | {any_r['length_tokens']:,} | {_short(gold, 40)} | "
            + " | ".join(cells)
            + " |"
        )
    out += ["", "### Every run", ""]
    out.append(
        "| task | system | score | status | answer | in / out tokens | calls (sub) | iters | time (s) | server: calls, evaluated / generated tokens | trajectory |"
    )
    out.append("|---|---|---:|---|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        srv = (r.get("extra") or {}).get("server")
        srv_cell = (
            f"{srv['calls']}, {_fmt_tokens(srv['prompt_tokens_evaluated'])} / {_fmt_tokens(srv['generated_tokens'])}"
            if srv
            else ""
        )
        out.append(
            f"| {r['task_id']} | {r['system']} | {r['score']:.2f} | {r['status']}"
            f"{' (' + r['answer_source'] + ')' if r.get('answer_source') not in (None, 'reply', 'answer', 'final') else ''}"
            f" | {_short(r['answer'])} | {_fmt_tokens(r['input_tokens'])} / {_fmt_tokens(r['output_tokens'])}"
            f" | {r['calls']} ({r['subcalls']}) | {r['iterations']} | {r['wall_s']:.0f} | {srv_cell}"
            f" | {r['trajectory'] or ''} |"
        )
    return "\n".join(out) + "\n"


def compare(before: dict[str, Any], after: dict[str, Any], labels=("before", "after")) -> str:
    """A before/after table of two runs over the same tasks: per system, the mean score and
    how many runs finished; per task and system, score, status, time and trajectory of each.

    Args:
        before / after: ``results.json`` contents; only (task, system) pairs present in
            ``after`` are compared (an after-run of some systems only is fine).
        labels: the two column-group names.

    Returns:
        Markdown text.
    """
    b_label, a_label = labels
    old = {(r["task_id"], r["system"]): r for r in before["results"]}
    new = {(r["task_id"], r["system"]): r for r in after["results"]}
    systems = _systems(after["results"])
    out = [
        f"| system | tasks | mean score {b_label} | mean score {a_label} "
        f"| finished {b_label} | finished {a_label} | mean time {b_label} (s) | mean time {a_label} (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for system in systems:
        keys = [k for k in new if k[1] == system and k in old]
        if not keys:
            continue
        b = [old[k] for k in keys]
        a = [new[k] for k in keys]
        out.append(
            f"| {system} | {len(keys)} | {mean(r['score'] for r in b):.2f} "
            f"| **{mean(r['score'] for r in a):.2f}** "
            f"| {sum(r['status'] == 'completed' for r in b)}/{len(b)} "
            f"| {sum(r['status'] == 'completed' for r in a)}/{len(a)} "
            f"| {mean(r['wall_s'] for r in b):.0f} | {mean(r['wall_s'] for r in a):.0f} |"
        )
    out += [
        "",
        f"| task | system | score {b_label} → {a_label} | status {b_label} → {a_label} "
        f"| answer {a_label} | time (s) | trajectory {b_label} | trajectory {a_label} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, a in new.items():
        b = old.get(key)
        if b is None:
            continue

        def status(r: dict) -> str:
            src = r.get("answer_source")
            return r["status"] + (f" ({src})" if src == "extraction" else "")

        out.append(
            f"| {key[0]} | {key[1]} | {b['score']:.2f} → **{a['score']:.2f}** "
            f"| {status(b)} → {status(a)} | {_short(a['answer'], 40)} "
            f"| {b['wall_s']:.0f} → {a['wall_s']:.0f} | {b['trajectory'] or ''} | {a['trajectory'] or ''} |"
        )
    return "\n".join(out) + "\n"


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """``accuracy_vs_length.png`` and ``cost_time.png`` in ``out_dir``; [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    results = data["results"]
    systems = _systems(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    markers = "osD^vP*X"

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, system in enumerate(systems):
        pts: dict[int, list[float]] = defaultdict(list)
        for r in results:
            if r["system"] == system:
                pts[r["length_tokens"]].append(r["score"])
        xs = sorted(pts)
        ys = [mean(pts[x]) for x in xs]
        jitter = 1 + 0.03 * (i - len(systems) / 2)
        ax.plot(
            [x * jitter for x in xs],
            ys,
            marker=markers[i % len(markers)],
            linestyle="-",
            label=system,
            alpha=0.8,
        )
    window = data.get("meta", {}).get("endpoint", {}).get("n_ctx")
    if window:
        ax.axvline(window, color="grey", linestyle="--", linewidth=1)
        ax.text(window, 1.02, " model window", color="grey", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.05, 1.1)
    ax.set_xlabel("context length (tokens, model tokenizer)")
    ax.set_ylabel("mean score")
    ax.set_title("Score against context length")
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = out_dir / "accuracy_vs_length.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    paths.append(p)

    task_ids = list(dict.fromkeys(r["task_id"] for r in results))
    # Tokens: what the server did (evaluated prompt + generated) when every run has it: the
    # same measure for every system, and there even when a system lost its own count.
    server = all((r.get("extra") or {}).get("server") for r in results)

    def tokens(r: dict) -> int:
        if server:
            srv = r["extra"]["server"]
            return srv["prompt_tokens_evaluated"] + srv["generated_tokens"]
        return r["input_tokens"] + r["output_tokens"]

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(7, len(task_ids) * 0.9), 6.5), sharex=True)
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        per = {r["task_id"]: r for r in results if r["system"] == system}
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(task_ids))]
        ax1.bar(xs, [per[t]["wall_s"] if t in per else 0 for t in task_ids], width, label=system)
        ax2.bar(
            xs,
            [tokens(per[t]) if t in per else 0 for t in task_ids],
            width,
            label=system,
        )
    ax1.set_ylabel("wall time (s)")
    ax1.set_title("Time and tokens per task")
    ax2.set_ylabel("server tokens (evaluated + generated)" if server else "tokens (in + out)")
    ax2.set_xticks(range(len(task_ids)), task_ids, rotation=30, ha="right", fontsize=8)
    ax1.legend(fontsize=8)
    fig.tight_layout()
    p = out_dir / "cost_time.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    paths.append(p)
    return paths

"""``python -m bench.quality``: generate task sets, run systems on them, score, report.

    python -m bench.quality run --suite smoke --model qwen2.5-coder-1.5b
    python -m bench.quality run --tasks OUT/tasks --model /path/model.gguf --systems plain,rlms
    python -m bench.quality run --suite small --base-url URL --model-name NAME --n-ctx 128000
    python -m bench.quality generate --suite smoke --out DIR --model qwen2.5-coder-1.5b
    python -m bench.quality score OUT/tasks answers.jsonl      # {"id": ..., "answer": ...} lines
    python -m bench.quality report OUT                         # tables and plots again
    python -m bench.quality compare BEFORE_OUT AFTER_OUT       # before/after table

``run`` writes ``OUT/tasks/`` (the task set), ``OUT/results.json`` (after every run, so
an interrupted suite keeps what it did), ``OUT/results.md`` and ``OUT/plots/*.png``.
With ``--model`` (a known local model name or a GGUF path) it starts one
``llama_cpp.server`` on 127.0.0.1 that all systems share, and stops it at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.quality import report, suites
from bench.quality.tasks import TaskSet
from bench.quality.tokenizer import Tokenizer, estimate_tokenizer, gguf_tokenizer

SYSTEMS = ("plain", "rlmd-d1", "rlmd-d2", "rlms")
REPO = Path(__file__).resolve().parents[2]


def resolve_gguf(model: str) -> Path:
    path = Path(model).expanduser()
    if path.is_file():
        return path
    from rlmd.models.pull import local_model_path

    found = local_model_path(model.removeprefix("local:"))
    if found is None:
        raise SystemExit(
            f"model {model!r}: no such GGUF file and not a pulled model (rlmd models pull {model})"
        )
    return found


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except (OSError, IndexError):
        pass
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
        )
    except OSError:
        rev, dirty = "", False
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "load_avg_at_start": os.getloadavg(),
        "git": rev + (" (dirty)" if dirty else ""),
    }


def _tokenizer(args: argparse.Namespace) -> Tokenizer:
    if getattr(args, "model", None):
        return gguf_tokenizer(resolve_gguf(args.model))
    return estimate_tokenizer()


def cmd_generate(args: argparse.Namespace) -> int:
    tok = _tokenizer(args)
    ts = suites.generate(
        args.suite, Path(args.out), seed=args.seed, count=tok.count, tokenizer=tok.name
    )
    print(f"{len(ts.tasks)} tasks in {args.out}")
    return 0


def write_outputs(out: Path, data: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "results.md").write_text(report.markdown(data))


def cmd_run(args: argparse.Namespace) -> int:
    from bench.quality import systems as S
    from bench.quality.server import LlamaServer

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out or REPO / "bench" / "out" / "quality" / f"{args.suite}-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = set(names) - set(SYSTEMS)
    if bad:
        raise SystemExit(f"unknown systems {sorted(bad)}; known: {', '.join(SYSTEMS)}")
    if not args.model and not args.base_url:
        raise SystemExit("give --model (a local GGUF, served here) or --base-url and --model-name")
    tok = _tokenizer(args)
    if args.tasks:
        ts = TaskSet.load(Path(args.tasks))
        bad_ctx = ts.verify()
        if bad_ctx:
            raise SystemExit(f"contexts changed since generation: {bad_ctx}")
    else:
        ts = suites.generate(
            args.suite, out / "tasks", seed=args.seed, count=tok.count, tokenizer=tok.name
        )
    tasks = ts.tasks
    if args.only:
        keep = {x.strip() for x in args.only.split(",")}
        tasks = [t for t in tasks if t.id in keep or t.family in keep]
    if args.split:
        tasks = [t for t in tasks if t.params.get("split") == args.split]
    tasks = tasks[: args.limit] if args.limit else tasks
    limits = S.Limits(
        max_iterations=args.max_iterations,
        task_timeout_s=args.task_timeout,
        max_output_tokens=args.max_output_tokens,
    )
    server = None
    if args.base_url:
        endpoint = S.Endpoint(
            args.base_url,
            args.model_name or "model",
            args.n_ctx,
            os.environ.get("BENCH_API_KEY", "x"),
        )
    else:
        gguf = resolve_gguf(args.model)
        alias = gguf.stem
        server = LlamaServer(
            gguf, alias, n_ctx=args.n_ctx, n_threads=args.threads, log_path=out / "server.log"
        )
        print(
            f"starting llama_cpp.server for {gguf.name} (n_ctx {args.n_ctx}, {args.threads} thread(s))",
            file=sys.stderr,
        )
        server.start()
        endpoint = S.Endpoint(server.base_url, alias, args.n_ctx)
    makers = {
        "plain": lambda: S.PlainSystem(endpoint, tok, limits),
        "rlmd-d1": lambda: S.RlmdSystem(endpoint, limits, 1),
        "rlmd-d2": lambda: S.RlmdSystem(endpoint, limits, 2),
        "rlms": lambda: S.RlmsSystem(endpoint, limits),
    }
    data: dict[str, Any] = {
        "meta": {
            "command": "python -m bench.quality " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "model": str(args.model or args.model_name),
            "endpoint": {
                "base_url": endpoint.base_url
                if args.base_url
                else "llama_cpp.server on 127.0.0.1 (started here)",
                "model": endpoint.model_name,
                "n_ctx": endpoint.n_ctx,
                "threads": args.threads,
            },
            "limits": limits.__dict__,
            "systems": names,
            "task_set": str(ts.root),
            "manifest": ts.manifest,
            "rlmd_home": os.environ.get("RLMD_HOME", ""),
        },
        "tasks": [t.to_dict() for t in tasks],
        "results": [],
    }
    built = {name: makers[name]() for name in names}
    if args.order == "system":  # a server's prompt cache then serves shared contexts
        plan = [(name, task) for name in names for task in tasks]
    else:  # every task gets all systems before the next: an interrupted run still compares
        plan = [(name, task) for task in tasks for name in names]
    try:
        for name, task in plan:
            system = built[name]
            t0 = time.perf_counter()
            log_pos = _log_size(server)
            result = system.run(task, ts, out)
            drained = False
            if result.status not in ("completed",) and server is not None:
                _drain(endpoint)  # an abandoned request may still be generating
                drained = True
            if server is not None:
                result.extra["server"] = server_stats(server.log_path, log_pos, drained)
            data["results"].append(result.to_dict())
            write_outputs(out, data)
            print(
                f"[{name}] {task.id} score {result.score:.2f} {result.status} "
                f"{result.wall_s:.0f}s {result.trajectory or ''}",
                file=sys.stderr,
                flush=True,
            )
            data["meta"].setdefault("elapsed_s", 0)
            data["meta"]["elapsed_s"] += time.perf_counter() - t0
    finally:
        if server is not None:
            server.stop()
        data["meta"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        write_outputs(out, data)
        report.plots(data, out / "plots")
    print(report.markdown(data))
    print(f"results: {out}", file=sys.stderr)
    return 0


def _log_size(server: Any) -> int:
    if server is None or server.log_path is None or not server.log_path.exists():
        return 0
    return server.log_path.stat().st_size


_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")


def server_stats(log_path: Path, start: int, drained: bool) -> dict[str, Any]:
    """What the llama.cpp server reports it did since byte ``start`` of its log: calls,
    prompt tokens it evaluated (its prompt cache skips a prefix shared with the previous
    call), tokens generated, and the seconds it spent on each. The drain request, if any,
    is taken out of the call count."""
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    prompts = [(float(ms), int(n)) for ms, n in _PROMPT_EVAL.findall(text)]
    gens = [(float(ms), int(n)) for ms, n in _EVAL.findall(text)]
    return {
        "calls": max(0, text.count("total time =") - (1 if drained else 0)),
        "prompt_tokens_evaluated": sum(n for _, n in prompts),
        "prompt_eval_s": round(sum(ms for ms, _ in prompts) / 1000, 1),
        "generated_tokens": sum(n for _, n in gens),
        "generation_s": round(sum(ms for ms, _ in gens) / 1000, 1),
    }


def _drain(endpoint: Any) -> None:
    """Wait until the server has finished any abandoned generation (one tiny request
    queues behind it), so the next run's time is its own."""
    import openai

    try:
        openai.OpenAI(
            base_url=endpoint.base_url, api_key="x", timeout=900, max_retries=0
        ).chat.completions.create(
            model=endpoint.model_name, messages=[{"role": "user", "content": "ok"}], max_tokens=1
        )
    except Exception:
        pass


def cmd_score(args: argparse.Namespace) -> int:
    ts = TaskSet.load(Path(args.tasks))
    answers = {}
    with open(args.answers, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                answers[row["id"]] = row.get("answer")
    total = 0.0
    for task in ts.tasks:
        s = task.score(answers.get(task.id))
        total += s.value
        print(
            json.dumps({"id": task.id, "family": task.family, "score": s.value, "detail": s.detail})
        )
    print(
        f"mean score {total / max(1, len(ts.tasks)):.3f} over {len(ts.tasks)} tasks",
        file=sys.stderr,
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    data = json.loads((out / "results.json").read_text())
    (out / "results.md").write_text(report.markdown(data))
    for p in report.plots(data, out / "plots"):
        print(p)
    print(report.markdown(data))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    before = json.loads((Path(args.before) / "results.json").read_text())
    after = json.loads((Path(args.after) / "results.json").read_text())
    print(report.compare(before, after, (args.label_before, args.label_after)))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("generate", help="write a task set")
    g.add_argument("--suite", default="smoke", choices=sorted(suites.SUITES))
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--model", help="size contexts with this GGUF's tokenizer (default: 4 chars/token)"
    )
    g.set_defaults(fn=cmd_generate)

    r = sub.add_parser("run", help="generate (or load) tasks, run the systems, score, report")
    r.add_argument("--suite", default="smoke", choices=sorted(suites.SUITES))
    r.add_argument("--tasks", help="an existing task set folder (instead of generating)")
    r.add_argument("--out")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--model", help="a known local model name or a GGUF path: served here")
    r.add_argument(
        "--base-url", help="an existing OpenAI-compatible endpoint (key: $BENCH_API_KEY)"
    )
    r.add_argument("--model-name", help="the model name at --base-url")
    r.add_argument("--systems", default=",".join(SYSTEMS))
    r.add_argument("--n-ctx", type=int, default=8192)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--max-iterations", type=int, default=6)
    r.add_argument("--max-output-tokens", type=int, default=512)
    r.add_argument(
        "--task-timeout", type=float, default=150.0, help="seconds per task for the RLM systems"
    )
    r.add_argument("--limit", type=int, help="only the first N tasks")
    r.add_argument("--only", help="comma-separated task ids or families")
    r.add_argument(
        "--split", choices=("train", "heldout"), help="only the tasks of one split (issue 15)"
    )
    r.add_argument("--order", choices=("task", "system"), default="task")
    r.set_defaults(fn=cmd_run)

    s = sub.add_parser("score", help="score another system's answers on a task set")
    s.add_argument("tasks")
    s.add_argument("answers")
    s.set_defaults(fn=cmd_score)

    p = sub.add_parser("report", help="tables and plots from OUT/results.json")
    p.add_argument("out")
    p.set_defaults(fn=cmd_report)

    c = sub.add_parser("compare", help="before/after table of two runs over the same tasks")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--label-before", default="before")
    c.add_argument("--label-after", default="after")
    c.set_defaults(fn=cmd_compare)

    args = ap.parse_args(argv)
    return args.fn(args)

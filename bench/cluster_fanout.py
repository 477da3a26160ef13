"""Fan-out on a Ray cluster vs the local executor, in one run.

    .venv/bin/python bench/cluster_fanout.py [--children 32] [--iterations 3]
        [--latency 0.2] [--rounds 2] [--address HOST:PORT]

A root run fans ``--children`` child runs out with one ``rlm_query_batched`` (all at once:
``max_concurrent_subcalls`` = children); each child takes ``--iterations`` root turns (a
cell each, ``FINAL`` in the last) of a scripted model that answers after ``--latency``
seconds. The same tree runs with the local executor and with the Ray executor on a
two-node cluster started on this machine (``bench/local_cluster.py``; or the cluster at
``--address``), interleaved for ``--rounds`` rounds. Per executor:

* **wall**: seconds for the whole tree (median over rounds);
* **dispatch** (burst): per child run, seconds from the start of the root's fan-out cell to
  the child's ``run.started`` event at the root (median, p95): all children start at once,
  so on a small machine this is mostly queueing; and the wall difference per child;
* **per-child dispatch overhead**: 8 children started one at a time (each from the previous
  one's end to its ``run.started`` at the root), Ray's median minus local's: what placing
  one child run on a node costs;
* **event latency** (Ray): seconds from an event's emission on a node to its emission on
  the root's bus, where the store records it (median, p95; local is a direct call);
* **same answer, same tree**: the answer and the stored tree's shape
  (:func:`bench.local_cluster.tree_shape`) equal the local executor's.

Targets (issue 14): per-child overhead under 50 ms; answers and trees unchanged. Exits 1 on
a missed target. Results also go to ``bench/out/cluster_fanout.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tui")]

from bench.local_cluster import LocalCluster, tree_shape  # noqa: E402
from rlmd.engine import Budget, RunConfig, run_task  # noqa: E402
from rlmd.engine.events import CellStarted, Event, RunFinished, RunStarted  # noqa: E402
from rlmd.models.base import ModelSpec  # noqa: E402
from rlmd.models.registry import Registry  # noqa: E402
from rlmd.store import Store  # noqa: E402

TARGET_OVERHEAD_S = 0.050


def _fence(code: str) -> str:
    return f"```repl\n{code}\n```\n"


async def fanout_model(messages: list[dict[str, Any]]) -> str:
    """The scripted model: the root question ``fan out N K LAT`` fans N children out; a
    child (``child I of K LAT``) answers in its K-th turn. Every reply waits LAT seconds."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    root = re.search(r"fan out (\d+) (\d+) ([\d.]+)", first)
    child = re.search(r"child (\d+) of (\d+) ([\d.]+)", first)
    if child is not None:
        index, turns, latency = int(child[1]), int(child[2]), float(child[3])
        await asyncio.sleep(latency)
        if turn + 1 < turns:
            return _fence(f"step_{turn} = {index} * {turn + 1}\nprint(step_{turn})")
        return _fence(f"FINAL('child {index}: ' + str(len(context)))")
    assert root is not None, first[:200]
    n, turns, latency = int(root[1]), int(root[2]), float(root[3])
    await asyncio.sleep(latency)
    if turn == 0:
        return _fence(
            f"answers = rlm_query_batched([f'child {{i}} of {turns} {latency}' for i in "
            f"range({n})], contexts=[context] * {n})\nprint(len(answers))"
        )
    return _fence("FINAL(' | '.join(answers))")


def registry() -> Registry:
    reg = Registry()
    from bench import cluster_fanout  # by module: the nodes import it by name

    reg.add(
        ModelSpec(
            name="fan",
            provider="scripted",
            model="fan",
            options={"callable": cluster_fanout.fanout_model},
        )
    )
    return reg


async def one_tree(
    args: argparse.Namespace,
    executor: Any,
    store_path: Path,
    *,
    children: int | None = None,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """One tree of ``children`` (default ``args.children``) started ``concurrency`` at a
    time (default: all at once)."""
    reg = registry()
    n = children or args.children
    cfg = RunConfig(
        root_model="fan",
        budget=Budget(max_iterations=args.iterations + 2, max_depth=2),
        max_concurrent_subcalls=concurrency or n,
        sandbox_options={"spare_kernel": True},
    )
    events: list[Event] = []
    store = Store(store_path)
    question = f"fan out {n} {args.iterations} {args.latency}"
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        result = await run_task(
            question,
            "y" * 2_000,
            cfg,
            get_model=reg.get,
            sinks=(store.record, events.append),
            executor=executor,
        )
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        shape = tree_shape(store.tree(result.run_id))
    finally:
        store.close()
        await reg.aclose()
    fan_cell = next(e for e in events if isinstance(e, CellStarted) and e.depth == 0)
    dispatch = [e.ts - fan_cell.ts for e in events if isinstance(e, RunStarted) and e.depth == 1]
    if concurrency == 1:  # one after another: from the previous child's end to the next's start
        ends = sorted(e.ts for e in events if isinstance(e, RunFinished) and e.depth == 1)
        starts = sorted(e.ts for e in events if isinstance(e, RunStarted) and e.depth == 1)
        dispatch = [starts[0] - fan_cell.ts] + [
            s - e for s, e in zip(starts[1:], ends, strict=False)
        ]
    nodes = {
        (e.sandbox or {}).get("node", {}).get("id", "local")  # type: ignore[union-attr]
        for e in events
        if isinstance(e, RunStarted) and e.depth == 1
    }
    return {
        "status": result.status,
        "answer": result.answer,
        "shape": shape,
        "wall_s": wall,
        "root_cpu_s": cpu,
        "events": len(events),
        "dispatch_s": dispatch,
        "children": len(dispatch),
        "nodes": len(nodes),
    }


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median": statistics.median(xs),
        "p95": xs[max(0, int(round(0.95 * len(xs))) - 1)],
        "n": len(xs),
    }


async def measure(args: argparse.Namespace, address: str) -> dict[str, Any]:
    from rlmd.cluster.ray_executor import RayExecutor

    executor = RayExecutor(address)
    await executor.start()
    folder = Path(tempfile.mkdtemp(prefix="rlmd-fanout-"))
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    try:
        await one_tree(args, None, folder / "warm-local.db")  # warm-up: kernels, imports
        await one_tree(args, executor, folder / "warm-ray.db")
        executor.stats.event_latency_s.clear()
        executor.stats.dispatch_s.clear()
        for r in range(args.rounds):
            order = ["local", "ray"] if r % 2 == 0 else ["ray", "local"]
            for name in order:
                ex = executor if name == "ray" else None
                runs[name].append(await one_tree(args, ex, folder / f"{name}-{r}.db"))
        nodes_used = len(executor.stats.by_node)
        latency = list(executor.stats.event_latency_s)
        # One child at a time: the dispatch cost itself, without a burst's queueing.
        one_by_one: dict[str, list[float]] = {"local": [], "ray": []}
        for r in range(args.rounds):
            for name in ["local", "ray"] if r % 2 == 0 else ["ray", "local"]:
                ex = executor if name == "ray" else None
                tree = await one_tree(
                    args, ex, folder / f"seq-{name}-{r}.db", children=8, concurrency=1
                )
                one_by_one[name] += tree["dispatch_s"]
    finally:
        executor.close()
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "runs": runs,
        "event_latency_s": latency,
        "ray_nodes": nodes_used,
        "one_by_one": one_by_one,
    }


def report(args: argparse.Namespace, data: dict[str, Any]) -> int:
    runs = data["runs"]
    local, ray_ = runs["local"], runs["ray"]
    wall = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    cpu = {
        k: statistics.median(r["root_cpu_s"] for r in v) / args.children for k, v in runs.items()
    }
    events = statistics.median(r["events"] for r in runs["ray"]) / args.children
    disp = {k: _stats([d for r in v for d in r["dispatch_s"]]) for k, v in runs.items()}
    lat = (
        _stats(data["event_latency_s"])
        if data["event_latency_s"]
        else {"median": 0, "p95": 0, "n": 0}
    )
    burst = disp["ray"]["median"] - disp["local"]["median"]
    seq = {k: _stats(v) for k, v in data["one_by_one"].items()}
    overhead = seq["ray"]["median"] - seq["local"]["median"]
    amortised = (wall["ray"] - wall["local"]) / args.children
    same_answer = all(
        r["answer"] == local[0]["answer"] and r["status"] == "completed" for r in local + ray_
    )
    same_tree = all(r["shape"] == local[0]["shape"] for r in local + ray_)
    for name, rs in runs.items():  # say what differs, so a missed target can be read
        for i, r in enumerate(rs):
            if r["answer"] != local[0]["answer"] or r["shape"] != local[0]["shape"]:
                print(f"differs: {name} round {i}: {r['status']}: {str(r['answer'])[:300]}")
    load = os.getloadavg()
    print(
        f"fan-out of {args.children} children x {args.iterations} iterations, model latency {args.latency * 1000:.0f} ms, {args.rounds} rounds; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print(
        f"{'executor':<8} {'wall s':>8} {'dispatch median ms':>19} {'p95 ms':>8} {'children/s':>11}"
    )
    for k in ("local", "ray"):
        print(
            f"{k:<8} {wall[k]:>8.2f} {disp[k]['median'] * 1000:>19.1f} {disp[k]['p95'] * 1000:>8.1f} {args.children / wall[k]:>11.1f}"
        )
    print(
        f"ray nodes used: {data['ray_nodes']}; burst dispatch (ray - local, median): "
        f"{burst * 1000:.1f} ms; wall difference per child: {amortised * 1000:.1f} ms"
    )
    print(
        f"one child at a time (8 children): dispatch median local {seq['local']['median'] * 1000:.1f} ms, "
        f"ray {seq['ray']['median'] * 1000:.1f} ms; per-child dispatch overhead "
        f"{overhead * 1000:.1f} ms (target < {TARGET_OVERHEAD_S * 1000:.0f} ms)"
    )
    print(
        f"root process CPU per child: local {cpu['local'] * 1000:.1f} ms (it runs the children's "
        f"engines too), ray {cpu['ray'] * 1000:.1f} ms (dispatch, events, store); {events:.0f} events per child"
    )
    print(
        f"event latency node -> root store: median {lat['median'] * 1000:.1f} ms, p95 {lat['p95'] * 1000:.1f} ms over {lat['n']} events"
    )
    print(f"same answer: {same_answer}; same stored tree: {same_tree}")
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "cluster_fanout.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "load": load,
                "wall_s": wall,
                "dispatch_s": disp,
                "overhead_s": overhead,
                "one_by_one_dispatch_s": seq,
                "burst_dispatch_difference_s": burst,
                "wall_difference_per_child_s": amortised,
                "root_cpu_per_child_s": cpu,
                "events_per_child": events,
                "event_latency_s": lat,
                "ray_nodes": data["ray_nodes"],
                "same_answer": same_answer,
                "same_tree": same_tree,
            },
            indent=1,
        )
    )
    missed = []
    if overhead >= TARGET_OVERHEAD_S:
        missed.append("per-child overhead")
    if not (same_answer and same_tree):
        missed.append("same answer and tree")
    if data["ray_nodes"] < 2:
        missed.append("both nodes used")
    if missed:
        print(f"MISSED TARGETS: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--children", type=int, default=32)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--latency", type=float, default=0.2, help="seconds per model reply")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--address", help="an existing cluster (default: start two nodes here)")
    args = p.parse_args()
    cluster = None
    if args.address is None:
        cluster = LocalCluster()
        cluster.start_head()
        from rlmd.cluster.ray_executor import connect

        connect(cluster.address)
        cluster.add_node("rlmd_worker")
    try:
        data = asyncio.run(measure(args, args.address or cluster.address))  # type: ignore[union-attr]
    finally:
        import ray

        ray.shutdown()
        if cluster is not None:
            cluster.stop()
    return report(args, data)


if __name__ == "__main__":
    sys.exit(main())

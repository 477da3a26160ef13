"""Synthetic trajectories in the store's ``tree()`` shape: fixed ids and timestamps, for the
snapshot tests, the big-trajectory test and ``bench/tui_scroll.py``."""

from __future__ import annotations

from typing import Any

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def _run(run_id: str, question: str, **extra: Any) -> dict[str, Any]:
    run = {
        "id": run_id,
        "root_run_id": extra.pop("root_run_id", run_id),
        "parent_run_id": None,
        "parent_node_id": None,
        "depth": 0,
        "status": "completed",
        "question": question,
        "answer": None,
        "answer_source": None,
        "error": None,
        "root_model": "qwen2.5-coder-1.5b",
        "sub_model": "qwen2.5-coder-0.5b",
        "workspace": "/home/dev/proj",
        "usage": None,
        "iterations": 0,
        "subcalls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
        "started_at": T0,
        "finished_at": T0 + 12.5,
        "budget": {"max_iterations": 10, "max_depth": 2},
        "nodes": [],
        "runs": [],
    }
    run.update(extra)
    return run


def _node(node_id: str, run_id: str, seq: int, kind: str, **extra: Any) -> dict[str, Any]:
    node = {
        "id": node_id,
        "run_id": run_id,
        "parent_id": None,
        "seq": seq,
        "kind": kind,
        "status": "ok",
        "role": None,
        "model": None,
        "input_tokens": None,
        "output_tokens": None,
        "cost_usd": None,
        "latency_s": None,
        "data": {},
        "children": [],
        "runs": [],
    }
    node.update(extra)
    return node


def demo_trees() -> list[dict[str, Any]]:
    """Three runs: a completed one with a child run and an error, a budget stop, a failure."""
    root = _run(
        "r0000000000000001",
        "Which function returns 42, and who calls it?",
        answer="pkg.core.helper returns 42; main.py calls it",
        answer_source="final",
        iterations=2,
        subcalls=1,
        input_tokens=5200,
        output_tokens=640,
        cost_usd=0.0031,
        usage={
            "total": {"calls": 4, "input_tokens": 6100, "output_tokens": 700, "cost_usd": 0.0035},
            "by_model": {
                "qwen2.5-coder-1.5b": {"calls": 2, "input_tokens": 5200, "output_tokens": 640},
                "qwen2.5-coder-0.5b": {"calls": 2, "input_tokens": 900, "output_tokens": 60},
            },
            "by_depth": {"0": {"calls": 2, "cost_usd": 0.0031}, "1": {"calls": 2}},
            "wall_time_s": 12.5,
        },
        tree={
            "runs": 2,
            "max_depth": 1,
            "iterations": 3,
            "subcalls": 1,
            "input_tokens": 6100,
            "output_tokens": 700,
            "cost_usd": 0.0035,
        },
    )
    rid = root["id"]
    child = _run(
        "r0000000000000002",
        "Find the callers of helper in this list",
        root_run_id=rid,
        parent_run_id=rid,
        parent_node_id="n04",
        depth=1,
        answer="main.py",
        iterations=1,
        started_at=T0 + 4,
        finished_at=T0 + 7,
    )
    child["nodes"] = [
        _node(
            "c01",
            child["id"],
            1,
            "iteration",
            data={"index": 0},
            children=[
                _node(
                    "c02",
                    child["id"],
                    2,
                    "model_call",
                    role="root",
                    model="qwen2.5-coder-0.5b",
                    input_tokens=900,
                    output_tokens=60,
                    latency_s=0.8,
                    data={"response": "```repl\nFINAL('main.py')\n```"},
                )
            ],
        )
    ]
    it1 = _node(
        "n01",
        rid,
        1,
        "iteration",
        data={"index": 0},
        children=[
            _node(
                "n02",
                rid,
                2,
                "model_call",
                role="root",
                model="qwen2.5-coder-1.5b",
                input_tokens=2400,
                output_tokens=320,
                latency_s=1.9,
                cost_usd=0.0014,
                data={
                    "messages": [
                        {"role": "system", "content": "You answer questions about `context`."},
                        {"role": "user", "content": "Question: which function returns 42?"},
                    ],
                    "response": "```repl\nhits = grep('return 42')\nprint(hits)\n```",
                    "finish_reason": "stop",
                },
            ),
            _node(
                "n03",
                rid,
                3,
                "cell",
                latency_s=0.12,
                data={
                    "index": 0,
                    "code": "hits = grep('return 42')\nprint(hits)\nundefined_name",
                    "stdout": "pkg/core.py:2:    return 42\n",
                    "error": "NameError: name 'undefined_name' is not defined",
                },
                status="error",
            ),
        ],
    )
    cell = _node(
        "n04",
        rid,
        5,
        "cell",
        latency_s=3.1,
        data={
            "index": 0,
            "code": "callers = rlm_query('Find the callers of helper')\nFINAL(callers)",
            "stdout": "",
            "final": "pkg.core.helper returns 42; main.py calls it",
        },
        runs=[child],
    )
    it2 = _node(
        "n05",
        rid,
        4,
        "iteration",
        data={"index": 1},
        children=[
            _node(
                "n06",
                rid,
                4,
                "model_call",
                role="root",
                model="qwen2.5-coder-1.5b",
                input_tokens=2800,
                output_tokens=320,
                latency_s=2.2,
                cost_usd=0.0017,
                data={"response": "```repl\ncallers = rlm_query(...)\n```"},
            ),
            cell,
        ],
    )
    root["nodes"] = [it1, it2]
    budget = _run(
        "r0000000000000003",
        "Summarise every module in the repo",
        status="max_iterations",
        answer="Modules: core, util (partial)",
        answer_source="extraction",
        iterations=10,
        started_at=T0 + 3600,
        finished_at=T0 + 3700,
        workspace="/home/dev/other",
        tree={"runs": 1, "max_depth": 0, "iterations": 10, "input_tokens": 40000},
    )
    failed = _run(
        "r0000000000000004",
        "Why does the build fail?",
        status="failed",
        error="model qwen2.5-coder-1.5b: connection refused",
        started_at=T0 + 7200,
        finished_at=T0 + 7201,
        root_model="openai:gpt-4o-mini",
    )
    return [root, budget, failed]


def big_tree(nodes: int = 10_000, output_bytes: int = 0) -> dict[str, Any]:
    """One run with ``nodes`` nodes (iterations of a model call and a cell); with
    ``output_bytes`` the last cell's stdout is that big (numbered lines)."""
    run = _run("rbig000000000001", f"A run with {nodes} nodes", iterations=nodes // 3)
    seq = 0
    iterations = []
    for i in range(max(1, nodes // 3)):
        it = _node(f"i{i:06d}", run["id"], seq, "iteration", data={"index": i})
        it["children"] = [
            _node(
                f"m{i:06d}",
                run["id"],
                seq + 1,
                "model_call",
                role="root",
                input_tokens=100 + i,
                output_tokens=20,
                latency_s=0.5,
                data={"response": f"```repl\nprint({i})\n```"},
            ),
            _node(
                f"c{i:06d}",
                run["id"],
                seq + 2,
                "cell",
                data={"index": 0, "code": f"print({i})", "stdout": f"{i}\n"},
            ),
        ]
        seq += 3
        iterations.append(it)
    if output_bytes:
        line = "x" * 70
        count = output_bytes // (len(line) + 8) + 1
        text = "\n".join(f"{n:06d} {line}" for n in range(count))
        iterations[-1]["children"][-1]["data"]["stdout"] = text
    run["nodes"] = iterations
    return run

"""One RLM tree across a real two-node Ray cluster on this machine (marker ``ray``: skip
with ``-m "not ray"``): child runs on both nodes, one stored tree, one budget, one cancel,
a lost node. The cluster starts once per test session (``ray start`` takes ~10 s here)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from helpers import cluster_scripts  # noqa: E402
from helpers.cli import rlmd  # noqa: E402
from helpers.scripted import scripted_registry  # noqa: E402
from helpers.server import Daemon, event, finished, make_project  # noqa: E402

from bench.local_cluster import LocalCluster, tree_shape  # noqa: E402
from rlmd.cluster.ray_executor import RayExecutor, connect  # noqa: E402
from rlmd.engine import Budget, RunConfig, run_task  # noqa: E402
from rlmd.engine.events import CellStarted, Event, RunFinished, RunStarted  # noqa: E402
from rlmd.store import Store  # noqa: E402

pytestmark = pytest.mark.ray

SECRET = "RLMD_TEST_SECRET"


@pytest.fixture(scope="session")
def cluster():
    """A head node and one worker node, each a real raylet; this process is the driver."""
    c = LocalCluster()
    try:
        c.start_head()
        os.environ[SECRET] = "s3cret-value"
        connect(c.address, env=[SECRET])
        c.worker = c.add_node("rlmd_worker")
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.stop()


@pytest.fixture
async def executor(cluster):
    ex = RayExecutor(
        cluster.address,
        nodes=[n for n in cluster.node_ids() if n != getattr(cluster, "doomed", None)],
    )
    await ex.start()
    yield ex
    ex.close()


def config(fn, **kw: Any) -> tuple[Any, RunConfig]:
    registry = scripted_registry(root=fn, sub=fn)
    budget = Budget(**{"max_iterations": 6, "max_depth": 2, **kw.pop("budget", {})})
    cfg = RunConfig(
        root_model="root", sub_model="sub", budget=budget, max_concurrent_subcalls=8, **kw
    )
    return registry, cfg


def all_runs(tree: dict[str, Any]) -> list[dict[str, Any]]:
    found = [tree]

    def walk(n: dict[str, Any]) -> None:
        for r in n["runs"]:
            found.extend(all_runs(r))
        for c in n["children"]:
            walk(c)

    for n in tree["nodes"]:
        walk(n)
    found.extend(r for sub in tree["runs"] for r in all_runs(sub))
    return found


async def test_fan_out_over_both_nodes_gives_the_local_answer_and_tree(executor, cluster, tmp_path):
    context = "x" * 100_000  # over the inline limit: one object for all eight children
    trees = {}
    for name, ex in (("local", None), ("ray", executor)):
        registry, cfg = config(cluster_scripts.fan_out)
        store = Store(tmp_path / f"{name}.db")
        try:
            result = await run_task(
                "fan out", context, cfg, get_model=registry.get, sinks=(store.record,), executor=ex
            )
            trees[name] = (result, store.tree(result.run_id))
        finally:
            store.close()
            await registry.aclose()
    (local, local_tree), (remote, remote_tree) = trees["local"], trees["ray"]
    assert local.status == remote.status == "completed"
    assert remote.answer == local.answer
    assert remote.answer.count(": 100000") == cluster_scripts.FAN_OUT
    assert tree_shape(remote_tree) == tree_shape(local_tree)
    # both nodes ran children, and the store says where each ran
    assert set(executor.stats.by_node) == {*cluster.node_ids()} - {getattr(cluster, "doomed", None)}
    assert min(executor.stats.by_node.values()) >= 1
    children = [r for r in all_runs(remote_tree) if r["depth"] == 1]
    assert len(children) == cluster_scripts.FAN_OUT
    assert executor.stats.context_puts == 1
    # the tree's usage is the sum of its runs' calls, on whichever node they ran
    calls = [
        n for r in all_runs(remote_tree) for n in _flat(r["nodes"]) if n["kind"] == "model_call"
    ]
    total = remote.usage["total"]
    assert total["calls"] == len(calls) == local.usage["total"]["calls"]
    assert total["total_tokens"] == sum(
        (c["data"].get("input_tokens") or 0) + (c["data"].get("output_tokens") or 0) for c in calls
    )
    assert (
        remote.usage["by_depth"] == {k: {**v} for k, v in local.usage["by_depth"].items()}
        or remote.usage["by_depth"].keys() == local.usage["by_depth"].keys()
    )


def _flat(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n in nodes:
        out.append(n)
        out.extend(_flat(n["children"]))
    return out


@pytest.mark.parametrize("pushes", ["sent", "lost"])
async def test_a_token_budget_stops_the_tree_on_every_node(executor, tmp_path, monkeypatch, pushes):
    if pushes == "lost":  # the root's spend pushes never arrive: only admission holds the bound
        monkeypatch.setattr(executor, "_on_tree_event", lambda tree, event: None)
    registry, cfg = config(
        cluster_scripts.endless,
        budget={"max_tokens": 20_000, "max_iterations": 50},
        extraction=False,
    )
    events: list[Event] = []
    store = Store(tmp_path / "b.db")
    try:
        result = await run_task(
            "budget",
            "ctx",
            cfg,
            get_model=registry.get,
            sinks=(store.record, events.append),
            executor=executor,
        )
        tree = store.tree(result.run_id)
    finally:
        store.close()
        await registry.aclose()
    runs = all_runs(tree)
    children = [r for r in runs if r["depth"] == 1]
    assert result.status == "max_tokens"
    assert len(children) == cluster_scripts.FAN_OUT
    assert {r["status"] for r in children} == {"max_tokens"}
    nodes = {e.sandbox["node"]["id"] for e in events if isinstance(e, RunStarted) and e.depth == 1}
    assert len(nodes) == 2
    # The bound (rlmd/cluster/ledger.py): the limit plus the calls in flight when it was
    # crossed, at most one per live run (these runs make no batched sub-calls), however late
    # the root's pushes arrive: each remote call waits for the root's admission.
    calls = [e for e in events if e.kind == "model_call.finished" and e.error is None]
    spent = sum(e.input_tokens + e.output_tokens for e in calls)
    biggest = max(e.input_tokens + e.output_tokens for e in calls)
    assert spent == result.usage["total"]["total_tokens"]
    assert 20_000 <= spent <= 20_000 + len(runs) * biggest


async def test_cancel_stops_the_remote_cells_and_their_kernels(executor, tmp_path):
    registry, cfg = config(
        cluster_scripts.sleepy,
        budget={"cell_timeout_s": 900},
        sandbox_options={"spare_kernel": False},  # every kernel is a cell's: none kept ready
    )
    started: list[Event] = []
    cells = asyncio.Event()

    def watch(event: Event) -> None:
        started.append(event)
        if (
            sum(isinstance(e, CellStarted) and e.depth == 1 for e in started)
            == cluster_scripts.FAN_OUT
        ):
            cells.set()

    store = Store(tmp_path / "c.db")
    task = asyncio.ensure_future(
        run_task(
            "cancel",
            "ctx",
            cfg,
            get_model=registry.get,
            sinks=(store.record, watch),
            executor=executor,
        )
    )
    try:
        await asyncio.wait_for(cells.wait(), 240)
        kernels = _kernels_of(started)
        assert kernels, "the remote cells' kernel processes were not found"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await still_running(kernels, within_s=60) == []
        root = next(e for e in started if isinstance(e, RunStarted) and e.depth == 0)
        runs = all_runs(store.tree(root.run_id))
        assert len(runs) == 1 + cluster_scripts.FAN_OUT
        assert {r["status"] for r in runs} == {"cancelled"}
    finally:
        task.cancel()
        store.close()
        await registry.aclose()


async def still_running(procs: list[Any], within_s: float) -> list[Any]:
    """The processes still running after up to ``within_s`` seconds (polled without
    blocking the event loop: the executor's streams are served meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    alive = list(procs)
    while alive and loop.time() < deadline:
        await asyncio.sleep(0.2)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return alive


def _kernels_of(events: list[Event]) -> list[Any]:
    """The processes under the node actors that ran the child runs (their kernels; the
    actor's pid is in ``sandbox.node``, the run's ``pid`` is the recording process's)."""
    pids = {e.sandbox["node"]["pid"] for e in events if isinstance(e, RunStarted) and e.depth == 1}
    found = []
    for pid in pids:
        try:
            found += psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return found


async def test_api_keys_reach_the_workers_never_the_sandboxes(executor):
    registry, cfg = config(cluster_scripts.env_probe)
    try:
        result = await run_task("env", "ctx", cfg, get_model=registry.get, executor=executor)
    finally:
        await registry.aclose()
    assert (result.status, result.answer) == ("completed", "absent")

    @ray.remote(num_cpus=0)
    def worker_env() -> str | None:
        return os.environ.get(SECRET)

    assert ray.get(worker_env.remote()) == "s3cret-value"


async def test_a_lost_node_ends_its_runs_as_interrupted_and_leaves_no_process(cluster, tmp_path):
    """A third node takes half the children; its raylet is killed mid-cell."""
    doomed = cluster.doomed = cluster.add_node("rlmd_doomed")
    ex = RayExecutor(cluster.address, nodes=[cluster.worker, doomed])
    await ex.start()
    registry, cfg = config(
        cluster_scripts.sleepy,
        budget={"cell_timeout_s": 900},
        sandbox_options={"spare_kernel": False},  # every kernel is a cell's: none kept ready
    )
    events: list[Event] = []
    cells, lost = asyncio.Event(), asyncio.Event()

    def watch(event: Event) -> None:
        events.append(event)
        if (
            sum(isinstance(e, CellStarted) and e.depth == 1 for e in events)
            == cluster_scripts.FAN_OUT
        ):
            cells.set()
        if (
            sum(isinstance(e, RunFinished) and e.status == "interrupted" for e in events)
            >= ex.stats.by_node.get(doomed, 0)
            > 0
        ):
            lost.set()

    store = Store(tmp_path / "l.db")
    task = asyncio.ensure_future(
        run_task(
            "lose", "ctx", cfg, get_model=registry.get, sinks=(store.record, watch), executor=ex
        )
    )
    try:
        await asyncio.wait_for(cells.wait(), 240)
        on_doomed = [
            e
            for e in events
            if isinstance(e, RunStarted) and e.depth == 1 and e.sandbox["node"]["id"] == doomed
        ]
        assert on_doomed
        doomed_procs = _kernels_of(on_doomed) + [
            psutil.Process(e.sandbox["node"]["pid"]) for e in on_doomed
        ]
        cluster.kill_node(doomed)
        await asyncio.wait_for(lost.wait(), 120)
        # the actor and every kernel it started are gone
        assert await still_running(doomed_procs, within_s=60) == []
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        root = next(e for e in events if isinstance(e, RunStarted) and e.depth == 0)
        by_id = {r["id"]: r for r in all_runs(store.tree(root.run_id))}
        for e in on_doomed:
            assert by_id[e.run_id]["status"] == "interrupted"
            assert "was lost" in by_id[e.run_id]["error"]
        others = [r for r in by_id.values() if r["id"] not in {e.run_id for e in on_doomed}]
        assert {r["status"] for r in others} == {"cancelled"}
    finally:
        task.cancel()
        store.close()
        await registry.aclose()
        ex.close()


SCRIPTS = Path(cluster_scripts.__file__).resolve()
FAN_OUT_MODEL = f"scripted:{SCRIPTS}:fan_out"


def _env_with_tests() -> dict[str, str]:
    """This environment with tests/ importable (the scripted models import helpers)."""
    extra = str(SCRIPTS.parents[1])
    return {"PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), extra])}


def test_rlmd_run_cluster_runs_the_children_on_the_cluster(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env_with_tests()["PYTHONPATH"])
    out = rlmd(
        "run",
        "fan out",
        "--context",
        "-",
        "--model",
        FAN_OUT_MODEL,
        "--cluster",
        cluster.address,
        "--json",
        "--quiet",
        home=tmp_path,
        input="some text",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "completed"
    assert result["answer"].count(": 9") == cluster_scripts.FAN_OUT  # len("some text")
    store = Store(Path(result["store"]))
    try:
        children = store.child_runs(result["run_id"])
    finally:
        store.close()
    assert len(children) == cluster_scripts.FAN_OUT


def test_doctor_checks_the_cluster_and_every_node(cluster, tmp_path):
    out = rlmd(
        "doctor",
        "--json",
        "--no-sandboxes",
        "--cluster",
        cluster.address,
        home=tmp_path,
        timeout=300,
    )
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["cluster"]["status"] == "ok", checks["cluster"]
    nodes = [c for name, c in checks.items() if name.startswith("cluster node ")]
    assert len(nodes) == len(cluster.node_ids())
    for node in nodes:  # warn: works, but the sandbox there is not fully isolated
        assert node["status"] in ("ok", "warn"), node
        assert "ms start + cell" in node["detail"]


def test_doctor_says_when_no_cluster_answers(tmp_path):
    out = rlmd(
        "doctor", "--json", "--no-sandboxes", "--cluster", "127.0.0.1:1", home=tmp_path, timeout=300
    )
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert out.returncode == 1
    assert checks["cluster"]["status"] == "fail" and "ray start --head" in checks["cluster"]["fix"]


async def test_serve_cluster_streams_remote_children_live_to_clients(cluster, tmp_path):
    project = make_project(tmp_path)
    daemon = Daemon(
        tmp_path / "home",
        "--cluster",
        cluster.address,
        "--idle-timeout",
        "0",
        env=_env_with_tests(),
    )
    (tmp_path / "home").mkdir()
    daemon.start(timeout=120)
    try:
        c = await daemon.client()
        try:
            await c.command("rlmd.subscribe", {"events": "full", "progress": "none"})
            started = await c.command(
                "rlmd.task.start",
                {
                    "workspace": str(project),
                    "question": "fan out",
                    "models": {"root": FAN_OUT_MODEL},
                },
            )
            await c.wait_for(event(started["run_id"], "run.started", depth=1), timeout=240)
            status = (await c.wait_for(finished(started["run_id"]), timeout=240))["params"]
        finally:
            await c.close()
    finally:
        daemon.stop()
    assert status["status"] == "completed", status
    assert status["answer"].count("part ") == cluster_scripts.FAN_OUT

"""Crash safety: SIGKILL of a sandbox kernel mid-task, and of the daemon mid-run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3

import pytest
from helpers.server import CELLS, ECHO, Daemon, event, finished, make_project, question, run_to_end

pytestmark = pytest.mark.timeout(90)


def params(project, *cells, model=CELLS):
    return {"workspace": str(project), "question": question(*cells), "models": {"root": model}}


async def kernel_pid(client, project) -> int:
    listed = await client.command("rlmd.workspace.list")
    return next(w["pid"] for w in listed["workspaces"] if w["workspace"] == str(project))


async def test_sigkill_of_the_sandbox_kernel_mid_task(tmp_path):
    d = Daemon(tmp_path / "home", "--idle-timeout", "0")
    (tmp_path / "home").mkdir()
    d.start()
    project = make_project(tmp_path)
    c = await d.client()
    try:
        await run_to_end(c, params(project, "keep = 5", "FINAL(keep)"))
        st = await c.command(
            "rlmd.task.start",
            params(project, "import time\ntime.sleep(10)", "FINAL(len(context))"),
        )
        await c.wait_for(event(st["run_id"], "cell.started"))
        pid = await kernel_pid(c, project)
        os.kill(pid, signal.SIGKILL)
        done = (await c.wait_for(finished(st["run_id"]), timeout=20))["params"]
        assert done["status"] == "completed" and done["answer"] == "2"
        assert done["sandbox_restarts"] == 1
        assert any("workspace sandbox was restarted" in n and "keep" in n for n in done["notes"])
        assert any("restored" in n for n in done["notes"])
        cell = c.events(st["run_id"], "cell.finished")[0]["data"]
        assert cell["kernel_restarted"] and "SIGKILL" in cell["error"]
        assert await kernel_pid(c, project) != pid
        # the variable lost with the kernel came back from the checkpoint after the task
        var = await c.command("rlmd.workspace.variables", {"workspace": str(project)})
        assert [v["name"] for v in var["variables"]] == ["keep"]
        assert d.alive
    finally:
        await c.close()
        d.stop()


async def test_sigkill_of_the_daemon_mid_run_then_restart(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    d = Daemon(home, "--idle-timeout", "0").start()
    project = make_project(tmp_path)
    c = await d.client()
    pid = None
    try:
        await run_to_end(c, params(project, "keep = [1, 2]", "FINAL(len(keep))"))
        st = await c.command("rlmd.task.start", params(project, "import time\ntime.sleep(30)"))
        run_id = st["run_id"]
        await c.wait_for(event(run_id, "cell.started"))
        pid = await kernel_pid(c, project)
        d.kill()
    finally:
        await c.close()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    d2 = Daemon(home, "--idle-timeout", "0").start()
    c = await d2.client()
    try:
        health = await c.command("rlmd.health")
        assert run_id in health["interrupted_at_start"]
        got = await c.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        assert got["run"]["status"] == "interrupted"
        assert "time.sleep(30)" in str(got["tree"])  # everything up to the step in flight
        status = await c.command("rlmd.task.status", {"run_id": run_id})
        assert status["source"] == "store" and status["status"] == "interrupted"
        # the workspace comes back from its checkpoint, and the model is told so
        done = await run_to_end(c, params(project, model=ECHO))
        assert "restored from the workspace checkpoint" in done["answer"]
        assert "keep" in done["answer"]
        again = await run_to_end(c, params(project, "FINAL(sum(keep))"))
        assert again["answer"] == "3"
    finally:
        await c.close()
        d2.stop()


async def test_sigkill_of_the_daemon_keeps_every_step_it_announced(tmp_path):
    """The store journals each step (``rlmd/store/journal.py``) and writes the database
    later; with that delay set past the test, none of the run's cells is in the database
    when the daemon is killed, and the next open writes every cell the client saw finish,
    and the one in flight."""
    from rlmd.store import Store

    home = tmp_path / "home"
    home.mkdir()
    prelude = "import rlmd.store.db\nrlmd.store.db.FLUSH_DELAY_S = 3600.0\n"
    d = Daemon(home, "--idle-timeout", "0", prelude=prelude).start()
    project = make_project(tmp_path)
    c = await d.client()
    cells = [f"print('step {i}')" for i in range(4)] + ["import time\ntime.sleep(60)"]
    pid = None
    try:
        run_id = (await c.command("rlmd.task.start", params(project, *cells)))["run_id"]
        await c.wait_for(
            lambda n: event(run_id, "cell.started")(n) and "sleep" in str(n["params"]["data"]),
            timeout=60,
        )
        pid = await kernel_pid(c, project)
        done = [e["node_id"] for e in c.events(run_id, "cell.finished")]
        in_flight = c.events(run_id, "cell.started")[-1]["node_id"]
        d.kill()
    finally:
        await c.close()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    with sqlite3.connect(home / "rlmd.db") as conn:
        in_db = {row[0] for row in conn.execute("SELECT id FROM nodes")}
    assert len(done) == 4 and not in_db & {*done, in_flight}  # in the journal only

    with Store(home / "rlmd.db", check_interrupted=True) as store:
        run = store.get_run(run_id)
        nodes = {n["id"]: n for n in store.nodes(run_id)}
    assert run is not None and run["status"] == "interrupted"
    assert [(nodes[i]["status"], nodes[i]["data"]["stdout"]) for i in done] == [
        ("ok", f"step {i}\n") for i in range(4)
    ]
    assert nodes[in_flight]["status"] == "error" and "sleep(60)" in nodes[in_flight]["data"]["code"]


def _leftovers(scratch, pid: int) -> list[str]:
    """Working folders of daemon ``pid`` still in ``scratch`` (its TMPDIR)."""
    return [n for n in os.listdir(scratch) if n.startswith("rlmd-") and f"-{pid}-" in n]


def _containers_of(pid: int) -> list[str]:
    from rlmd.sandbox.docker import engine

    found = engine.client().containers.list(
        all=True, sparse=True, filters={"label": f"rlmd.pid={pid}"}
    )  # sparse: no inspect per container, which raced the reaper removing one (404)
    return [c.id for c in found]


@pytest.mark.timeout(900)
async def test_twenty_sigkills_mid_run_keep_the_store_whole_and_leave_nothing_behind(tmp_path):
    """Issue 11: 20 SIGKILLs of the daemon mid-run (alternating the subprocess and, where
    docker runs, the container sandbox); after each, ``pragma integrity_check``; after the
    next start, no working folder or container of the killed daemon is left, and every
    run is still listed (as interrupted)."""
    from rlmd.sandbox import unavailable_reason, workdirs

    home, scratch = tmp_path / "home", tmp_path / "scratch"
    home.mkdir()
    scratch.mkdir()
    project = make_project(tmp_path)
    backends = ["subprocess"] + (["container"] if unavailable_reason("container") is None else [])
    cells = [f"chunk{i} = 'x' * 10_000\nprint(len(chunk{i}))" for i in range(4)]
    killed: list[tuple[int, str]] = []  # (daemon pid, backend)
    run_ids: list[str] = []
    for i in range(21):
        d = Daemon(home, "--idle-timeout", "0", env={"TMPDIR": str(scratch)}).start()
        assert d.proc is not None
        c = await d.client()
        try:
            backend = backends[i % len(backends)]
            p = params(project, *cells, "import time\ntime.sleep(60)")
            st = await c.command("rlmd.task.start", {**p, "sandbox": backend})
            await c.wait_for(event(st["run_id"], "cell.started"), timeout=60)
            # the daemon killed last time left nothing once this one runs a sandbox
            if killed:
                dead, dead_backend = killed[-1]
                assert _leftovers(scratch, dead) == [], (i, dead_backend)
                if dead_backend == "container":  # reaped by a thread the daemon starts
                    for _ in range(600):  # the daemon sweeps at start, then 5 s and 30 s later
                        if not _containers_of(dead):
                            break
                        await asyncio.sleep(0.1)
                    assert _containers_of(dead) == [], i
            if i == 20:
                listed = await c.command("rlmd.runs.list", {"limit": 100})
                by_id = {r["id"]: r for r in listed["runs"]}
                assert set(run_ids) <= set(by_id)
                assert {by_id[r]["status"] for r in run_ids} == {"interrupted"}
                break
            await asyncio.sleep((i % 4) * 0.15)  # somewhere in the run's writes
            run_ids.append(st["run_id"])
            killed.append((d.proc.pid, backend))
        finally:
            await c.close()
            if i == 20:
                d.stop()
            else:
                d.kill()
        with sqlite3.connect(home / "rlmd.db") as conn:
            assert conn.execute("pragma integrity_check").fetchall() == [("ok",)], i
    # the last kill's size-limited working folder is a mount nobody sweeps otherwise
    workdirs.reap_stale(str(scratch))


async def test_sighup_stops_the_daemon_as_sigterm_does(tmp_path):
    """Review18: a foreground ``rlmd serve`` whose terminal closed died of SIGHUP without its
    clean-up: its socket stayed, its running task was left for the next daemon to mark
    interrupted. Now the task is cancelled and recorded so, and the socket removed."""
    home = tmp_path / "home"
    home.mkdir()
    d = Daemon(home, "--idle-timeout", "0").start()
    project = make_project(tmp_path)
    c = await d.client()
    try:
        st = await c.command("rlmd.task.start", params(project, "import time\ntime.sleep(30)"))
        await c.wait_for(event(st["run_id"], "cell.started"))
        d.proc.send_signal(signal.SIGHUP)
        assert await asyncio.to_thread(d.proc.wait, 30) == 0
    finally:
        await c.close()
        d.stop()
    assert not d.socket.exists()
    db = sqlite3.connect(home / "rlmd.db")
    (status,) = db.execute("SELECT status FROM runs WHERE id = ?", [st["run_id"]]).fetchone()
    db.close()
    assert status == "cancelled"


async def test_sigterm_while_a_cell_run_by_hand_runs_keeps_its_workspaces_variables(
    tmp_path, monkeypatch
):
    """Review22: SIGTERM while an ``rlmd.workspace.exec`` cell ran: the shutdown waited for
    the cell up to 30 s, then stopped the sandbox without a checkpoint (every variable set
    since the last one was lost), and a cell queued behind it ran after the shutdown began.
    Now the running cell is interrupted, the queued one is answered ``SHUTTING_DOWN``
    without running, and the checkpoint holds the variables."""
    from rlmd.server.client import RpcError
    from rlmd.server.errors import SHUTTING_DOWN
    from rlmd.workspace.checkpoint import checkpoint_path

    home = tmp_path / "home"
    home.mkdir()
    d = Daemon(home, "--idle-timeout", "0").start()
    project = make_project(tmp_path)
    c = await d.client()

    def exec_(code: str):
        return asyncio.ensure_future(
            c.command("rlmd.workspace.exec", {"workspace": str(project), "code": code}, timeout=80)
        )

    async def workspace() -> dict:
        listed = await c.command("rlmd.workspace.list")
        return next(w for w in listed["workspaces"] if w["workspace"] == str(project))

    try:
        assert (await exec_("kept = 'set by hand'"))["error"] is None
        running = exec_("import time\nwhile True:\n    time.sleep(0.05)")
        while not str((await workspace())["holder"]).startswith("cell-"):
            await asyncio.sleep(0.05)
        queued = exec_("late = 'after the shutdown began'")
        while not (await workspace())["queued"]:
            await asyncio.sleep(0.05)
        d.proc.send_signal(signal.SIGTERM)
        try:  # interrupted in the kernel, or stopped on its way there
            assert "KeyboardInterrupt" in (await running)["error"]
        except RpcError as exc:
            assert exc.code == SHUTTING_DOWN
        with pytest.raises(RpcError) as refused:
            await queued
        assert refused.value.code == SHUTTING_DOWN and "not run" in refused.value.message
        assert await asyncio.to_thread(d.proc.wait, 60) == 0
    finally:
        await c.close()
        d.stop()
    monkeypatch.setenv("RLMD_HOME", str(home))
    saved = json.loads(checkpoint_path(project).read_text())["variables"]
    assert sorted(saved) == ["kept"]


async def test_sigterm_refuses_a_cell_queued_behind_a_running_task(tmp_path):
    """Review22: the shutdown cancelled the task first, and a cell queued behind it took the
    workspace in that gap and ran after the shutdown had begun; it is now answered
    ``SHUTTING_DOWN`` without running."""
    from rlmd.server.client import RpcError
    from rlmd.server.errors import SHUTTING_DOWN

    home = tmp_path / "home"
    home.mkdir()
    d = Daemon(home, "--idle-timeout", "0").start()
    project = make_project(tmp_path)
    c = await d.client()
    try:
        st = await c.command("rlmd.task.start", params(project, "import time\ntime.sleep(60)"))
        await c.wait_for(event(st["run_id"], "cell.started"))
        queued = asyncio.ensure_future(
            c.command(
                "rlmd.workspace.exec",
                {"workspace": str(project), "code": "open('ran', 'w').close()"},
                timeout=80,
            )
        )
        while True:
            listed = await c.command("rlmd.workspace.list")
            if any(w["queued"] for w in listed["workspaces"]):
                break
            await asyncio.sleep(0.05)
        d.proc.send_signal(signal.SIGTERM)
        with pytest.raises(RpcError) as refused:
            await queued
        assert refused.value.code == SHUTTING_DOWN and "not run" in refused.value.message
        assert await asyncio.to_thread(d.proc.wait, 60) == 0
    finally:
        await c.close()
        d.stop()

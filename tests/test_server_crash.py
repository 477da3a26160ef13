"""Crash safety: SIGKILL of a sandbox kernel mid-task, and of the daemon mid-run."""

from __future__ import annotations

import contextlib
import os
import signal

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

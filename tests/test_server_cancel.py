"""Cancelling tasks (running recursive trees and queued ones) and clients that leave."""

from __future__ import annotations

import json
import time

import pytest
from helpers.server import CELLS, Daemon, event, finished, make_project, question, run_to_end

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


def params(project, *cells, sleep_s=None, **extra):
    return {
        "workspace": str(project),
        "question": question(*cells, sleep_s=sleep_s),
        "models": {"root": CELLS, "sub": CELLS},
        **extra,
    }


async def test_cancel_running_recursive_task_stops_the_tree_and_keeps_spend(daemon, tmp_path):
    project = make_project(tmp_path)
    c = await daemon.client()
    try:
        await run_to_end(c, params(project, "kept = 7", "FINAL(kept)"))
        child_q = question("FINAL(1)", sleep_s=600)  # the child's model call hangs
        st = await c.command(
            "rlmd.task.start", params(project, f"r = rlm_query({child_q!r})", "FINAL(r)")
        )
        run_id = st["run_id"]
        await c.wait_for(event(run_id, "model_call.started", depth=1))
        t0 = time.monotonic()
        ack = await c.command("rlmd.task.cancel", {"run_id": run_id})
        assert ack["cancel_requested"] is True
        done = (await c.wait_for(finished(run_id), timeout=60))["params"]
        assert time.monotonic() - t0 < 60  # the cancel ended it, not the model's 600 s
        assert done["status"] == "cancelled" and done["final_usage"] is None
        assert done["usage"]["model_calls"] >= 1 and done["usage"]["input_tokens"] > 0
        statuses = {(e["depth"], e["data"]["status"]) for e in c.events(run_id, "run.finished")}
        assert statuses == {(0, "cancelled"), (1, "cancelled")}
        got = await c.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        run = got["run"]
        assert run["status"] == "cancelled" and run["input_tokens"] > 0
        tree = json.dumps(got["tree"])
        assert tree.count('"status": "cancelled"') >= 2  # the root run and its child run
        # the next task in the workspace: the cancel interrupted the cell (SIGINT) instead of
        # killing the kernel, so the REPL and its variables are simply still there
        after = await run_to_end(c, params(project, "FINAL(kept * 6)"))
        assert after["answer"] == "42"
        system = c.events(after["run_id"], "model_call.started")[0]["data"]["messages"][0]
        assert "restarted" not in system["content"] and "kept" in system["content"]
    finally:
        await c.close()


async def test_cancel_a_queued_task(daemon, tmp_path):
    project = make_project(tmp_path)
    c = await daemon.client()
    try:
        first = await c.command("rlmd.task.start", params(project, "import time\ntime.sleep(600)"))
        second = await c.command("rlmd.task.start", params(project, "FINAL(2)"))
        await c.wait_for(event(first["run_id"], "cell.started"))
        await c.command("rlmd.task.cancel", {"run_id": second["run_id"]})
        done = (await c.wait_for(finished(second["run_id"])))["params"]
        assert done["status"] == "cancelled" and done["started_at"] is None
        assert "before it started" in done["error"]
        run = (await c.command("rlmd.runs.get", {"run_id": second["run_id"]}))["run"]
        assert run["status"] == "cancelled"
        await c.command("rlmd.task.cancel", {"run_id": first["run_id"]})
        done = (await c.wait_for(finished(first["run_id"]), timeout=60))["params"]
        assert done["status"] == "cancelled"
        again = await c.command("rlmd.task.cancel", {"run_id": first["run_id"]})
        assert again["state"] == "finished"
    finally:
        await c.close()


async def test_client_leaving_mid_task_does_not_stop_it(daemon, tmp_path):
    project = make_project(tmp_path)
    leaver, watcher = await daemon.client(), await daemon.client()
    try:
        await watcher.command("rlmd.health")
        st = await leaver.command(
            "rlmd.task.start", params(project, "import time\ntime.sleep(0.3)\nx = 5", "FINAL(x)")
        )
        await leaver.close()
        done = (await watcher.wait_for(finished(st["run_id"])))["params"]
        assert done["status"] == "completed" and done["answer"] == "5"
    finally:
        await watcher.close()

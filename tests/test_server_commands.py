"""Every daemon command and notification, against a real ``rlmd serve`` on a real socket."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from helpers.server import CELLS, Daemon, event, finished, make_project, question, run_to_end

from rlmd.server.client import RpcError

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


def start_params(project, *cells, **extra):
    return {
        "workspace": str(project),
        "question": question(*cells, sleep_s=extra.pop("sleep_s", None)),
        "models": {"root": CELLS},
        **extra,
    }


def task_states(c, run_id: str) -> list[str]:
    """The states a client was told task ``run_id`` went through, in order."""
    return [
        n["params"]["state"]
        for n in c.notifications
        if n["method"] == "rlmd/taskStatus"
        and n["params"]["run_id"] == run_id
        and n["params"]["update"] == "state"
    ]


async def test_health_models_and_subscribe(daemon):
    c = await daemon.client()
    try:
        h = await c.command("rlmd.health")
        assert h["ok"] and h["mode"] == "socket" and h["pid"] == daemon.proc.pid
        assert h["socket"] == str(daemon.socket) and h["clients"] >= 1
        assert h["memory_rss_bytes"] > 0
        assert oct(os.stat(daemon.socket).st_mode & 0o777) == "0o600"
        models = await c.command("rlmd.models.list")
        names = {m["name"]: m for m in models["models"]}
        assert "qwen2.5-coder-1.5b" in names and "usable" in names["qwen2.5-coder-1.5b"]
        sub = await c.command("rlmd.subscribe", {"events": "summary", "progress": "none"})
        assert sub == {"events": "summary", "progress": "none", "client_id": sub["client_id"]}
    finally:
        await c.close()


async def test_task_start_events_status_and_runs(daemon, project):
    c = await daemon.client()
    try:
        st = await c.command(
            "rlmd.task.start",
            start_params(project, "x = 41", "FINAL(x + 1)", budgets={"max_iterations": 5}),
        )
        run_id = st["run_id"]
        assert st["state"] == "queued" and st["queue_position"] == 1
        assert st["budget"]["max_iterations"] == 5 and st["models"]["root"] == CELLS
        done = (await c.wait_for(finished(run_id)))["params"]
        assert done["status"] == "completed" and done["answer"] == "42"
        assert done["iterations"] == 2 and done["usage"]["model_calls"] == 2
        assert done["usage"]["input_tokens"] > 0 and done["final_usage"]["total"]["calls"] == 2
        events = c.events(run_id)
        kinds = [e["kind"] for e in events]
        assert kinds[0] == "run.started" and kinds[-1] == "run.finished"
        assert {
            "sandbox.started",
            "iteration.started",
            "model_call.started",
            "model_call.finished",
            "cell.started",
            "cell.finished",
        } <= set(kinds)
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(seqs)
        assert all(e["workspace"] == str(project) for e in events)
        assert task_states(c, run_id) == ["queued", "running", "finished"]

        status = await c.command("rlmd.task.status", {"run_id": run_id})
        assert status["status"] == "completed" and status["state"] == "finished"
        assert (await c.command("rlmd.task.list"))["tasks"] == []

        runs = await c.command("rlmd.runs.list", {"workspace": str(project), "limit": 1})
        assert [r["id"] for r in runs["runs"]] == [run_id] and runs["next_offset"] == 1
        got = await c.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        assert got["run"]["status"] == "completed" and got["run"]["answer"] == "42"
        text = json.dumps(got["tree"])
        assert all(f'"kind": "{k}"' in text for k in ("iteration", "cell", "model_call"))
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.runs.get", {"run_id": "nope"})
        assert err.value.code == -32001
    finally:
        await c.close()


async def test_variables_survive_and_human_cells_share_the_repl(daemon, project):
    c = await daemon.client()
    try:
        first = await run_to_end(
            c, start_params(project, "data = {'a': [1, 2, 3]}", "FINAL(len(data['a']))")
        )
        assert first["answer"] == "3"
        cell = await c.command(
            "rlmd.workspace.exec",
            {"workspace": str(project), "code": "data['b'] = 5\nprint(sorted(data))"},
        )
        assert cell["stdout"] == "['a', 'b']\n" and cell["error"] is None
        second = await run_to_end(c, start_params(project, "FINAL(data['b'] + len(data['a']))"))
        assert second["answer"] == "8"
        # the second task's model was told which variables the workspace already holds
        calls = c.events(second["run_id"], "model_call.started")
        system = calls[0]["data"]["messages"][0]["content"]
        assert "persistent workspace" in system and "data (dict, len 2)" in system
        var = await c.command("rlmd.workspace.variables", {"workspace": str(project)})
        assert var["source"] == "repl"
        assert {"name": "data", "type": "dict", "size": 2} == {
            k: v for k, v in var["variables"][0].items() if k != "preview"
        }
        refused = await c.command(
            "rlmd.workspace.exec", {"workspace": str(project), "code": "llm_query('hi')"}
        )
        assert "only available while a task runs" in refused["error"]
        ws_notes = [n["params"] for n in c.notifications if n["method"] == "rlmd/workspace"]
        assert {"started", "checkpointed", "cell"} <= {n["change"] for n in ws_notes}
    finally:
        await c.close()


async def test_second_task_waits_in_line_and_queue_false_is_refused(daemon, project):
    c = await daemon.client()
    try:
        first = await c.command(
            "rlmd.task.start", start_params(project, "import time\ntime.sleep(0.6)", "FINAL(1)")
        )
        second = await c.command("rlmd.task.start", start_params(project, "FINAL(2)"))
        assert second["state"] == "queued" and second["queue_position"] in (1, 2)
        await c.wait_for(event(first["run_id"], "cell.started"))
        status = await c.command("rlmd.task.status", {"run_id": second["run_id"]})
        assert status["state"] == "queued" and status["queue_position"] == 1
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.task.start", start_params(project, "FINAL(3)", queue=False))
        assert err.value.code == -32002 and "busy" in err.value.message
        listed = (await c.command("rlmd.task.list", {"workspace": str(project)}))["tasks"]
        assert [t["run_id"] for t in listed] == [first["run_id"], second["run_id"]]
        await c.wait_for(finished(second["run_id"]))
        end_first = c.events(first["run_id"], "run.finished")[0]["seq"]
        start_second = c.events(second["run_id"], "run.started")[0]["seq"]
        assert start_second > end_first  # never interleaved
    finally:
        await c.close()


async def test_start_answer_comes_before_the_tasks_notifications(daemon, project):
    c = await daemon.client()
    try:
        for _ in range(3):  # the race, when there was one, showed on a free workspace
            st = await c.command("rlmd.task.start", start_params(project, "FINAL(7)"))
            run_id = st["run_id"]
            answer_id = max(c.answered_after)  # this client's last answered request
            before = c.notifications[: c.answered_after[answer_id]]
            assert not [n for n in before if (n["params"] or {}).get("run_id") == run_id]
            # while queued or just launched, runs.get knows it (from the daemon, not the store)
            got = await c.command("rlmd.runs.get", {"run_id": run_id})
            assert got.get("run") is not None or got["task"]["run_id"] == run_id
            await c.wait_for(finished(run_id))
            assert task_states(c, run_id) == ["queued", "running", "finished"]
    finally:
        await c.close()


async def test_runs_get_on_a_queued_task_returns_its_status(daemon, project):
    c = await daemon.client()
    try:
        first = await c.command(
            "rlmd.task.start", start_params(project, "import time\ntime.sleep(1.0)", "FINAL(1)")
        )
        second = await c.command("rlmd.task.start", start_params(project, "x = 2\nFINAL(x)"))
        await c.wait_for(event(first["run_id"], "cell.started"))
        got = await c.command("rlmd.runs.get", {"run_id": second["run_id"]})
        assert got["run"] is None
        assert got["task"]["state"] == "queued" and got["task"]["queue_position"] == 1
        await c.wait_for(finished(second["run_id"]))
        got = await c.command("rlmd.runs.get", {"run_id": second["run_id"]})
        assert got["run"]["status"] == "completed" and got["run"]["answer"] == "2"
    finally:
        await c.close()


async def test_tasks_in_two_workspaces_run_in_parallel(daemon, tmp_path):
    a, b = make_project(tmp_path, "a"), make_project(tmp_path, "b")
    c = await daemon.client()
    try:
        sleepy = ("import time\ntime.sleep(0.8)", "FINAL(1)")
        ta = await c.command("rlmd.task.start", start_params(a, *sleepy))
        tb = await c.command("rlmd.task.start", start_params(b, *sleepy))
        await c.wait_for(finished(ta["run_id"]))
        await c.wait_for(finished(tb["run_id"]))
        a_end = c.events(ta["run_id"], "cell.finished")[0]["seq"]
        b_start = c.events(tb["run_id"], "cell.started")[0]["seq"]
        assert b_start < a_end  # b's cell started while a's was still running
    finally:
        await c.close()


async def test_two_clients_see_the_same_events(daemon, project):
    c1, c2 = await daemon.client(), await daemon.client()
    try:
        await c2.command("rlmd.health")  # a command subscribes a client that skips initialize
        done = await run_to_end(c1, start_params(project, "y = 2", "FINAL(y)"))
        await c2.wait_for(finished(done["run_id"]))
        seen1 = [(e["seq"], e["kind"]) for e in c1.events(done["run_id"])]
        seen2 = [(e["seq"], e["kind"]) for e in c2.events(done["run_id"])]
        assert seen1 == seen2 and len(seen1) >= 10
    finally:
        await c1.close()
        await c2.close()


async def test_event_detail_levels(daemon, project):
    full, summary, none = [await daemon.client() for _ in range(3)]
    try:
        await summary.command("rlmd.subscribe", {"events": "summary"})
        await none.command("rlmd.subscribe", {"events": "none"})
        long = "print('z' * 3000)"
        done = await run_to_end(full, start_params(project, long, "FINAL(1)"))
        await summary.wait_for(finished(done["run_id"]))
        await none.wait_for(finished(done["run_id"]))
        f = full.events(done["run_id"], "cell.finished")[0]["data"]["stdout"]
        s = summary.events(done["run_id"], "cell.finished")[0]["data"]["stdout"]
        assert len(f) == 3001 and len(s) < 600 and "more characters" in s
        assert "messages_count" in summary.events(done["run_id"], "model_call.started")[0]["data"]
        assert none.events(done["run_id"]) == []
    finally:
        for c in (full, summary, none):
            await c.close()


async def test_workspace_open_list_reset_close(daemon, project):
    c = await daemon.client()
    try:
        opened = await c.command("rlmd.workspace.open", {"workspace": f"file://{project}"})
        assert opened["state"] == "ready" and opened["files"] == 2
        assert opened["started"]["files"] == 2 and opened["pid"]
        listed = await c.command("rlmd.workspace.list")
        assert str(project) in [w["workspace"] for w in listed["workspaces"]]
        await c.command("rlmd.workspace.exec", {"workspace": str(project), "code": "v = 1"})
        reset = await c.command("rlmd.workspace.reset", {"workspace": str(project)})
        assert reset["state"] == "stopped"
        var = await c.command("rlmd.workspace.variables", {"workspace": str(project)})
        assert var["source"] == "none" and var["variables"] == []
        cell = await c.command(
            "rlmd.workspace.exec", {"workspace": str(project), "code": "print(sorted(context))"}
        )
        assert "pkg/core.py" in cell["stdout"]  # a fresh REPL, context loaded again
        closed = await c.command("rlmd.workspace.close", {"workspace": str(project)})
        assert closed["state"] == "closed" and "v" not in closed["last_checkpoint"]["variables"]
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.workspace.close", {"workspace": str(project)})
        assert err.value.code == -32001
        changes = [
            n["params"]["change"] for n in c.notifications if n["method"] == "rlmd/workspace"
        ]
        assert {"started", "reset", "stopped", "closed"} <= set(changes)
    finally:
        await c.close()


async def test_models_and_params_errors(daemon, project, tmp_path):
    c = await daemon.client()
    try:
        with pytest.raises(RpcError) as err:
            await c.command(
                "rlmd.task.start",
                {"workspace": str(project), "question": "q", "models": {"root": "nonesuch"}},
            )
        assert err.value.code == -32602 and "unknown model" in err.value.message
        with pytest.raises(RpcError) as err:
            await c.command(
                "rlmd.task.start",
                {
                    "workspace": str(project),
                    "question": "q",
                    "models": {"root": f"scripted:{tmp_path}/no.json"},
                },
            )
        assert err.value.code == -32003 and "not usable" in err.value.message
        with pytest.raises(RpcError) as err:
            await c.command(
                "rlmd.task.start", {"workspace": str(tmp_path / "missing"), "question": "q"}
            )
        assert err.value.code == -32602 and err.value.data == {"field": "workspace"}
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.task.start", start_params(project, budgets={"max_depth": -1}))
        assert err.value.data == {"field": "budgets.max_depth"}
        for zero in ("max_depth", "max_iterations"):  # a 0 depth ran normally; the CLI refuses
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.task.start", start_params(project, budgets={zero: 0}))
            assert err.value.code == -32602 and err.value.data == {"field": f"budgets.{zero}"}
        # review16: max_consecutive_errors 0 ended a run with no error after one turn ("0
        # iterations in a row ended in errors"); 0 tokens, seconds or USD ended it before its
        # first call. `rlmd run` refuses them all.
        for zero in ("max_tokens", "max_consecutive_errors", "max_seconds", "max_usd"):
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.task.start", start_params(project, budgets={zero: 0}))
            assert err.value.code == -32602, zero
            # review18: named as the engine's field ("budget max_usd must be ..."), no field
            assert err.value.message.startswith(f"budgets.{zero} must be "), err.value.message
            assert err.value.data == {"field": f"budgets.{zero}"}
            # a negative value gets the same rule as 0 (it said "must be >= 0" for -1)
            zero_message = err.value.message
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.task.start", start_params(project, budgets={zero: -1}))
            assert err.value.message == zero_message.replace("got 0", "got -1"), zero
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.task.start", {**start_params(project), "budget": {}})
        assert "unknown parameter 'budget'" in err.value.message
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.task.status", {"run_id": "0" * 20})
        assert err.value.code == -32001
        with pytest.raises(RpcError) as err:
            await c.request(
                "workspace/executeCommand", {"command": "rlmd.health", "arguments": [{}, {}]}
            )
        assert err.value.code == -32602
    finally:
        await c.close()


async def test_runs_list_paging_and_filters(daemon, tmp_path):
    project = make_project(tmp_path, "paging")
    c = await daemon.client()
    try:
        ids = []
        for i in range(3):
            done = await run_to_end(c, start_params(project, f"marker_{i} = {i}", f"FINAL({i})"))
            ids.append(done["run_id"])
        page1 = await c.command("rlmd.runs.list", {"workspace": str(project), "limit": 2})
        page2 = await c.command(
            "rlmd.runs.list",
            {"workspace": str(project), "limit": 2, "offset": page1["next_offset"]},
        )
        assert [r["id"] for r in page1["runs"] + page2["runs"]] == ids[::-1]
        assert page2["next_offset"] is None
        found = await c.command("rlmd.runs.list", {"search": "marker_1", "workspace": str(project)})
        assert [r["id"] for r in found["runs"]] == [ids[1]]
        st = await c.command(
            "rlmd.runs.list", {"status": ["failed", "cancelled"], "workspace": str(project)}
        )
        assert st["runs"] == []
        # review17: 500 one-letter words (999 characters, under the field's limit) made an
        # SQL expression deeper than SQLite allows; now INVALID_PARAMS naming the field
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.runs.list", {"search": " ".join("a" * 500)})
        assert err.value.code == -32602 and "the search has 500 words" in str(err.value)
        assert err.value.data == {"field": "search"}
        # review18: an unknown status listed nothing, as if no run matched; the CLI said so
        for status in ("complete", ["failed", "bogus"]):
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.runs.list", {"status": status})
            assert err.value.code == -32602 and err.value.data == {"field": "status"}
            assert "is no run status; one of: running, completed" in err.value.message
    finally:
        await c.close()


def test_doctor_sees_the_daemon(daemon):
    env = {**os.environ, "RLMD_HOME": str(daemon.home)}
    out = subprocess.run(
        [sys.executable, "-m", "rlmd", "doctor", "--json", "--no-sandboxes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    report = json.loads(out.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert (
        checks["daemon"]["status"] == "ok"
        and f"pid {daemon.proc.pid}" in checks["daemon"]["detail"]
    )
    assert checks["socket"]["status"] == "ok" and checks["store"]["status"] == "ok"
    assert "docker" in checks


def test_second_daemon_refuses_to_start(daemon):
    env = {**os.environ, "RLMD_HOME": str(daemon.home)}
    out = subprocess.run(
        [sys.executable, "-m", "rlmd", "serve"], capture_output=True, text=True, env=env, timeout=30
    )
    assert out.returncode == 3 and "already running" in out.stderr
    assert daemon.alive


async def test_exec_queue_false_and_cell_timeout(daemon, project):
    c = await daemon.client()
    try:
        slow = asyncio.create_task(
            c.command(
                "rlmd.workspace.exec",
                {"workspace": str(project), "code": "import time\ntime.sleep(0.5)"},
            )
        )
        await c.wait_for(
            lambda n: (
                n["method"] == "rlmd/workspace"
                and n["params"]["change"] == "started"
                and n["params"]["workspace"] == str(project)
            )
        )
        with pytest.raises(RpcError) as err:
            await c.command(
                "rlmd.workspace.exec", {"workspace": str(project), "code": "1", "queue": False}
            )
        assert err.value.code == -32002
        await slow
        t = await c.command(
            "rlmd.workspace.exec",
            {"workspace": str(project), "code": "while True: pass", "timeout_s": 0.5},
        )
        # a timed-out cell is interrupted first; a pure-Python loop stops, the REPL stays
        assert t["timed_out"] and not t["kernel_restarted"]
    finally:
        await c.close()


GATED_TOKEN_COUNT = """
import os, time
import rlmd.models.tokens as tokens

gate, count = os.environ["RLMD_TEST_GATE"], tokens.count_tokens

def gated(text):
    # The first count (a task's context metadata) waits until the test opens the gate.
    if not os.path.exists(gate + ".open"):
        open(gate + ".counting", "w").close()
        while not os.path.exists(gate + ".open"):
            time.sleep(0.01)
    return count(text)

tokens.count_tokens = gated
"""


async def test_health_answers_while_a_task_counts_its_workspace(tmp_path):
    """Counting a big workspace's tokens (held here until the test releases it) happens off
    the event loop: another client's rlmd.health is answered meanwhile."""
    home, gate = tmp_path / "home", tmp_path / "gate"
    home.mkdir()
    d = Daemon(
        home, "--idle-timeout", "0", prelude=GATED_TOKEN_COUNT, env={"RLMD_TEST_GATE": str(gate)}
    ).start()
    project = make_project(tmp_path)
    c = other = None
    try:
        c, other = await d.client(), await d.client()
        started = await c.command("rlmd.task.start", start_params(project, "FINAL(1)"))
        while not (tmp_path / "gate.counting").exists():  # the task is counting now
            assert d.alive, d.log()
            await asyncio.sleep(0.05)
        health = await asyncio.wait_for(other.command("rlmd.health"), 30)
        assert health["ok"]
        assert not (tmp_path / "gate.open").exists()  # answered while the count was held
        status = await other.command("rlmd.task.status", {"run_id": started["run_id"]})
        assert status["state"] == "running"
        (tmp_path / "gate.open").touch()
        note = await c.wait_for(finished(started["run_id"]), timeout=60)
        assert note["params"]["status"] == "completed"
    finally:
        for client in (c, other):
            if client is not None:
                await client.close()
        d.stop()


async def test_lone_surrogates_in_a_task_are_stored_and_the_run_completes(daemon, project):
    """JSON may carry "\\ud800" (a lone surrogate); no UTF-8 writer or SQLite accepts one."""
    spec = json.dumps({"cells": ["print('\\ud800')", "FINAL('\\ud800')"]})
    params = {**start_params(project), "question": spec[:-1] + ', "note": "\ud800 where"}'}
    c = await daemon.client()
    try:
        done = await run_to_end(c, params)
        assert done["status"] == "completed", done
        assert done["answer"] == "\\ud800"
        run = (await c.command("rlmd.runs.get", {"run_id": done["run_id"]}))["run"]
        assert run["status"] == "completed" and run["answer"] == "\\ud800"
        assert run["question"].endswith('"note": "\\ud800 where"}')
        # a command's reply holding one (a cell's output) says it as its escape
        cell = await c.command(
            "rlmd.workspace.exec",
            {"workspace": str(project), "code": "print('\\ud800', 'é')"},
        )
        assert cell["stdout"] == "\\ud800 é\n" and cell["error"] is None
        # searching for it, or a folder named with one, is an answer, not an INTERNAL_ERROR
        found = await c.command("rlmd.runs.list", {"search": "\ud800 where"})
        assert [r["id"] for r in found["runs"]] == [done["run_id"]]
        mine = await c.command("rlmd.runs.list", {"workspace": str(project), "search": "\ud800"})
        assert [r["id"] for r in mine["runs"]] == [done["run_id"]]
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.runs.list", {"workspace": str(project) + "\ud800"})
        assert err.value.code == -32602 and "no such folder" in err.value.message
        # a run id holding one is no run (session 11: a raw codec message as INVALID_PARAMS)
        for command in ("rlmd.task.status", "rlmd.runs.get", "rlmd.task.cancel"):
            with pytest.raises(RpcError) as err:
                await c.command(command, {"run_id": "\ud800"})
            assert err.value.code == -32001, (command, err.value.message)
            assert "'\\ud800'" in err.value.message and "codec" not in err.value.message
    finally:
        await c.close()


async def test_a_workspace_whose_folder_was_deleted_can_still_be_closed(daemon, tmp_path):
    """Review14: once an open workspace's folder was deleted, ``close``, ``reset`` and
    ``variables`` all answered "no such folder", so its kernel ran on (listed ``ready``)
    until the daemon stopped; ``runs.list`` / ``task.list`` could not filter by it either."""
    import shutil

    c = await daemon.client()
    try:
        gone, other = make_project(tmp_path, "gone"), make_project(tmp_path, "other")
        for proj in (gone, other):
            await c.command("rlmd.workspace.open", {"workspace": str(proj)})
            await c.command("rlmd.workspace.exec", {"workspace": str(proj), "code": "x = 5"})
        run = await run_to_end(c, start_params(gone, "FINAL('ok')"))
        shutil.rmtree(gone)
        shutil.rmtree(other)
        with pytest.raises(RpcError, match="no such folder"):  # a task still needs it
            await c.command("rlmd.workspace.exec", {"workspace": str(gone), "code": "x"})
        got = await c.command("rlmd.workspace.variables", {"workspace": str(gone)})
        assert got["source"] == "repl" and [v["name"] for v in got["variables"]] == ["x"]
        runs = await c.command("rlmd.runs.list", {"workspace": str(gone)})
        assert [r["id"] for r in runs["runs"]] == [run["run_id"]]
        assert (await c.command("rlmd.task.list", {"workspace": str(gone)}))["tasks"] == []
        closed = await c.command("rlmd.workspace.close", {"workspace": str(gone)})
        assert closed["state"] == "closed"
        reset = await c.command("rlmd.workspace.reset", {"workspace": str(other)})
        assert reset["state"] == "stopped"
        await c.command("rlmd.workspace.close", {"workspace": str(other), "checkpoint": False})
        listed = {w["workspace"] for w in (await c.command("rlmd.workspace.list"))["workspaces"]}
        assert str(gone) not in listed and str(other) not in listed
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.workspace.close", {"workspace": str(gone)})
        assert err.value.code == -32001 and "is not open" in err.value.message
    finally:
        await c.close()

"""Idle workspaces: checkpoint, stop the sandbox, restore transparently on the next task."""

from __future__ import annotations

import json
import os

import pytest
from helpers.server import CELLS, ECHO, Daemon, make_project, question, run_to_end

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0.6").start()
    yield d
    d.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_idle_checkpoint_then_transparent_restore(daemon, tmp_path):
    project = make_project(tmp_path)
    c = await daemon.client()
    try:
        done = await run_to_end(
            c,
            {
                "workspace": str(project),
                "question": question(
                    "a = [1, 2]\nf = lambda: 1\nt = (1, 2)\nbig = {1: 'x'}", "FINAL(len(a))"
                ),
                "models": {"root": CELLS},
            },
        )
        assert done["answer"] == "2"
        listed = await c.command("rlmd.workspace.list")
        pid = next(w["pid"] for w in listed["workspaces"] if w["workspace"] == str(project))
        stopped = await c.wait_for(
            lambda n: (
                n["method"] == "rlmd/workspace"
                and n["params"]["change"] == "stopped"
                and n["params"]["workspace"] == str(project)
            ),
            timeout=10,
        )
        assert stopped["params"]["data"]["reason"] == "idle"
        assert not alive(pid)
        var = await c.command("rlmd.workspace.variables", {"workspace": str(project)})
        assert var["source"] == "checkpoint"
        assert [v["name"] for v in var["variables"]] == ["a"]
        assert set(var["not_restored"]) == {"f", "t", "big"}
        assert "function" in var["not_restored"]["f"]
        assert "a tuple" in var["not_restored"]["t"]
        assert "changes when written as JSON" in var["not_restored"]["big"]
        ckpt_file = next(w["checkpoint_file"] for w in listed["workspaces"])
        assert oct(os.stat(ckpt_file).st_mode & 0o777) == "0o600"
        on_disk = json.loads(open(ckpt_file).read())
        assert on_disk["variables"]["a"]["preview"] == "[1, 2]" and var["variables"][0]["size"] == 2
        values = os.path.join(os.path.dirname(ckpt_file), on_disk["values"]["file"])
        assert oct(os.stat(values).st_mode & 0o777) == "0o600"
        assert json.loads(open(values).read()) == {"a": [1, 2]}

        echo = await run_to_end(
            c, {"workspace": str(project), "question": "what now?", "models": {"root": ECHO}}
        )
        note = echo["answer"]
        assert "restored from the workspace checkpoint" in note and ": a." in note
        assert "Not restored" in note and "f (a function" in note
        assert "Imports are not restored" in note
        after = await run_to_end(
            c,
            {
                "workspace": str(project),
                "question": question("FINAL(a[1])"),
                "models": {"root": CELLS},
            },
        )
        assert after["answer"] == "2"
        changes = [
            n["params"]["change"]
            for n in c.notifications
            if n["method"] == "rlmd/workspace" and n["params"]["workspace"] == str(project)
        ]
        assert changes.count("started") == 2 and "checkpointed" in changes
    finally:
        await c.close()

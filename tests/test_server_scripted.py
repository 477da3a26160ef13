"""A scripted model in the daemon: each task replays its script from the first response
(the daemon caches models per workspace, which must not carry a script's position over)."""

from __future__ import annotations

import json

import pytest
from helpers.server import Daemon, make_project, run_to_end

pytestmark = pytest.mark.timeout(120)


async def test_each_task_starts_its_script_from_the_first_response(tmp_path):
    script = tmp_path / "one.json"
    script.write_text(
        json.dumps(["```repl\nprint(type(context).__name__)\nFINAL(type(context).__name__)\n```"])
    )
    project = make_project(tmp_path)
    daemon = Daemon(tmp_path / "home", "--idle-timeout", "0")
    (tmp_path / "home").mkdir()
    daemon.start()
    try:
        c = await daemon.client()
        try:
            params = {
                "workspace": str(project),
                "question": "q",
                "models": {"root": f"scripted:{script}"},
            }
            first = await run_to_end(c, params)
            second = await run_to_end(c, params)  # same workspace, same cached registry
        finally:
            await c.close()
    finally:
        daemon.stop()
    assert first["status"] == "completed", first.get("error")
    assert second["status"] == "completed", second.get(
        "error"
    )  # not "script exhausted after 1 responses"
    assert second["answer"] == first["answer"]

"""``rlmd acp`` end to end: the agent-client-protocol SDK's own client spawns the agent over
stdio, against a real daemon (real socket, scripted model)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from helpers.server import CELLS, Daemon, make_project, question

pytest.importorskip("acp")
import acp  # noqa: E402
from acp.schema import AgentMessageChunk, AgentThoughtChunk, ToolCallProgress, ToolCallStart  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


class Recorder:
    """An ACP client that keeps every session/update."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.seen = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.seen.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def of(self, kind: type) -> list[Any]:
        return [u for u in self.updates if isinstance(u, kind)]


def spawn(daemon, recorder: Recorder, *extra: str):
    env = {"RLMD_HOME": str(daemon.home), "PYTHONPATH": os.pathsep.join(sys.path)}
    return acp.spawn_agent_process(
        recorder,
        sys.executable,
        "-m",
        "rlmd",
        "acp",
        "--model",
        CELLS,
        "--no-start",
        *extra,
        env=env,
    )


def text(update: Any) -> str:
    return update.content.text


async def test_prompt_streams_the_run_and_follow_ups_reuse_the_repl(daemon, tmp_path):
    project = make_project(tmp_path)
    rec = Recorder()
    async with spawn(daemon, rec) as (conn, _proc):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        assert init.agent_info.name == "rlmd"
        session = await conn.new_session(cwd=str(project), mcp_servers=[])

        first = question(
            "x = 41\nsub = llm_query('hi')\nprint(sub)",
            "child = rlm_query('sub question')\nprint(child)",
        )
        reply = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(first)])
        assert reply.stop_reason == "end_turn"
        run_id = reply.field_meta["rlmd"]["run_id"]

        starts = rec.of(ToolCallStart)
        cells = [s for s in starts if s.kind == "execute"]
        # three root cells and the child run's (its FINAL) at least
        assert any("x = 41" in s.raw_input["code"] for s in cells)
        subcalls = [s for s in starts if s.title.startswith("Sub-call")]
        children = [s for s in starts if s.title.startswith("Child run (depth 1)")]
        assert len(subcalls) == 1 and subcalls[0].status == "completed"
        assert len(children) == 1 and "sub question" in children[0].title
        progress = {p.tool_call_id: p for p in rec.of(ToolCallProgress)}
        assert {c.tool_call_id for c in cells} <= set(progress)  # every cell was finished
        assert progress[children[0].tool_call_id].status == "completed"
        assert "sub: hi" in text(progress[cells[0].tool_call_id].content[0])
        assert any(text(t).startswith("Iteration 1") for t in rec.of(AgentThoughtChunk))
        assert [text(m) for m in rec.of(AgentMessageChunk)] == ["done"]

        # the stream matches the store: one execute tool call per stored cell of the tree
        client = await daemon.client()
        try:
            stored = await client.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        finally:
            await client.close()

        def stored_cells(run: dict) -> list[str]:
            found = []
            for it in run["nodes"]:
                for node in it["children"]:
                    if node["kind"] == "cell":
                        found.append(node["id"])
                        for child in node.get("runs") or []:
                            found += stored_cells(child)
            return found

        assert sorted(c.tool_call_id for c in cells) == sorted(stored_cells(stored["tree"]))

        # a follow-up in the same session sees the REPL's variables
        rec.updates.clear()
        reply = await conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block(question("FINAL(str(x + 1))"))]
        )
        assert reply.stop_reason == "end_turn"
        assert [text(m) for m in rec.of(AgentMessageChunk)] == ["42"]


async def test_session_cancel_cancels_the_run_tree(daemon, tmp_path):
    project = make_project(tmp_path)
    rec = Recorder()
    async with spawn(daemon, rec) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        slow = question("print(rlm_query('child question'))", sleep_s=30.0)
        prompt = asyncio.create_task(
            conn.prompt(session_id=session.session_id, prompt=[acp.text_block(slow)])
        )
        await asyncio.wait_for(rec.seen.wait(), 60)  # the run is going
        await conn.cancel(session_id=session.session_id)
        reply = await asyncio.wait_for(prompt, 60)
        assert reply.stop_reason == "cancelled"
        run_id = reply.field_meta["rlmd"]["run_id"]
        client = await daemon.client()
        try:
            stored = await client.command("rlmd.runs.get", {"run_id": run_id})
        finally:
            await client.close()
        assert stored["run"]["status"] == "cancelled"
        assert "cancelled" in text(rec.of(AgentMessageChunk)[-1])


async def test_a_bad_session_folder_and_a_refused_task_are_request_errors(daemon, tmp_path):
    rec = Recorder()
    async with spawn(daemon, rec) as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        with pytest.raises(acp.RequestError):
            await conn.new_session(cwd=str(tmp_path / "missing"), mcp_servers=[])
        session = await conn.new_session(cwd=str(make_project(tmp_path)), mcp_servers=[])
        with pytest.raises(acp.RequestError):
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("  ")])


async def test_a_budget_stopped_run_says_so(daemon, tmp_path):
    project = make_project(tmp_path)
    rec = Recorder()
    async with spawn(daemon, rec, "--max-iterations", "1") as (conn, _proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        reply = await conn.prompt(
            session_id=session.session_id,
            prompt=[acp.text_block(question("print(1)", "print(2)"))],
        )
        assert reply.stop_reason == "max_turn_requests"
        assert reply.field_meta["rlmd"]["status"] == "max_iterations"
        assert "the max_iterations budget ended the run" in text(rec.of(AgentMessageChunk)[-1])


def test_stdio_that_is_not_a_pipe_is_a_one_line_error(tmp_path):
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "rlmd", "acp", "--no-start"],
            env={**os.environ, "RLMD_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "stdin is not a pipe" in done.stderr


def acp_lines(home, lines: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """``rlmd acp --no-start`` fed ``lines`` (one JSON message a line) on stdin, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "rlmd", "acp", "--no-start"],
        env={**os.environ, "RLMD_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)},
        input="".join(json.dumps(x) + "\n" for x in lines),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_session_folder_must_be_an_absolute_path(tmp_path):
    """Review15: ``session/new`` with ``cwd: ""`` (or ``"."``) was accepted as the folder
    ``rlmd acp`` was started in; ACP says the cwd is an absolute path."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}]
    for i, cwd in enumerate(["", ".", "tests", str(tmp_path)], 2):
        params = {"cwd": cwd, "mcpServers": []}
        lines.append({"jsonrpc": "2.0", "id": i, "method": "session/new", "params": params})
    done = acp_lines(tmp_path, lines)
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    for i, cwd in ((2, ""), (3, "."), (4, "tests")):
        assert replies[i]["error"]["data"] == {
            "cwd": f"must be an absolute path (ACP), not {cwd!r}"
        }
    assert replies[5]["result"]["sessionId"]


def test_an_unknown_notification_is_one_line_not_a_traceback(tmp_path):
    """Review17: a notification ``rlmd acp`` does not handle (JSON-RPC answers none) logged
    the SDK's "method not found" traceback on stderr; it is now named in one line."""
    lines = [
        {"jsonrpc": "2.0", "method": "nope", "params": {}},
        {"jsonrpc": "2.0", "method": "initialize"},
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}},
    ]
    done = acp_lines(tmp_path, lines)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert [json.loads(x)["id"] for x in done.stdout.splitlines()] == [7]
    said = done.stderr.strip().splitlines()
    assert said == [
        "rlmd acp: line 1 of stdin is a notification of unknown method 'nope'; ignored",
        "rlmd acp: line 2 of stdin is a notification of unknown method 'initialize'; ignored",
    ], done.stderr

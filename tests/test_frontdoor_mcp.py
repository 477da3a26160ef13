"""``rlmd mcp`` end to end: the mcp SDK's own ClientSession over stdio, against a real daemon
(a real socket, the scripted model), checking what it says against the trajectory store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager

import pytest
from helpers.server import CELLS, MODELS, Daemon, make_project, question

pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


def server_params(daemon, project, *extra: str) -> StdioServerParameters:
    env = {
        "RLMD_HOME": str(daemon.home),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "rlmd",
            "mcp",
            "--workspace",
            str(project),
            "--model",
            CELLS,
            "--no-start",
            *extra,
        ],
        env=env,
    )


@asynccontextmanager
async def mcp_session(params: StdioServerParameters):
    """An initialized ClientSession on ``rlmd mcp``."""
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def first_task(client, project) -> str:
    """The run id of the first task the daemon lists for ``project``, once there is one."""
    for _ in range(600):
        tasks = (await client.command("rlmd.task.list", {"workspace": str(project)}))["tasks"]
        if tasks:
            return tasks[0]["run_id"]
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no task in {project}")


async def test_ask_streams_progress_and_matches_the_store(daemon, tmp_path):
    project = make_project(tmp_path)
    cells = (
        "x = llm_query('hi')\nprint(x)",
        "y = rlm_query('sub question')\nprint(y)",
        "FINAL('helper returns 42, see pkg/core.py:2 and the README.md:1 title')",
    )
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with mcp_session(server_params(daemon, project)) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"ask", "runs", "trajectory", "cancel", "workspace_variables"} <= tools
        assert "exec_cell" not in tools  # off unless the user enables it

        result = await session.call_tool(
            "ask", {"question": question(*cells)}, progress_callback=on_progress
        )
        assert not result.is_error
        out = result.structured_content
        assert out["answer"] == "helper returns 42, see pkg/core.py:2 and the README.md:1 title"
        assert out["status"] == "completed" and out["ending"] == "completed"
        assert [(c["path"], c["line"]) for c in out["citations"]] == [
            ("pkg/core.py", 2),
            ("README.md", 1),
        ]
        assert out["citations"][0]["uri"] == (project / "pkg/core.py").as_uri() + "#L2"
        assert out["run_id"] in result.content[0].text
        assert progress and any("child run" in (m or "") for _, m in progress)

        # what the MCP server said is what the store has
        client = await daemon.client()
        try:
            stored = await client.command("rlmd.runs.get", {"run_id": out["run_id"], "tree": True})
        finally:
            await client.close()
        assert stored["run"]["answer"] == out["answer"]
        assert out["usage"] == stored["run"]["usage"]["total"]
        assert out["iterations"] == stored["run"]["iterations"] == 3

        traj = (await session.call_tool("trajectory", {"run_id": out["run_id"]})).structured_content
        tree = traj["run"]
        assert tree["id"] == out["run_id"]
        cells_with_children = [
            c
            for it in tree["nodes"]
            for c in it["children"]
            if c["kind"] == "cell" and c.get("runs")
        ]
        assert len(cells_with_children) == 1
        assert cells_with_children[0]["runs"][0]["question"] == "sub question"
        model_calls = [
            c for it in tree["nodes"] for c in it["children"] if c["kind"] == "model_call"
        ]
        assert all(
            "messages" not in c["data"] and c["data"]["messages_count"] >= 1 for c in model_calls
        )

        listed = (await session.call_tool("runs", {"limit": 5})).structured_content["runs"]
        assert (
            listed[0]["id"] == out["run_id"] and listed[0]["uri"] == f"rlmd://runs/{out['run_id']}"
        )

        resource = await session.read_resource(f"rlmd://runs/{out['run_id']}")
        exported = json.loads(resource.contents[0].text)
        assert exported["run"] == stored["tree"]
        index = json.loads((await session.read_resource("rlmd://runs")).contents[0].text)
        assert out["run_id"] in {r["id"] for r in index}

        # the REPL stays warm: the variables the run set are in the workspace
        variables = (await session.call_tool("workspace_variables", {})).structured_content
        assert {"x", "y"} <= {v["name"] for v in variables["variables"]}
        assert variables["total"] == len(variables["variables"]) >= 2
        assert variables["next_offset"] is None
        paged = await session.call_tool("workspace_variables", {"offset": 1, "limit": 1})
        page = paged.structured_content
        assert page["offset"] == 1 and len(page["variables"]) == 1
        assert page["variables"][0]["name"] == variables["variables"][1]["name"]
        found = await session.call_tool("workspace_variables", {"match": "y", "limit": 10**6})
        assert [v["name"] for v in found.structured_content["variables"]] == ["y"]


async def test_cancel_tool_stops_a_running_ask(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project)) as session:
        ask = asyncio.create_task(
            session.call_tool("ask", {"question": question("print(1)", sleep_s=30.0) + " "})
        )
        client = await daemon.client()
        try:
            run_id = await first_task(client, project)
            cancelled = (await session.call_tool("cancel", {"run_id": run_id})).structured_content
            assert cancelled["cancel_requested"] is True
            result = await asyncio.wait_for(ask, 60)
            assert result.structured_content["status"] == "cancelled"
            assert result.structured_content["run_id"] == run_id
            stored = await client.command("rlmd.runs.get", {"run_id": run_id})
            assert stored["run"]["status"] == "cancelled"
        finally:
            await client.close()


async def test_exec_cell_only_when_allowed_and_shares_the_repl(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project, "--allow-exec")) as session:
        assert "exec_cell" in {t.name for t in (await session.list_tools()).tools}
        ran = (
            await session.call_tool("exec_cell", {"code": "z = 6 * 7\nprint(z)"})
        ).structured_content
        assert ran["stdout"] == "42\n" and ran["error"] is None
        result = await session.call_tool("ask", {"question": question("FINAL(str(z))")})
        assert result.structured_content["answer"] == "42"


async def test_a_daemon_error_is_a_tool_error(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project)) as session:
        result = await session.call_tool(
            "ask", {"question": "q", "models": {"root": "no-such-model"}}
        )
        assert result.is_error and "no-such-model" in result.content[0].text
        missing = await session.call_tool("trajectory", {"run_id": "ffffffffffff"})
        assert missing.is_error


def test_citations_name_only_files_of_the_workspace(tmp_path):
    from rlmd.frontdoors.link import citations

    project = make_project(tmp_path)
    (tmp_path / "outside.py").write_text("x = 1\n")
    answer = (
        "see pkg/core.py:1-2, gone.py:3, ../outside.py:1, pkg/core.py:1-2 again and `README.md:1`"
    )
    assert [(c["path"], c["line"], c["end_line"]) for c in citations(answer, project)] == [
        ("pkg/core.py", 1, 2),
        ("README.md", 1, None),
    ]
    assert citations(None, project) == [] and citations("no refs", project) == []


async def test_starts_the_users_daemon_when_none_runs_and_keeps_it_warm(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    project = make_project(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlmd", "mcp", "--workspace", str(project), "--model", CELLS],
        env={"RLMD_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    pid_file = home / "run" / "daemon.pid"
    pid = None
    try:
        async with mcp_session(params) as session:
            first = await session.call_tool("ask", {"question": question("w = 5")})
            assert first.structured_content["status"] == "completed"
            pid = int(pid_file.read_text())
            os.kill(pid, 0)  # the daemon it started is alive
        # a second MCP server attaches to the same daemon: the REPL is still warm
        async with mcp_session(params) as session:
            second = await session.call_tool("ask", {"question": question("FINAL(str(w * 2))")})
            assert second.structured_content["answer"] == "10"
        assert int(pid_file.read_text()) == pid
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)


async def test_a_client_that_abandons_ask_cancels_the_run(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project)) as session:
        ask = asyncio.create_task(
            session.call_tool("ask", {"question": question("print(1)", sleep_s=30.0)})
        )
        client = await daemon.client()
        try:
            run_id = await first_task(client, project)
            ask.cancel()  # the SDK tells the server with notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await ask
            for _ in range(600):
                status = await client.command("rlmd.task.status", {"run_id": run_id})
                if status["state"] == "finished":
                    break
                await asyncio.sleep(0.05)
            assert status["status"] == "cancelled" and status["cancel_requested"] is True
        finally:
            await client.close()


def test_notes_of_unfollowed_tasks_are_bounded_but_keep_their_end():
    from rlmd.frontdoors.link import EARLY_NOTES_PER_TASK, EARLY_TASKS_KEPT, DaemonLink

    link = DaemonLink()
    for _ in range(EARLY_NOTES_PER_TASK * 2):
        link._route({"method": "rlmd/event", "params": {"task_id": "a", "kind": "cell.started"}})
    link._route({"method": "rlmd/taskStatus", "params": {"run_id": "a", "state": "finished"}})
    kept = link._early["a"]
    assert len(kept) == EARLY_NOTES_PER_TASK + 1 and kept[-1]["params"]["state"] == "finished"
    for i in range(EARLY_TASKS_KEPT + 5):
        link._route({"method": "rlmd/taskStatus", "params": {"run_id": f"t{i}", "state": "queued"}})
    assert len(link._early) == EARLY_TASKS_KEPT and "a" not in link._early


async def test_a_client_may_name_only_models_the_user_configured(daemon, tmp_path):
    """A (possibly prompt-injected) MCP client must not make the daemon import a file of its
    choosing: only the user's models (built-ins, user config, rlmd mcp --model) go."""
    project = make_project(tmp_path)
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(
        f"def respond(messages):\n    open({str(marker)!r}, 'w').close()\n    return 'FINAL(1)'\n"
    )
    config = daemon.home / "config.toml"
    config.write_text(f'[models.mine]\nprovider = "scripted"\nmodel = "{MODELS}:cells"\n')
    try:
        async with mcp_session(server_params(daemon, project)) as session:
            for name in (f"scripted:{evil}:respond", f"local:{evil}"):
                for role in ("root", "sub"):
                    result = await session.call_tool(
                        "ask", {"question": question("FINAL(1)"), "models": {role: name}}
                    )
                    text = result.content[0].text
                    assert result.is_error and "loads a file" in text and "MCP client" in text
            hosted = await session.call_tool(
                "ask", {"question": "q", "models": {"root": "openai:o3"}}
            )
            assert hosted.is_error and "not a model your user config" in hosted.content[0].text
            assert not marker.exists()
            # the user's own: the --model it was started with, and a user-config entry
            for name in (CELLS, "mine"):
                ok = await session.call_tool(
                    "ask", {"question": question("FINAL('ok')"), "models": {"root": name}}
                )
                assert not ok.is_error and ok.structured_content["status"] == "completed"
    finally:
        config.unlink()


async def test_a_workspace_must_lie_inside_the_servers_folder(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project)) as session:
        for outside in ("/etc", "../../..", str(tmp_path)):
            for tool, args in (
                ("ask", {"question": question("FINAL(1)")}),
                ("workspace_variables", {}),
                ("runs", {}),
            ):
                result = await session.call_tool(tool, {**args, "workspace": outside})
                text = result.content[0].text
                assert result.is_error and f"outside {project}" in text, (tool, outside, text)
        inside = await session.call_tool("runs", {"workspace": "pkg"})
        assert not inside.is_error


async def test_trajectory_of_last_and_a_nan_budget_says_what_it_got(daemon, tmp_path):
    project = make_project(tmp_path)
    async with mcp_session(server_params(daemon, project)) as session:
        done = await session.call_tool("ask", {"question": question("FINAL('x')")})
        last = await session.call_tool("trajectory", {"run_id": "last"})
        assert not last.is_error
        assert last.structured_content["run"]["id"] == done.structured_content["run_id"]
        nan = await session.call_tool("ask", {"question": "q", "budgets": {"max_usd": "NaN"}})
        assert nan.is_error and "got NaN" in nan.content[0].text


@pytest.mark.parametrize(
    "args, message",
    [
        (["mcp", "--max-usd", "-1"], "--max-usd must be a number > 0, got -1.0"),
        (["mcp", "--max-iterations", "0"], "--max-iterations must be >= 1, got 0"),
        (["acp", "--max-usd", "-5"], "--max-usd must be a number > 0, got -5.0"),
        (["acp", "--max-seconds", "nan"], "--max-seconds must be a number of seconds > 0, got nan"),
        # review17 left: a file was "no such folder" too
        (["mcp", "--workspace", "/dev/null"], "--workspace /dev/null is not a folder"),
        (["mcp", "--workspace", "/no/such/dir"], "--workspace: no such folder: /no/such/dir"),
    ],
)
def test_a_bad_flag_stops_the_door_at_startup(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", *args, "--no-start"],
        env={**os.environ, "RLMD_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)},
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr


INIT = {
    "mcp": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
    "acp": {"protocolVersion": 1},
}
"""Each door's ``initialize`` params, and where its reply names the program."""
INFO = {"mcp": "serverInfo", "acp": "agentInfo"}
WORKSPACE = {"mcp": lambda folder: ["--workspace", str(folder)], "acp": lambda folder: []}
BAD_LINES = [
    (b"not json", -32700, "is not JSON (Expecting value"),
    (b"\xff\xfe{", -32700, "is not UTF-8 (byte 0xff at 0)"),
    (b"42", -32600, "is JSON int, not a JSON-RPC message object"),
    (b"[1, 2]", -32600, "is JSON list"),
    (b"null", -32600, "is JSON null"),
    (b'{"foo": 1}', -32600, 'is not a JSON-RPC message (no "jsonrpc": "2.0")'),
    (b'{"jsonrpc": "2.0"}', -32600, 'is not a JSON-RPC message (neither "method" nor "id")'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', -32600, 'is not a JSON-RPC message ("method'),
    (b'{"jsonrpc": "2.0", "id": 1}', -32600, "is not a JSON-RPC message (a response with"),
    (b"[" * 100_000 + b"]" * 100_000, -32700, "is JSON nested too deeply to read"),
]


@pytest.mark.parametrize("door", ["mcp", "acp"])
def test_a_line_that_is_not_a_message_is_answered_and_the_door_goes_on(tmp_path, door):
    """Review14/15 left: a line ``rlmd acp`` or ``rlmd mcp`` could not read was dropped
    without a word, logged a traceback, or stopped the door (``42``, ``null``); review17:
    ``rlmd acp`` still dropped an object that is no JSON-RPC message (``{"foo": 1}``)
    silently. Both doors check a line with one reader: each bad line is answered with the
    JSON-RPC error (``id`` null), named in one stderr line, and skipped."""
    init = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT[door]}
    stdin = b"".join(line + b"\n" for line, _, _ in BAD_LINES) + json.dumps(init).encode()
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", door, "--no-start", *WORKSPACE[door](tmp_path)],
        env={**os.environ, "RLMD_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)},
        input=stdin + b"\n",
        capture_output=True,
        timeout=60,
    )
    err = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in err, err
    replies = [json.loads(x) for x in done.stdout.decode().splitlines()]
    assert [r.get("error", {}).get("code") for r in replies[:-1]] == [c for _, c, _ in BAD_LINES]
    assert all(r["id"] is None for r in replies[:-1])
    assert replies[-1]["id"] == 7 and replies[-1]["result"][INFO[door]]["name"] == "rlmd"
    lines = err.strip().splitlines()
    assert len(lines) == len(BAD_LINES), err
    for number, (line, (_, code, why)) in enumerate(zip(lines, BAD_LINES, strict=True), 1):
        assert line.startswith(f"rlmd {door}: line {number} of stdin {why}"), line
        assert f"answered {code}" in line, line

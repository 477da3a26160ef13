"""The daemon as an LSP-style server, driven by pytest-lsp's client: through the
``rlmd attach --stdio`` bridge (which starts the daemon) and through ``rlmd serve --stdio``.
Covers ``initialize`` capabilities, commands, run-event notifications and ``$/progress``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from helpers.server import CELLS, make_project, question
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.timeout(60)

BASE = Path(tempfile.mkdtemp(prefix="rlmd-lsp-"))
HOME = BASE / "home"  # the project lies beside the rlmd home: a codebase inside it is refused
HOME.mkdir()
PROJECT = make_project(BASE, "lsp-proj")
ENV = {**os.environ, "RLMD_HOME": str(HOME)}
INIT = types.InitializeParams(
    capabilities=types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=True)
    ),
    initialization_options={"events": "summary", "progress": "all"},
)


@pytest.fixture(scope="module", autouse=True)
def stop_autostarted_daemon():
    yield
    pid_file = HOME / "run" / "daemon.pid"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGTERM)


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "rlmd", "attach", "--stdio"], server_env=ENV
    )
)
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await lsp_client.initialize_session(INIT)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "rlmd", "serve", "--stdio"], server_env=ENV
    )
)
async def stdio_client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INIT)
    yield
    await lsp_client.shutdown_session()


async def run_with_events(lsp_client: LanguageClient) -> tuple[dict, list]:
    events: list = []
    done: asyncio.Future = asyncio.get_running_loop().create_future()

    @lsp_client.feature("rlmd/event")
    def on_event(params):
        events.append(params)

    @lsp_client.feature("rlmd/taskStatus")
    def on_status(params):
        if params.state == "finished" and not done.done():
            done.set_result(params)

    @lsp_client.feature("rlmd/workspace")
    def on_workspace(params):
        pass

    started = await lsp_client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="rlmd.task.start",
            arguments=[
                {
                    "workspace": str(PROJECT),
                    "question": question("z = 6", "FINAL(z * 7)"),
                    "models": {"root": CELLS},
                }
            ],
        )
    )
    final = await asyncio.wait_for(done, 30)
    assert final.run_id == started["run_id"]
    return started, events


async def test_attach_bridge_commands_events_and_progress(client: LanguageClient):
    provider = client.init_result.capabilities.execute_command_provider
    assert {"rlmd.task.start", "rlmd.health", "rlmd.workspace.exec"} <= set(provider.commands)
    assert client.init_result.server_info.name == "rlmd"
    started, events = await run_with_events(client)
    kinds = [e.kind for e in events if e.task_id == started["run_id"]]
    assert kinds[0] == "run.started" and kinds[-1] == "run.finished" and "cell.finished" in kinds
    status = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="rlmd.task.status", arguments=[{"run_id": started["run_id"]}]
        )
    )
    assert status["answer"] == "42"
    token = f"rlmd-{started['run_id']}"
    for _ in range(50):
        reports = client.progress_reports.get(token, [])
        if reports and reports[-1].kind == "end":
            break
        await asyncio.sleep(0.05)
    assert reports[0].kind == "begin" and reports[0].cancellable
    assert reports[-1].kind == "end" and "completed" in reports[-1].message
    health = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rlmd.health", arguments=[])
    )
    assert health["mode"] == "socket" and health["socket"]


async def test_serve_stdio_single_client(stdio_client: LanguageClient):
    health = await stdio_client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rlmd.health", arguments=[{}])
    )
    assert health["mode"] == "stdio" and health["clients"] == 1
    started, events = await run_with_events(stdio_client)
    assert any(e.kind == "run.finished" for e in events)
    with pytest.raises(Exception) as err:
        await stdio_client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="rlmd.task.start", arguments=[{"question": 1}])
        )
    assert "must be" in str(err.value) or "missing" in str(err.value)

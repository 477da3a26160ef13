"""Only the user's own clients may command the daemon: a process that can reach the socket
(model code in a sandbox, for one) but cannot read the token file is refused, and an
``inprocess`` workspace over the socket needs the user's explicit opt-in."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from helpers.server import Daemon, make_project

from rlmd.server import auth
from rlmd.server.client import Client, RpcError
from rlmd.server.errors import SANDBOX_FAILED, UNAUTHORIZED, UNAVAILABLE

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


def health(msg_id: int = 1) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "workspace/executeCommand",
            "params": {"command": "rlmd.health", "arguments": []},
        }
    ).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def exchange(path, data: bytes) -> tuple[dict, bool]:
    """Send ``data`` on a raw connection; the first reply, and whether the daemon then
    closed the connection."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(path))
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        headers = dict(line.split(b":", 1) for line in head.split(b"\r\n"))
        length = int(headers[b"Content-Length"])
        while len(rest) < length:
            rest += s.recv(65536)
        reply = json.loads(rest[:length])
        closed = False
        try:
            while chunk := s.recv(65536):
                rest += chunk
            closed = True
        except (TimeoutError, ConnectionError):
            closed = True
        return reply, closed


def test_the_token_file_is_private_to_the_user(daemon):
    path = daemon.home / "run" / auth.TOKEN_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert len(auth.token_for(daemon.socket) or "") == 64


def test_a_socket_client_without_the_token_is_refused_with_a_clear_error(daemon):
    reply, closed = exchange(daemon.socket, health(7))
    assert reply["id"] == 7 and "result" not in reply
    assert reply["error"]["code"] == UNAUTHORIZED
    assert "Rlmd-Token" in reply["error"]["message"]
    assert "rlmd attach --stdio" in reply["error"]["message"]
    assert closed


def test_a_socket_client_with_a_guessed_token_is_refused(daemon):
    reply, closed = exchange(daemon.socket, auth.handshake("0" * 64) + health(1))
    assert (
        reply["error"]["code"] == UNAUTHORIZED and "wrong rlmd token" in (reply["error"]["message"])
    )
    assert closed


def test_a_socket_client_with_the_token_is_served(daemon):
    token = auth.token_for(daemon.socket)
    assert token
    reply, _ = exchange(daemon.socket, auth.handshake(token) + health(3))
    assert reply["id"] == 3 and reply["result"]["pid"] == daemon.proc.pid


async def test_an_inprocess_workspace_over_the_socket_needs_the_users_opt_in(daemon, tmp_path):
    project = make_project(tmp_path)
    c = await Client.connect(daemon.socket)
    try:
        with pytest.raises(RpcError) as refused:
            await c.command(
                "rlmd.workspace.open", {"workspace": str(project), "sandbox": "inprocess"}
            )
        assert refused.value.code == UNAVAILABLE
        assert "allow_inprocess = true" in refused.value.message
        # a project's own config may not grant it
        (project / ".rlmd.toml").write_text("[daemon]\nallow_inprocess = true\n")
        with pytest.raises(RpcError) as still:
            await c.command(
                "rlmd.workspace.open", {"workspace": str(project), "sandbox": "inprocess"}
            )
        assert still.value.code == UNAVAILABLE
        (project / ".rlmd.toml").unlink()
        (daemon.home / "config.toml").write_text("[daemon]\nallow_inprocess = true\n")
        try:
            opened = await c.command(
                "rlmd.workspace.open", {"workspace": str(project), "sandbox": "inprocess"}
            )
            assert opened["sandbox"] == "inprocess" and opened["started"]
            await c.command("rlmd.workspace.close", {"workspace": str(project)})
        finally:
            (daemon.home / "config.toml").unlink()
    finally:
        await c.close()
        await asyncio.sleep(0)


async def test_the_daemon_refuses_an_unisolated_sandbox_unless_the_user_accepts_it(
    daemon, tmp_path
):
    """``require_isolation`` is on by default in the daemon: a subprocess sandbox that would
    get no wrapper (as on a machine without bwrap or unshare) is not started."""
    project = make_project(tmp_path, "unisolated")
    config = daemon.home / "config.toml"
    config.write_text('[run]\nsandbox_options = { isolation = "none" }\n')
    c = await Client.connect(daemon.socket)
    try:
        with pytest.raises(RpcError) as refused:
            await c.command("rlmd.workspace.open", {"workspace": str(project)})
        assert refused.value.code == SANDBOX_FAILED
        assert "NOT isolated" in refused.value.message
        assert "apt-get install bubblewrap" in refused.value.message
        await c.command("rlmd.workspace.close", {"workspace": str(project)})
        config.write_text(config.read_text() + "[sandbox]\nrequire_isolation = false\n")
        opened = await c.command("rlmd.workspace.open", {"workspace": str(project)})
        assert opened["started"]
        await c.command("rlmd.workspace.close", {"workspace": str(project)})
    finally:
        config.unlink()
        await c.close()

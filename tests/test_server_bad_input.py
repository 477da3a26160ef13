"""Bad input never hangs or kills the daemon: every case gets a JSON-RPC error or is dropped,
and other clients' tasks go on."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from helpers.server import CELLS, Daemon, finished, make_project, question

from rlmd.server import auth
from rlmd.server.client import Client, RpcError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(
        tmp_path_factory.mktemp("home"),
        "--idle-timeout",
        "0",
        "--max-message-bytes",
        "100000",
        "--max-client-buffer",
        "300000",
        "--client-stall",
        "5",
    ).start()
    yield d
    d.stop()


def framed(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def error_reply(c: Client, data: bytes) -> dict:
    """Send raw bytes and return the next error response the daemon sends."""
    before = len(c.notifications)
    fut = asyncio.get_running_loop().create_future()
    orig = c._dispatch

    def grab(msg):
        if "error" in msg and not fut.done():
            fut.set_result(msg)
        orig(msg)

    c._dispatch = grab
    try:
        c.send_raw(data)
        return await asyncio.wait_for(fut, 10)
    finally:
        c._dispatch = orig
        assert len(c.notifications) >= before


async def test_malformed_messages_get_errors_and_the_connection_survives(daemon):
    c = await daemon.client()
    try:
        r = await error_reply(c, framed(b"{not json"))
        assert r["id"] is None and r["error"]["code"] == -32700
        r = await error_reply(c, framed(b"[1, 2]"))
        assert r["error"]["code"] == -32600 and "batch" in r["error"]["message"]
        r = await error_reply(c, framed(b'"text"'))
        assert r["error"]["code"] == -32600
        r = await error_reply(c, framed(b'{"jsonrpc": "1.0", "id": 7, "method": "x"}'))
        assert r["id"] == 7 and r["error"]["code"] == -32600
        r = await error_reply(c, framed(b'{"jsonrpc": "2.0", "id": true, "method": "x"}'))
        assert r["error"]["code"] == -32600
        r = await error_reply(c, framed(b'{"jsonrpc": "2.0", "id": 8, "method": "x", "params": 3}'))
        assert r["id"] == 8 and r["error"]["code"] == -32602
        r = await error_reply(c, framed(b'{"jsonrpc": "2.0", "id": 9, "method": 5}'))
        assert r["error"]["code"] == -32600
        bad = {
            "jsonrpc": "2.0",
            "id": 10,
            "method": "workspace/executeCommand",
            "params": {"command": "rlmd.health", "arguments": "nope"},
        }
        r = await error_reply(c, framed(json.dumps(bad).encode()))
        assert r["id"] == 10 and r["error"]["code"] == -32602
        bad = {"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {"capabilities": 5}}
        r = await error_reply(c, framed(json.dumps(bad).encode()))
        assert r["id"] == 11 and r["error"]["code"] in (-32602, -32603)
        r = await error_reply(c, framed(b"\xff\xfe\x00"))
        assert r["error"]["code"] == -32700
        with pytest.raises(RpcError) as err:
            await c.request("no/such/method", {})
        assert err.value.code == -32601
        with pytest.raises(RpcError) as err:
            await c.command("rlmd.health", {"extra": 1})
        assert err.value.code == -32602
        with pytest.raises(RpcError) as err:
            await c.request(
                "workspace/executeCommand", {"command": "rlmd.health", "arguments": [5]}
            )
        assert "must be a JSON object" in err.value.message
        for field in ("models", "budgets"):  # said "parameters must be ...": which one?
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.task.start", {"workspace": "/", "question": "q", field: [1]})
            assert err.value.code == -32602
            assert err.value.message == f"{field} must be a JSON object, got array"
        c.notify("no/such/notification", {"x": 1})
        c.notify("$/cancelRequest", {"id": 12345})
        for odd in ({"a": 1}, [1], None, True):  # review19: an object id logged a traceback
            c.notify("$/cancelRequest", {"id": odd})
        c.notify("$/cancelRequest", [1])
        assert (await c.command("rlmd.health"))["ok"]
        assert "$/cancelRequest failed" not in daemon.log(), daemon.log()
    finally:
        await c.close()


async def test_broken_framing_and_huge_messages_drop_the_client(daemon):
    for data in (
        b"Content-Length: 10000000\r\n\r\n",  # over --max-message-bytes: refused before reading
        b"Garbage header without colon\r\n\r\n",
        b"Content-Length: abc\r\n\r\n",
        b"X-Other: 1\r\n\r\n{}",
        b"A" * 70000 + b"\r\n",  # a header line over 64 KiB
    ):
        c = await daemon.client()
        r = await error_reply(c, data)
        assert r["id"] is None and r["error"]["code"] == -32600
        for _ in range(100):
            if c.closed:
                break
            await asyncio.sleep(0.02)
        assert c.closed, data[:30]
        await c.close()
    c = await daemon.client()
    try:
        assert (await c.command("rlmd.health"))["ok"]
    finally:
        await c.close()


async def test_exit_closes_only_that_connection(daemon):
    a, b = await daemon.client(), await daemon.client()
    try:
        await a.request("initialize", {"capabilities": {}, "processId": None})
        a.notify("exit")
        for _ in range(100):
            if a.closed:
                break
            await asyncio.sleep(0.02)
        assert a.closed and daemon.alive
        assert (await b.command("rlmd.health"))["ok"]
    finally:
        await a.close()
        await b.close()


async def test_a_client_that_never_reads_is_dropped_and_others_go_on(daemon, tmp_path):
    project = make_project(tmp_path)
    silent = socket.socket(socket.AF_UNIX)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    silent.connect(str(daemon.socket))
    silent.sendall(token(daemon) + framed(health_request(1)))  # subscribes, then never reads again
    c = await daemon.client()
    try:
        assert (await c.command("rlmd.health"))["clients"] == 2
        st = await start_loud_task(c, project)
        done = (await c.wait_for(finished(st["run_id"]), timeout=30))["params"]
        assert done["status"] == "completed"
        stdout = [e["data"]["stdout"] for e in c.events(st["run_id"], "cell.finished")]
        assert [len(s) for s in stdout] == [400001] * 3 + [0]
        # the silent client is dropped once its backlog has not drained for the stall window
        while (await c.command("rlmd.health"))["clients"] != 1:
            await asyncio.sleep(0.1)
    finally:
        silent.close()
        await c.close()


async def start_loud_task(c: Client, project) -> dict:
    """A task printing 400,000 characters in each of three cells, then answering 1."""
    # three different cells: the engine does not run a turn repeated a third time
    loud = [f"print({ch!r} * 400000)" for ch in "xyz"]
    return await c.command(
        "rlmd.task.start",
        {
            "workspace": str(project),
            "question": question(*loud, "x = 1\nFINAL(x)"),
            "models": {"root": CELLS},
        },
    )


def token(daemon: Daemon) -> bytes:
    """The header block that lets a raw socket client in."""
    return auth.handshake(auth.token_for(daemon.socket) or "")


def health_request(msg_id: int) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "workspace/executeCommand",
            "params": {"command": "rlmd.health", "arguments": []},
        }
    ).encode()


def read_until_reply(sock: socket.socket, msg_id: int, pause_s: float) -> bool:
    """Read JSON-RPC frames 4 KiB at a time, pausing ``pause_s`` between reads, until the
    reply to ``msg_id``; ``False`` when the daemon closed the connection first."""
    buf = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionError:
            return False
        if not chunk:
            return False
        buf += chunk
        while b"\r\n\r\n" in buf:
            head, _, rest = buf.partition(b"\r\n\r\n")
            headers = dict(line.split(b":", 1) for line in head.split(b"\r\n"))
            length = int(headers[b"Content-Length"])
            if len(rest) < length:
                break
            msg, buf = json.loads(rest[:length]), rest[length:]
            if msg.get("id") == msg_id and "result" in msg:
                return True
        time.sleep(pause_s)


async def test_a_slow_reader_that_keeps_draining_is_never_dropped(daemon, tmp_path):
    """A client reading 4 KiB at a time with pauses falls far behind a burst of 1.2 MB of
    output (four times the buffer limit) but keeps draining, so it gets everything."""
    project = make_project(tmp_path)
    slow = socket.socket(socket.AF_UNIX)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(str(daemon.socket))
    slow.sendall(token(daemon) + framed(health_request(1)))
    c = await daemon.client()
    try:
        st = await start_loud_task(c, project)
        assert (await c.wait_for(finished(st["run_id"]), timeout=30))["params"]["status"] == (
            "completed"
        )
        slow.sendall(framed(health_request(2)))
        reader = asyncio.to_thread(read_until_reply, slow, 2, 0.002)
        assert await asyncio.wait_for(reader, 50), "the slow reader was dropped"
    finally:
        slow.close()
        await c.close()


async def test_a_file_uri_with_an_encoded_nul_is_invalid_params_not_internal(daemon):
    """Review13: ``file:///x%00`` (the NUL arrives percent-encoded, past the plain-text check)
    answered ``-32603 internal error ... ValueError: embedded null byte``."""
    c = await daemon.client()
    try:
        for command in ("rlmd.task.start", "rlmd.workspace.open", "rlmd.workspace.variables"):
            params = {"workspace": "file:///tmp%00x"}
            if command == "rlmd.task.start":
                params["question"] = "q"
            with pytest.raises(RpcError) as err:
                await c.command(command, params)
            assert err.value.code == -32602, (command, err.value.message)
            assert "NUL" in err.value.message
        assert (await c.command("rlmd.health"))["ok"]
    finally:
        await c.close()


async def test_a_file_uri_naming_another_host_is_refused_not_read_as_a_path(daemon, tmp_path):
    """Review19: ``file://home/me/proj`` (two slashes: the host ``home``) opened the folder
    ``/me/proj``, and ``file://otherhost/etc`` opened ``/etc``: a different folder from the
    one meant, without a word. A file URI's host must be empty or ``localhost``."""
    project = make_project(tmp_path)
    c = await daemon.client()
    try:
        for uri in ("file://otherhost/etc", "file://" + str(project).lstrip("/")):
            with pytest.raises(RpcError) as err:
                await c.command("rlmd.workspace.open", {"workspace": uri})
            assert err.value.code == -32602 and "names the host" in err.value.message
            assert "file:///path" in err.value.message
        opened = await c.command("rlmd.workspace.open", {"workspace": f"file://localhost{project}"})
        assert opened["workspace"] == str(project.resolve())
        await c.command("rlmd.workspace.close", {"workspace": str(project), "checkpoint": False})
    finally:
        await c.close()


def _request(msg_id: int, method: str, **params: object) -> bytes:
    msg: dict = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params:
        msg["params"] = params.get("params", params)
    return framed(json.dumps(msg).encode())


async def test_a_request_without_params_or_with_bad_ones_says_what_is_wrong(daemon):
    """Review14: a request to an unknown method without ``params`` (JSON-RPC lets it leave
    them out) was answered ``-32603`` (a bug, says the protocol) with pygls' "missing 1
    required positional argument: 'params'"; a bad ``initialize`` or ``executeCommand``
    only said "While structuring InitializeRequest (1 sub-exception)"."""
    c = await daemon.client()
    try:
        for n, method in enumerate(("no/such", "$/something"), 1):
            r = await error_reply(c, _request(n, method))
            assert r["id"] == n and r["error"]["code"] == -32601, r
            assert r["error"]["message"] == f"Method Not Found: {method}"
        r = await error_reply(c, _request(3, "workspace/executeCommand"))
        assert r["id"] == 3 and r["error"]["code"] == -32602
        assert "expected ExecuteCommandParams @ $.params" in r["error"]["message"]
        r = await error_reply(c, _request(4, "initialize", capabilities=5))
        assert r["id"] == 4 and r["error"]["code"] == -32602
        assert "expected ClientCapabilities @ $.params.capabilities" in r["error"]["message"]
        assert "While structuring" not in r["error"]["message"]
        assert (await c.command("rlmd.health"))["ok"]
    finally:
        await c.close()


async def test_a_request_after_shutdown_is_answered_not_dropped(daemon):
    """Review14: after ``shutdown`` pygls dropped every request without a word, so a client
    that sent one more waited for its answer forever. LSP: such requests get
    ``InvalidRequest``; ``exit`` still closes the connection."""
    c = await daemon.client()
    try:
        assert await c.request("shutdown", None) is None
        r = await error_reply(c, _request(7, "workspace/executeCommand", command="rlmd.health"))
        assert r["id"] == 7 and r["error"]["code"] == -32600
        assert "shut down; only exit may follow" in r["error"]["message"]
        c.notify("exit")
        for _ in range(100):
            if c.closed:
                break
            await asyncio.sleep(0.02)
        assert c.closed and daemon.alive
    finally:
        await c.close()


async def test_shutdown_with_commands_in_flight_answers_every_request(daemon):
    """pygls cancelled the requests in flight while iterating their dict, and a cancel
    removes its entry at once: ``shutdown`` was answered ``-32603`` "dictionary changed
    size during iteration", and the requests after the first cancelled one got no answer."""
    c = await daemon.client()
    replies: dict = {}
    orig = c._dispatch

    def grab(msg):
        if "id" in msg and "method" not in msg:
            replies[msg["id"]] = msg
        orig(msg)

    c._dispatch = grab
    try:
        health = [_request(n, "workspace/executeCommand", command="rlmd.health") for n in (1, 2, 3)]
        c.send_raw(b"".join(health) + _request(4, "shutdown"))  # one read: all in flight
        for _ in range(250):
            if len(replies) == 4:
                break
            await asyncio.sleep(0.02)
        assert replies[4].get("error") is None and replies[4]["result"] is None, replies[4]
        for n in (1, 2, 3):  # answered, or cancelled by the shutdown: never left waiting
            assert "result" in replies[n] or replies[n]["error"]["code"] == -32800, replies[n]
        c.notify("exit")
    finally:
        c._dispatch = orig
        await c.close()
    assert daemon.alive

"""Bad input never hangs or kills the daemon: every case gets a JSON-RPC error or is dropped,
and other clients' tasks go on."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from helpers.server import CELLS, Daemon, finished, make_project, question

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
        c.notify("no/such/notification", {"x": 1})
        c.notify("$/cancelRequest", {"id": 12345})
        assert (await c.command("rlmd.health"))["ok"]
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
    silent.connect(str(daemon.socket))
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "workspace/executeCommand",
            "params": {"command": "rlmd.health", "arguments": []},
        }
    ).encode()
    silent.sendall(framed(body))  # subscribes, then never reads again
    c = await daemon.client()
    try:
        await asyncio.sleep(0.2)
        assert (await c.command("rlmd.health"))["clients"] == 2
        loud = "print('x' * 400000)"
        st = await c.command(
            "rlmd.task.start",
            {
                "workspace": str(project),
                "question": question(loud, loud, loud, "x = 1\nFINAL(x)"),
                "models": {"root": CELLS},
            },
        )
        done = (await c.wait_for(finished(st["run_id"]), timeout=30))["params"]
        assert done["status"] == "completed"
        assert (await c.command("rlmd.health"))["clients"] == 1
        stdout = [e["data"]["stdout"] for e in c.events(st["run_id"], "cell.finished")]
        assert [len(s) for s in stdout] == [400001] * 3 + [0]
    finally:
        silent.close()
        await c.close()

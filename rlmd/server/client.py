"""A small asyncio JSON-RPC client for the daemon's Unix socket (no pygls).

Used by ``rlmd doctor``, the tests and the load benchmark. Every request has a timeout;
notifications are kept in :attr:`Client.notifications` (and can be awaited with
:meth:`Client.wait_for`). Server-to-client requests (``window/workDoneProgress/create``)
are answered with ``null`` so progress works when asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmd.server import auth


class RpcError(Exception):
    """The daemon answered with a JSON-RPC error (``code``, ``message``, ``data``)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class Client:
    """One connection to the daemon. Create with :meth:`connect`; close with :meth:`close`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = itertools.count(1)
        self.pending: dict[Any, asyncio.Future[Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        #: called with each notification instead of keeping it in ``notifications`` (a
        #: long-lived client such as a front door would otherwise grow without bound)
        self.on_notification = on_notification
        #: for each answered request id, how many notifications had arrived before its answer
        #: (lets a caller check the order of a response and the notifications around it)
        self.answered_after: dict[Any, int] = {}
        self._waiters: list[tuple[Callable[[dict[str, Any]], bool], asyncio.Future[Any]]] = []
        self.closed = False
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls, path: str | Path, timeout: float = 5.0, *, token: str | None = None
    ) -> Client:
        """Connect to the socket at ``path`` and send the daemon's token (``token``, else the
        one :func:`rlmd.server.auth.token_for` finds; none found: nothing is sent and the
        daemon refuses the first command with ``UNAUTHORIZED``).

        Raises:
            OSError: nobody listens there (``FileNotFoundError``, ``ConnectionRefusedError``).
            TimeoutError: the connection did not complete in ``timeout`` seconds.
        """
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(path), limit=2**26), timeout
        )
        token = token or auth.token_for(path)
        if token:
            writer.write(auth.handshake(token))
        return cls(reader, writer)

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (for tests of bad input)."""
        self.writer.write(data)

    def _send(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params: Any = None, *, timeout: float = 30.0) -> Any:
        """Send a request and return its ``result``.

        Raises:
            RpcError: the daemon answered with an error.
            TimeoutError: no answer in ``timeout`` seconds.
            ConnectionError: the connection closed first.
        """
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = fut
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            payload["params"] = params
        try:
            self._send(payload)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.pending.pop(msg_id, None)

    def notify(self, method: str, params: Any = None) -> None:
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = params
        self._send(payload)

    async def command(
        self, name: str, params: dict[str, Any] | None = None, *, timeout: float = 30.0
    ) -> Any:
        """``workspace/executeCommand`` with one parameter object; returns the result."""
        arguments = [params] if params is not None else []
        return await self.request(
            "workspace/executeCommand", {"command": name, "arguments": arguments}, timeout=timeout
        )

    async def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 30.0,
        seen: bool = True,
    ) -> dict[str, Any]:
        """The first notification (``{"method", "params"}``) matching ``predicate``; with
        ``seen`` the ones already received count too.

        Raises:
            TimeoutError: none came in ``timeout`` seconds.
        """
        if seen:
            for note in self.notifications:
                if predicate(note):
                    return note
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        entry = (predicate, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def events(self, run_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Received ``rlmd/event`` params, optionally of one task and/or one kind."""
        out = []
        for note in self.notifications:
            if note["method"] != "rlmd/event":
                continue
            p = note["params"]
            if run_id is not None and p.get("task_id") != run_id:
                continue
            if kind is not None and p.get("kind") != kind:
                continue
            out.append(p)
        return out

    async def _read_loop(self) -> None:
        try:
            while True:
                length = None
                while True:
                    line = await self.reader.readline()
                    if not line:
                        raise ConnectionError("the daemon closed the connection")
                    if line in (b"\r\n", b"\n"):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                if length is None:
                    continue
                msg = json.loads(await self.reader.readexactly(length))
                self._dispatch(msg)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            self._fail(ConnectionError(str(exc)))
        except asyncio.CancelledError:
            self._fail(ConnectionError("client closed"))
            raise

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:  # a request from the daemon
            self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            if self.on_notification is None:
                self.notifications.append(
                    {"method": msg["method"], "params": msg.get("params"), "request": True}
                )
            return
        if "method" in msg:
            note = {"method": msg["method"], "params": msg.get("params")}
            if self.on_notification is not None:
                self.on_notification(note)
                return
            self.notifications.append(note)
            for predicate, fut in list(self._waiters):
                if not fut.done():
                    try:
                        if predicate(note):
                            fut.set_result(note)
                    except Exception as exc:
                        fut.set_exception(exc)
            return
        self.answered_after[msg.get("id")] = len(self.notifications)
        reply = self.pending.get(msg.get("id"))
        if reply is None or reply.done():
            return
        if "error" in msg:
            err = msg["error"] or {}
            reply.set_exception(
                RpcError(err.get("code", 0), err.get("message", ""), err.get("data"))
            )
        else:
            reply.set_result(msg.get("result"))

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(exc)
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)

    async def close(self) -> None:
        """Close the connection (pending requests fail with ``ConnectionError``)."""
        self._task.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self._task
        self.writer.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self.writer.wait_closed()

"""The host end of a kernel's channel over a docker attach socket.

With ``tty=False`` docker multiplexes the container's stdout and stderr on the attach socket
as frames of an 8-byte header (stream type: 1 stdout, 2 stderr; 3 zero bytes; big-endian
size) and the payload; what the host writes goes to the container's stdin unframed. The
kernel's channel (:mod:`rlmd.kernel.protocol`) rides on stdin/stdout; stderr carries what
model code writes at the fd level, cut into cells by the kernel's stderr sentinels.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox.base import CallError, CallHandler

log = logging.getLogger(__name__)

STDOUT, STDERR = 1, 2


class KernelDied(Exception):
    """The kernel's channel closed (the container stopped or was killed)."""


class StderrDrain:
    """Collects the stderr stream (at most ``cap`` bytes per cell; the rest is counted) and
    cuts it at the kernel's sentinels ``\\0rlmd:<token>:<request id>\\0``."""

    def __init__(self, token: str, cap: int):
        prefix = protocol.SENTINEL_PREFIX + token.encode("ascii") + b":"
        self._mark = re.compile(re.escape(prefix) + rb"(\d{1,20})\x00")
        self._hold = len(prefix) + 21  # a marker split across chunks is at most this long
        self._cap = cap
        self._kept = bytearray()
        self._dropped = 0
        self._tail = b""
        self._done: dict[int, tuple[bytes, int]] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}

    def _keep(self, data: bytes) -> None:
        room = self._cap - len(self._kept)
        if room > 0:
            self._kept += data[:room]
        self._dropped += max(0, len(data) - max(room, 0))

    def _take(self) -> tuple[bytes, int]:
        out = (bytes(self._kept), self._dropped)
        self._kept, self._dropped = bytearray(), 0
        return out

    def feed(self, data: bytes) -> None:
        buf = self._tail + data
        pos = 0
        for m in self._mark.finditer(buf):
            self._keep(buf[pos : m.start()])
            pos = m.end()
            rid = int(m.group(1))
            self._done[rid] = self._take()
            waiter = self._waiters.pop(rid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        rest = buf[pos:]
        cut = rest.rfind(b"\x00", max(0, len(rest) - self._hold))
        if cut >= 0:  # may be the start of a marker: decide with the next chunk
            self._keep(rest[:cut])
            self._tail = rest[cut:]
        else:
            self._keep(rest)
            self._tail = b""

    async def segment(self, rid: int, timeout: float) -> tuple[bytes, int]:
        """What the cell ``rid`` wrote, once its sentinel arrived (at most ``timeout`` s)."""
        if rid not in self._done:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[rid] = waiter
            try:
                await asyncio.wait_for(waiter, timeout)
            except TimeoutError:
                self._waiters.pop(rid, None)
                log.warning("stderr sentinel of cell %s did not arrive", rid)
                return self.take_now()
        return self._done.pop(rid)

    def take_now(self) -> tuple[bytes, int]:
        """Everything collected so far, a held-back partial marker included."""
        self._keep(self._tail)
        self._tail = b""
        return self._take()

    @staticmethod
    def text(segment: tuple[bytes, int]) -> str:
        data, dropped = segment
        text = data.decode("utf-8", "replace")
        if dropped:
            text += f"\n[rlmd: fd-level output truncated: {dropped} more bytes were dropped]\n"
        return text


class KernelConnection(asyncio.Protocol):
    """One kernel over one attach socket: requests out, ``done``/``call`` frames in, host
    calls served concurrently with ``handler``.

    Attributes:
        hello: resolves with the kernel's hello frame (or :class:`KernelDied`).
        closed: resolves when the socket closes.
        dead: the channel is gone; every pending request failed with :class:`KernelDied`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        self.loop = loop
        self.handler = handler
        self.cap = cap
        self.transport: asyncio.Transport | None = None
        self.drain: StderrDrain | None = None
        self._early: list[bytes] = []
        self._mux = bytearray()
        self._chan = bytearray()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.calls: set[asyncio.Task[None]] = set()
        self.ids = 0
        self.hello: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.dead = False
        self._write_ok = asyncio.Event()
        self._write_ok.set()

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        mux = self._mux
        mux += data
        pos, end = 0, len(mux)
        while end - pos >= 8:
            size = int.from_bytes(mux[pos + 4 : pos + 8], "big")
            if end - pos - 8 < size:
                break
            stream = mux[pos]
            payload = bytes(mux[pos + 8 : pos + 8 + size])
            pos += 8 + size
            if stream == STDOUT:
                self._on_channel(payload)
            elif stream == STDERR:
                self._on_stderr(payload)
            if self.dead:
                return
        del mux[:pos]

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._mark_dead()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_ok.clear()

    def resume_writing(self) -> None:
        self._write_ok.set()

    # -- streams ----------------------------------------------------------------------------

    def _on_stderr(self, data: bytes) -> None:
        if self.drain is not None:
            self.drain.feed(data)
        else:
            self._early.append(data)

    def _on_channel(self, data: bytes) -> None:
        buf = self._chan
        buf += data
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + n:
                break
            body = bytes(buf[4 : 4 + n])
            del buf[: 4 + n]
            try:
                msg = protocol.decode(body)
            except ValueError:
                log.error("a container kernel sent a malformed frame; dropping its channel")
                self.abort()
                return
            self._dispatch(msg)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "done":
            fut = self.pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif op == "call":
            task = self.loop.create_task(self._serve(msg))
            self.calls.add(task)
            task.add_done_callback(self.calls.discard)
        elif op == "hello":
            self.drain = StderrDrain(str(msg.get("token", "")), self.cap)
            for chunk in self._early:
                self.drain.feed(chunk)
            self._early.clear()
            if not self.hello.done():
                self.hello.set_result(msg)
        else:
            log.warning("a container kernel sent an unknown frame op %r", op)

    async def _serve(self, msg: dict[str, Any]) -> None:
        call_id = msg.get("call")
        try:
            value = await self.handler(str(msg.get("fn")), msg.get("args") or {})
            reply = {"op": "reply", "call": call_id, "ok": True, "value": value}
        except asyncio.CancelledError:
            # An interrupted cell: the call fails inside it (the kernel then raises the
            # pending KeyboardInterrupt). A dead channel gets nothing (send is a no-op).
            self.send(
                protocol.encode(
                    {
                        "op": "reply",
                        "call": call_id,
                        "ok": False,
                        "error": f"{msg.get('fn')} was cancelled: the cell was interrupted",
                    }
                )
            )
            raise
        except CallError as exc:
            reply = {"op": "reply", "call": call_id, "ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a broken handler must not break the kernel
            log.exception("host call %s failed", msg.get("fn"))
            reply = {
                "op": "reply",
                "call": call_id,
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
            }
        try:
            data = protocol.encode(reply)
        except (TypeError, ValueError) as exc:
            data = protocol.encode(
                {"op": "reply", "call": call_id, "ok": False, "error": f"unserialisable: {exc}"}
            )
        self.send(data)

    # -- requests ---------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.dead or self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)

    async def drained(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        if not self._write_ok.is_set() and not self.dead:
            await self._write_ok.wait()

    def request(self, obj: dict[str, Any]) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send one request; its future gets the ``done`` frame (or :class:`KernelDied`).

        Raises:
            KernelDied: the channel is gone.
            TypeError / ValueError: ``obj`` is not JSON-serialisable.
        """
        if self.dead:
            raise KernelDied()
        self.ids += 1
        rid = self.ids
        data = protocol.encode({**obj, "id": rid})
        fut = self.loop.create_future()
        self.pending[rid] = fut
        self.send(data)
        return rid, fut

    def cancel_calls(self) -> None:
        """Fail the host calls in flight (each replies "cancelled" to the kernel)."""
        for task in list(self.calls):
            task.cancel()

    def stderr_now(self) -> str:
        if self.drain is None:
            return b"".join(self._early).decode("utf-8", "replace")
        return StderrDrain.text(self.drain.take_now())

    def _mark_dead(self) -> None:
        if self.dead:
            return
        self.dead = True
        self._write_ok.set()
        err = KernelDied()
        for fut in [*self.pending.values(), self.hello]:
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: an abandoned future must not log a warning
        self.pending.clear()
        for task in list(self.calls):
            task.cancel()

    def abort(self) -> None:
        """Drop the channel now (closing stdin ends an idle kernel; a busy one is killed by
        the caller through the engine)."""
        self._mark_dead()
        if self.transport is not None:
            self.transport.abort()

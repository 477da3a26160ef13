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
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox.base import CallHandler
from rlmd.sandbox.channel import KernelDied, StderrDrain
from rlmd.sandbox.transport import KernelHandle, small_reads

__all__ = ["KernelConnection", "KernelDied", "StderrDrain"]

log = logging.getLogger(__name__)

STDOUT, STDERR = 1, 2


class KernelConnection(KernelHandle, asyncio.Protocol):
    """One kernel over one attach socket: requests out, ``done``/``call`` frames in, host
    calls served concurrently with ``handler``.

    Attributes:
        hello: resolves with the kernel's hello frame (or :class:`KernelDied`).
        closed: resolves when the socket closes.
        dead: the channel is gone; every pending request failed with :class:`KernelDied`.
    """

    label = "a container kernel"

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        super().__init__(loop, handler, cap)
        self.transport: asyncio.Transport | None = None
        self._mux = bytearray()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._write_ok = asyncio.Event()
        self._write_ok.set()

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        small_reads(transport)

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
                self._on_frames(payload)
            elif stream == STDERR:
                self.feed_stderr(payload)
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

    # -- the channel ----------------------------------------------------------------------

    def _on_malformed(self) -> None:
        log.error("a container kernel sent a malformed frame; dropping its channel")
        self.abort()

    def _encode_reply(self, reply: dict[str, Any]) -> bytes:
        try:
            return protocol.encode(reply)
        except (TypeError, ValueError) as exc:
            return protocol.encode(
                {
                    "op": "reply",
                    "call": reply["call"],
                    "ok": False,
                    "error": f"unserialisable: {exc}",
                }
            )

    # -- requests ---------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.dead or self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)

    async def drained(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        if not self._write_ok.is_set() and not self.dead:
            await self._write_ok.wait()

    def _mark_dead(self) -> None:
        if not self.dead:
            self._write_ok.set()
        super()._mark_dead()

    def abort(self) -> None:
        """Drop the channel now (closing stdin ends an idle kernel; a busy one is killed by
        the caller through the engine)."""
        self._mark_dead()
        if self.transport is not None:
            self.transport.abort()

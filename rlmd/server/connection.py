"""One client connection: framing with limits, the pygls protocol object, bounded output.

Why not pygls' own loops: ``pygls.io_.run_async`` trusts the client. It reads any
``Content-Length`` into memory, answers malformed JSON and undecodable messages with nothing
(a request then hangs forever), and its TCP server keeps one protocol object for every
client. Here each connection gets its own :class:`~rlmd.server.protocol.RlmdServer` (a
pygls ``LanguageServer``: LSP life cycle, ``workspace/executeCommand``, ``$/progress``), fed
by a reader that

* refuses header lines over 64 KiB and bodies over ``max_message_bytes`` (the client gets an
  ``INVALID_REQUEST`` error and is disconnected: the stream cannot be resynchronised);
* answers JSON that does not parse with ``PARSE_ERROR`` (id ``null``) and goes on;
* answers batches, wrong ``jsonrpc`` versions, bad ids and params pygls cannot structure
  with an error carrying the request's id (and what is wrong where, ``@ $.params...``),
  instead of dropping them;
* answers a request after ``shutdown`` with ``INVALID_REQUEST`` (pygls drops it: the
  client would wait forever), and a request to an unknown method that has no ``params``
  with ``METHOD_NOT_FOUND`` (pygls could not build it: an internal error).

Output goes straight to the transport without waiting. A client with more than
``max_client_buffer_bytes`` queued is watched, and dropped only when not one byte of its
backlog drains for ``client_stall_s`` (its tasks go on; other clients are not slowed down).
A slow reader that keeps draining is never dropped for being behind, however large a burst
was, up to ``max_client_backlog_bytes`` (the daemon's memory bound).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from typing import Any

from rlmd.server import auth, errors
from rlmd.server.core import DaemonCore
from rlmd.server.hub import frame

log = logging.getLogger("rlmd.server")

MAX_HEADER_LINE = 64 * 1024
MAX_HEADER_LINES = 32
MAX_INFLIGHT = 256
"""Requests one client may have in progress at once."""

_ids = itertools.count(1)


class FrameError(Exception):
    """The byte stream is not valid framing (or carries a wrong token); the connection
    cannot continue. ``code``: the JSON-RPC error code sent before disconnecting."""

    def __init__(self, message: str, code: int = errors.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


class Connection:
    """A client attached over a stream (Unix socket or stdio).

    Args:
        core: the daemon core.
        reader: the stream to read from (created with ``limit >= MAX_HEADER_LINE``).
        transport: the transport to write to (``write``, ``get_write_buffer_size``,
            ``close``, ``is_closing``).
        kind: ``"socket"`` or ``"stdio"`` (in stdio mode ``exit`` ends the daemon).

    Attributes:
        id: ``"c1"``, ``"c2"``, ... (unique in this daemon).
        detail: run-event detail, ``"full" | "summary" | "none"``.
        progress_mode: ``"all" | "own" | "none"``.
        progress_capable: the client announced ``window.workDoneProgress``.
    """

    def __init__(
        self, core: DaemonCore, reader: asyncio.StreamReader, transport: Any, *, kind: str
    ) -> None:
        from rlmd.server.protocol import RlmdServer

        self.id = f"c{next(_ids)}"
        self.core = core
        self.reader = reader
        self.transport = transport
        self.kind = kind
        self.detail = "full"
        self.progress_mode = "all"
        self.progress_capable = False
        self.subscribed = False
        self.shut_down = False  # the client sent ``shutdown``: only ``exit`` may follow
        self.dead = False
        self.drop_reason: str | None = None
        self.inflight = 0
        self.authenticated = core.token is None or kind == "stdio"
        self.closed = asyncio.Event()
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_scheduled = False
        self._written = 0  # bytes handed to the transport, ever
        self._drained = 0  # of those, bytes the client has taken (written - still queued)
        self._progress_at: float | None = None  # when a watched backlog last drained
        self._watch: asyncio.TimerHandle | None = None
        self.server = RlmdServer(self)
        self.protocol = self.server.protocol
        self.protocol.set_writer(self, include_headers=True)
        self.progress = self.server.run_progress

    # -- pygls writer interface ---------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self._send(data)

    def close(self) -> None:
        self.drop("closed by the server")

    # -- hub subscriber -----------------------------------------------------------------------

    def deliver(self, method: str, params: dict[str, Any], data: bytes) -> None:
        if self.dead:
            return
        self._send(data)
        if method == "rlmd/taskStatus":
            self.progress.on_status(params)

    def subscribe(self) -> None:
        if not self.subscribed and not self.dead:
            self.subscribed = True
            self.core.hub.add(self)

    def claim_progress(self, run_id: str, token: str | int) -> None:
        self.progress.claim(run_id, token)

    # -- output -------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        """Queue ``data``; everything queued in one event-loop turn goes out in one write
        (a burst of events costs one system call per client, not one per event)."""
        if self.dead:
            return
        self._out.append(data)
        self._out_size += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.dead or not self._out:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_size = 0
        if self.transport.is_closing():
            return
        try:
            self.transport.write(data)
        except (ConnectionError, RuntimeError) as exc:
            self.drop(f"write failed: {exc!r}")
            return
        self._written += len(data)
        self._check_backlog()

    def _check_backlog(self) -> None:
        """Apply the back-pressure rule: judge a client by whether its backlog drains, not
        by its size (a burst larger than the limit says nothing about the reader)."""
        if self.dead or self.transport.is_closing():
            return
        options = self.core.options
        queued = self.transport.get_write_buffer_size()
        if queued > options.max_client_backlog_bytes:
            self.drop(
                f"the client is not reading fast enough "
                f"(more than {options.max_client_backlog_bytes:,} bytes queued)"
            )
            return
        now = asyncio.get_running_loop().time()
        drained = self._written - queued
        if queued <= options.max_client_buffer_bytes:
            self._progress_at = None
        elif self._progress_at is None or drained > self._drained:
            self._progress_at = now  # watched from now, or drained since the last look
        elif now - self._progress_at >= options.client_stall_s:
            self.drop(
                f"the client is not reading ({queued:,} bytes queued, "
                f"none taken for {options.client_stall_s:g} s)"
            )
            return
        self._drained = drained
        if self._progress_at is not None and self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(
                max(0.05, options.client_stall_s / 10), self._on_watch
            )

    def _on_watch(self) -> None:
        self._watch = None
        self._check_backlog()

    def send_error(self, msg_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._send(frame({"jsonrpc": "2.0", "id": msg_id, "error": error}))

    def drop(self, reason: str) -> None:
        """Disconnect this client (its tasks are not affected)."""
        if self.dead:
            return
        self._flush()
        self.dead = True
        self.drop_reason = reason
        if self._watch is not None:
            self._watch.cancel()
        log.info("client %s dropped: %s", self.id, reason)
        self.core.hub.remove(self)
        if reason.startswith("the client is not reading"):
            self.transport.abort()
        else:
            self.transport.close()
        self.closed.set()

    # -- input --------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Read and handle messages until the client goes away or is dropped."""
        self.core.connections[self.id] = self
        try:
            while not self.dead:
                try:
                    body = await self._read_message()
                except FrameError as exc:
                    self.send_error(None, exc.code, str(exc))
                    self.drop(str(exc))
                    break
                if body is None:
                    break
                if not self.authenticated:
                    self._refuse(body)
                    break
                self._handle(body)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.drop(self.drop_reason or "disconnected")
            self.core.connections.pop(self.id, None)
            self.progress.close()

    async def _read_message(self) -> bytes | None:
        length: int | None = None
        lines = 0
        token_block = False
        while True:
            try:
                line = await self.reader.readline()
            except ValueError:  # longer than the reader's limit
                raise FrameError(f"header line longer than {MAX_HEADER_LINE:,} bytes") from None
            if not line:
                return None
            if not line.endswith(b"\n"):
                return None  # EOF in the middle of a header
            if line in (b"\r\n", b"\n"):
                if length is None:
                    if lines == 0 or token_block:
                        lines = 0  # blank lines between messages; the token block
                        token_block = False
                        continue
                    raise FrameError("missing Content-Length header")
                break
            lines += 1
            if lines > MAX_HEADER_LINES:
                raise FrameError("too many header lines")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise FrameError(f"malformed header line {line[:80]!r}")
            if name.strip().lower() == auth.HEADER.lower():
                token_block = True
                self._check_token(value.strip())
            elif name.strip().lower() == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise FrameError(f"bad Content-Length {value.strip()[:40]!r}") from None
                if length < 0:
                    raise FrameError("negative Content-Length")
        limit = self.core.options.max_message_bytes
        if length > limit:
            raise FrameError(f"message of {length:,} bytes is larger than the limit of {limit:,}")
        return await self.reader.readexactly(length)

    def _check_token(self, given: str) -> None:
        if self.core.token is None or self.kind == "stdio":
            return
        if not auth.matches(self.core.token, given):
            raise FrameError(
                "wrong rlmd token: this daemon accepts commands only from its user's own "
                "clients (rlmd attach --stdio sends the current token)",
                errors.UNAUTHORIZED,
            )
        self.authenticated = True

    def _refuse(self, body: bytes) -> None:
        """Answer a message sent before the token with an error, then disconnect."""
        msg_id = None
        try:
            data = json.loads(body)
            if isinstance(data, dict) and isinstance(data.get("id"), int | str):
                msg_id = data["id"]
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
        reason = (
            "this daemon accepts commands only from its user's own clients: send the "
            f"'{auth.HEADER}: <token>' header (the token is in {auth.TOKEN_FILE} in the "
            "rlmd home's run folder) before the first message, or connect with "
            "rlmd attach --stdio"
        )
        self.send_error(msg_id, errors.UNAUTHORIZED, reason)
        self.drop("no rlmd token")

    def _handle(self, body: bytes) -> None:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            self.send_error(None, errors.PARSE_ERROR, f"parse error: {exc}"[:500])
            return
        if isinstance(data, list):
            self.send_error(None, errors.INVALID_REQUEST, "batch requests are not supported")
            return
        if not isinstance(data, dict):
            self.send_error(None, errors.INVALID_REQUEST, "a message must be a JSON object")
            return
        has_id = "id" in data
        msg_id = data.get("id")
        if has_id and (
            isinstance(msg_id, bool) or not isinstance(msg_id, int | str) or msg_id is None
        ):
            if "method" in data:
                self.send_error(None, errors.INVALID_REQUEST, "id must be a string or an integer")
                return
        method = data.get("method")
        reply_id = msg_id if has_id and isinstance(msg_id, int | str) else None
        if data.get("jsonrpc") != "2.0":
            self.send_error(reply_id, errors.INVALID_REQUEST, 'jsonrpc must be "2.0"')
            return
        if "method" in data and not isinstance(method, str):
            self.send_error(reply_id, errors.INVALID_REQUEST, "method must be a string")
            return
        if "method" not in data and not has_id:
            self.send_error(None, errors.INVALID_REQUEST, "neither a request nor a response")
            return
        is_request = has_id and isinstance(method, str)
        if is_request and self.shut_down and method != "exit":
            self.send_error(
                reply_id,
                errors.INVALID_REQUEST,
                f"{method}: this connection was shut down; only exit may follow",
            )
            return
        if is_request:
            if method == "shutdown":
                self.shut_down = True
            if "params" not in data:  # JSON-RPC allows it; pygls' request type needs the key
                data = {**data, "params": None}
            params = data.get("params")
            if params is not None and not isinstance(params, dict | list):
                self.send_error(
                    reply_id, errors.INVALID_PARAMS, "params must be an object or an array"
                )
                return
            if method in ("initialize", "workspace/executeCommand"):
                self.subscribe()
            if method == "workspace/executeCommand" and self.inflight >= MAX_INFLIGHT:
                self.send_error(
                    reply_id, errors.BUSY, f"more than {MAX_INFLIGHT} requests in flight"
                )
                return
        if method == "$/cancelRequest" and not is_request:
            params = data.get("params")
            cancelled = params.get("id") if isinstance(params, dict) else None
            if isinstance(cancelled, bool) or not isinstance(cancelled, int | str):
                # pygls looked an object id up in a dict: a TypeError traceback in the log
                log.info("client %s: $/cancelRequest without a string or integer id", self.id)
                return
        try:
            message = self.protocol.structure_message(data)
        except Exception as exc:
            if is_request:
                code = getattr(exc, "code", errors.INVALID_PARAMS)
                self.send_error(
                    reply_id,
                    code if isinstance(code, int) else errors.INVALID_PARAMS,
                    f"invalid params for {method}: {_what_is_wrong(exc)}"[:1000],
                )
            return
        try:
            self.protocol.handle_message(message)
        except Exception as exc:
            log.exception("handling %s failed", method)
            if is_request:
                self.send_error(reply_id, errors.INTERNAL_ERROR, f"internal error: {exc}"[:500])


def _what_is_wrong(exc: BaseException) -> str:
    """What a message pygls could not structure got wrong, and where: ``required field
    missing @ $.params`` (cattrs' own words) instead of its bare ``While structuring
    ExecuteCommandRequest (1 sub-exception)``."""
    cause = exc.__cause__ or exc
    try:
        from cattrs import transform_error
        from cattrs.errors import ClassValidationError, IterableValidationError

        if isinstance(cause, ClassValidationError | IterableValidationError):
            return "; ".join(transform_error(cause)) or str(cause)
    except ImportError:  # pragma: no cover - cattrs comes with pygls
        pass
    return str(cause)

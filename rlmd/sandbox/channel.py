"""The host end of one kernel's channel, whatever carries its bytes.

Every transport speaks the same protocol (:mod:`rlmd.kernel.protocol`) to its kernel:
requests out, ``hello`` / ``done`` / ``call`` frames in, host calls served concurrently, and
the kernel's stderr cut into cells at its sentinels. :class:`KernelChannel` is that logic; a
transport's kernel handle (:class:`rlmd.sandbox.transport.KernelHandle`) subclasses it with
how bytes move (``send``, feeding frames and stderr in).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox.base import CallError, CallHandler, CellResult, VarInfo
from rlmd.sandbox.clock import CallClock

log = logging.getLogger(__name__)


async def wait(fut: asyncio.Future[Any], timeout: float | None) -> Any:
    """``await fut`` with a time limit (raises ``TimeoutError`` and cancels ``fut``);
    leaner than ``asyncio.wait_for``, which matters on the per-cell hot path."""
    if timeout is None:
        return await fut
    expired = False

    def expire() -> None:
        nonlocal expired
        if not fut.done():
            expired = True
            fut.cancel()

    handle = asyncio.get_running_loop().call_later(max(0.0, timeout), expire)
    try:
        return await fut
    except asyncio.CancelledError:
        if expired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


_RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "stdout": (str,),
    "stderr": (str,),
    "error": (str, type(None)),
    "final": (str, type(None)),
    "variables": (list,),
    "restored": (list,),
}
_VAR_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "type": (str,),
    "size": (int, type(None)),
    "preview": (str,),
}


def exec_done_problem(msg: dict[str, Any]) -> str | None:
    """What is wrong with the ``done`` frame of an exec request (``None``: a well-formed
    result that :func:`result_from_kernel` takes). Model code can write frames to the
    channel, so a frame with the right id may still be forged with any shape."""
    if msg.get("ok") is not True:
        return f"the request failed: {str(msg.get('etype'))[:40]}: {str(msg.get('error'))[:200]}"
    res = msg.get("result")
    if not isinstance(res, dict):
        return "the result is not an object"
    for key, types in _RESULT_FIELDS.items():
        if not isinstance(res.get(key), types):
            return f"result field {key!r} is a {type(res.get(key)).__name__}"
    if not isinstance(res.get("names") or [], list):
        return "result field 'names' is not a list"
    if not all(isinstance(n, str) for n in res["restored"] + (res.get("names") or [])):
        return "a variable name is not a string"
    for var in res["variables"]:
        if not isinstance(var, dict) or set(var) - set(_VAR_FIELDS):
            return "a variable entry is not a {name, type, size, preview} object"
        for key, types in _VAR_FIELDS.items():
            if key in var and (not isinstance(var[key], types) or isinstance(var[key], bool)):
                return f"variable field {key!r} is a {type(var[key]).__name__}"
        if "name" not in var or "type" not in var:
            return "a variable entry has no name or type"
    return None


def result_from_kernel(res: dict[str, Any], duration_s: float, fd_text: str = "") -> CellResult:
    """A :class:`CellResult` from the kernel's exec result (see ``rlmd.kernel.protocol``)."""
    return CellResult(
        stdout=res["stdout"],
        stderr=res["stderr"] + fd_text,
        error=res["error"],
        final=res["final"],
        variables=[VarInfo(**v) for v in res["variables"]],
        restored=list(res["restored"]),
        duration_s=duration_s,
    )


HOST_MAX_FRAME = 512 * 1024 * 1024
"""The largest message the host accepts from a kernel (bytes). An exec result is at most two
streams of 32 MiB of characters at up to 6 JSON bytes each (``\\u0000``), ~384 MiB; a larger
length prefix is forged or a runaway ``get_var``, and buffering it would let model code grow
rlmd's own memory past every sandbox limit (the hostile fresh-user test reached 1.6 GB)."""


MAX_CALLS_IN_FLIGHT = 1024
"""Host calls (``llm_query``, ``rlm_query``, helpers, tools) one kernel may have waiting at
once; one more drops the channel as a protocol error (the kernel restarts). Legitimate code
makes one per thread, and its threads are bounded by the sandbox's process limit (256 by
default); forged ``call`` frames cost model code a few bytes each, and every one held a task
(and, for ``rlm_query``, a child run's REPL) in rlmd's own memory."""


class KernelDied(Exception):
    """The kernel (or its channel: pipes, attach socket, provider stream) went away."""


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
        """Take one chunk of the stream; a sentinel completes its cell's segment."""
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
        """What cell ``rid`` wrote (bytes kept, bytes dropped), once its sentinel arrived;
        after ``timeout`` s without it, everything collected so far."""
        if rid not in self._done:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[rid] = waiter
            try:
                await wait(waiter, timeout)
            except TimeoutError:
                self._waiters.pop(rid, None)
                log.warning("stderr sentinel of cell %s did not arrive", rid)
                return self.take_now()
        return self._done.pop(rid)

    def take_now(self) -> tuple[bytes, int]:
        """Everything collected so far (bytes kept, bytes dropped), a held-back partial
        marker included."""
        self._keep(self._tail)
        self._tail = b""
        return self._take()

    @staticmethod
    def text(segment: tuple[bytes, int]) -> str:
        """A segment as text, with a marker saying how many bytes were dropped."""
        data, dropped = segment
        text = data.decode("utf-8", "replace")
        if dropped:
            text += f"\n[rlmd: fd-level output truncated: {dropped} more bytes were dropped]\n"
        return text


class KernelChannel:
    """Requests to one kernel and the frames coming back, with host calls served by
    ``handler`` (a task each) and stderr collected in a :class:`StderrDrain` made at hello.

    Subclasses provide :meth:`send` and feed the channel with :meth:`_on_frames` (length-
    prefixed bytes) or :meth:`_dispatch` (decoded frames), and stderr with
    :meth:`feed_stderr`. They may override :meth:`encode` (line framing), :meth:`_on_hello`,
    :meth:`_on_malformed` and :meth:`_mark_dead` (calling this one).

    Attributes:
        hello: resolves with the kernel's hello frame (or :class:`KernelDied`).
        pending: request id -> future of its ``done`` frame.
        ran: exec request id -> future of its ``ran`` frame (see :meth:`ran_future`).
        calls: host calls being served.
        dead: the channel is gone; every pending request failed with :class:`KernelDied`.
        drain: the stderr drain, from hello on.
    """

    #: log label of the kernel (``"kernel 123"``, ``"a container kernel"``)
    label = "kernel"
    #: whether a host call cancelled by an interrupt replies "cancelled" to the kernel
    reply_on_cancel = True

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        self.loop = loop
        self.handler = handler
        self.cap = cap
        self.drain: StderrDrain | None = None
        self._early_stderr: list[bytes] = []
        self._frames = bytearray()
        #: why the host dropped the channel (a forged or oversized frame), for the model
        self.protocol_error: str | None = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ran: dict[int, asyncio.Future[None]] = {}
        self.calls: set[asyncio.Task[None]] = set()
        #: time blocked on sub-calls and the tools in flight (see :mod:`rlmd.sandbox.clock`)
        self.clock = CallClock()
        self.ids = 0
        self.hello: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.dead = False

    # -- what subclasses provide ------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue one encoded frame to the kernel (a no-op once the channel is gone)."""
        raise NotImplementedError

    def encode(self, obj: dict[str, Any]) -> bytes:
        """One frame as bytes for :meth:`send` (raises ``TypeError``/``ValueError`` for
        what JSON cannot carry)."""
        return protocol.encode(obj)

    def _on_malformed(self) -> None:
        """The kernel sent a frame that does not decode: drop the channel."""
        self._mark_dead()

    def _on_hello(self, msg: dict[str, Any]) -> None:
        """Start the stderr drain with the hello's token; what came before is the kernel's."""
        self.drain = StderrDrain(str(msg.get("token", "")), self.cap)
        for chunk in self._early_stderr:
            self.drain.feed(chunk)
        self._early_stderr.clear()

    # -- incoming ---------------------------------------------------------------------------

    def feed_stderr(self, data: bytes) -> None:
        """One chunk of the kernel's stderr."""
        if self.drain is not None:
            self.drain.feed(data)
        else:
            self._early_stderr.append(data)

    def _on_frames(self, data: bytes) -> None:
        """One chunk of a length-prefixed frame stream (see :mod:`rlmd.kernel.protocol`)."""
        buf = self._frames
        buf += data
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if n > HOST_MAX_FRAME:  # never buffer it: model code could forge the length
                self.protocol_error = (
                    f"the kernel sent a {n:,}-byte message, over the host's limit of "
                    f"{HOST_MAX_FRAME:,} bytes"
                )
                buf.clear()
                self._on_malformed()
                return
            if len(buf) < 4 + n:
                break
            body = bytes(buf[4 : 4 + n])
            del buf[: 4 + n]
            try:
                msg = protocol.decode(body)
            except ValueError:
                self.protocol_error = "the kernel sent a message that is not valid JSON"
                self._on_malformed()
                return
            except RecursionError:  # the kernel's shallower stack encoded it; ours cannot read
                # it: raised in the pipe's callback, the frame was lost and the cell hung
                self.protocol_error = (
                    "the kernel sent a message nested too deeply to read (a value nested "
                    "close to Python's recursion limit, passed to a host helper?)"
                )
                self._on_malformed()
                return
            self._dispatch(msg)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "done":
            self._ran(msg.get("id", -1))
            fut = self.pending.pop(msg.get("id", -1), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif op == "ran":
            self._ran(msg.get("id", -1))
        elif op == "call":
            if self.dead:  # the rest of a chunk after a protocol error
                return
            if len(self.calls) >= MAX_CALLS_IN_FLIGHT:
                self.protocol_error = (
                    f"the kernel had more than {MAX_CALLS_IN_FLIGHT:,} host calls waiting "
                    "at once (forged call frames?)"
                )
                self._on_malformed()
                return
            task = self.loop.create_task(self._serve(msg))
            self.calls.add(task)
            task.add_done_callback(self.calls.discard)
        elif op == "hello":
            self._on_hello(msg)
            if not self.hello.done():
                self.hello.set_result(msg)
        else:
            log.warning("%s sent an unknown frame op %r", self.label, op)

    def _ran(self, rid: Any) -> None:
        waiter = self.ran.pop(rid, None) if isinstance(rid, int) else None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def ran_future(self, rid: int) -> asyncio.Future[None]:
        """A future done when exec request ``rid``'s code has finished (its ``ran`` frame or
        its ``done`` frame came); :class:`KernelDied` if the kernel goes first."""
        fut = self.ran.get(rid)
        if fut is None:
            fut = self.loop.create_future()
            if self.dead:
                fut.set_exception(KernelDied())
                fut.exception()  # retrieved: nobody may await it
            elif rid in self.pending:
                self.ran[rid] = fut
            else:  # its done frame came already
                fut.set_result(None)
        return fut

    def _encode_reply(self, reply: dict[str, Any]) -> bytes:
        return self.encode(reply)

    async def _serve(self, msg: dict[str, Any]) -> None:
        """Answer one host call from model code (a failing handler becomes an error reply)."""
        reply: dict[str, Any] = {"op": "reply", "call": msg.get("call")}
        fn, args = str(msg.get("fn")), msg.get("args") or {}
        token = self.clock.started(fn, args if isinstance(args, dict) else {})
        try:
            value = await self.handler(fn, args)
            data = self._encode_reply({**reply, "ok": True, "value": value})
        except asyncio.CancelledError:
            # An interrupted cell: the call fails inside it (the kernel then raises the
            # pending KeyboardInterrupt). A dead channel gets nothing (send is a no-op).
            if self.reply_on_cancel:
                error = f"{msg.get('fn')} was cancelled: the cell was interrupted"
                self.send(self.encode({**reply, "ok": False, "error": error}))
            raise
        except CallError as exc:
            data = self._encode_reply({**reply, "ok": False, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a broken handler must not break the kernel
            log.exception("host call %s failed", msg.get("fn"))
            data = self._encode_reply(
                {**reply, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            )
        finally:
            self.clock.ended(token)
        self.send(data)

    # -- outgoing ---------------------------------------------------------------------------

    def request(self, obj: dict[str, Any]) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send one request; the future gets its ``done`` frame (or :class:`KernelDied`).

        Returns: the request id and that future.

        Raises:
            KernelDied: the channel is gone.
            TypeError / ValueError: ``obj`` is not JSON-serialisable.
        """
        if self.dead:
            raise KernelDied()
        self.ids += 1
        rid = self.ids
        data = self.encode({**obj, "id": rid})
        fut = self.loop.create_future()
        # Only _mark_dead fails it, and retrieves the exception there: a cell given up on
        # logs no "never retrieved" warning (no done callback per request: it cost a loop
        # callback per cell).
        self.pending[rid] = fut
        self.send(data)
        return rid, fut

    def cancel_calls(self) -> None:
        """Fail the host calls in flight (each replies "cancelled" to the kernel)."""
        for task in list(self.calls):
            task.cancel()

    async def cell_stderr(self, rid: int, res: dict[str, Any], timeout: float) -> str:
        """What finished cell ``rid`` (exec result ``res``) wrote to stderr, as text: up to
        its sentinel (waiting up to ``timeout`` s) if the kernel wrote one, else all so far."""
        assert self.drain is not None
        if res.get("sentinel"):
            segment = await self.drain.segment(rid, timeout)
        else:
            segment = self.drain.take_now()
        return StderrDrain.text(segment)

    def stderr_now(self) -> str:
        """The kernel's stderr collected so far, as text."""
        if self.drain is None:
            return b"".join(self._early_stderr).decode("utf-8", "replace")
        return StderrDrain.text(self.drain.take_now())

    def _mark_dead(self) -> None:
        """The channel is gone: fail pending requests and hello, cancel host calls."""
        if self.dead:
            return
        self.dead = True
        err = KernelDied()
        futures: list[asyncio.Future[Any]] = [*self.pending.values(), *self.ran.values()]
        for fut in [*futures, self.hello]:
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: an abandoned future must not log a warning
        self.pending.clear()
        self.ran.clear()
        self.cancel_calls()

"""The default backend: the kernel in a persistent child process.

One ``python -I rlmd/kernel/main.py`` per sandbox, in its own session (process group), with
a private temporary working folder and a clean environment. The host talks to it over the
framed channel described in :mod:`rlmd.kernel.protocol` (its stdin/stdout pipes) and drains
its stderr pipe, which also receives whatever model code writes at the fd level.

Isolation today is a separate process and a clean environment only: no namespaces, no
rlimits, no seccomp, the host's network and file system (hardening comes later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox._common import AFTER_RESTART, join_names, result_from_kernel, wait, with_notice
from rlmd.sandbox.base import (
    CallError,
    CallHandler,
    CellResult,
    Sandbox,
    SandboxError,
    VarInfo,
)

log = logging.getLogger(__name__)

KERNEL_MAIN = os.path.join(os.path.dirname(os.path.abspath(protocol.__file__)), "main.py")

_MAPPED_ERRORS: dict[str, type[Exception]] = {
    "KeyError": KeyError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


class _KernelDied(Exception):
    """The kernel process (or its channel) went away."""


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "the kernel closed its channel"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


class _StderrDrain:
    """Collects the kernel's stderr pipe and cuts it into per-cell segments at the sentinels
    the kernel writes after each cell (see :mod:`rlmd.kernel.protocol`)."""

    def __init__(self, token: str, cap: int):
        self._prefix = protocol.SENTINEL_PREFIX + token.encode("ascii") + b":"
        self._cap = cap
        self._parts: list[bytes] = []
        self._size = 0
        self._dropped = 0
        self._carry = b""
        self._done: dict[int, tuple[bytes, int]] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}

    def _append(self, data: bytes) -> None:
        if not data:
            return
        room = self._cap - self._size
        if len(data) <= room:
            self._parts.append(data)
            self._size += len(data)
        else:
            if room > 0:
                self._parts.append(data[:room])
                self._size += room
            self._dropped += len(data) - max(room, 0)

    def _take(self) -> tuple[bytes, int]:
        data, dropped = b"".join(self._parts), self._dropped
        self._parts, self._size, self._dropped = [], 0, 0
        return data, dropped

    def feed(self, data: bytes) -> None:
        if self._carry:
            data, self._carry = self._carry + data, b""
        prefix = self._prefix
        while True:
            i = data.find(prefix)
            if i < 0:
                break
            j = data.find(b"\x00", i + len(prefix))
            if j < 0:
                if len(data) - i > len(prefix) + 24:  # not a sentinel after all
                    self._append(data[: i + 1])
                    data = data[i + 1 :]
                    continue
                self._append(data[:i])
                self._carry = data[i:]
                return
            digits = data[i + len(prefix) : j]
            self._append(data[:i])
            data = data[j + 1 :]
            if digits.isdigit():
                rid = int(digits)
                self._done[rid] = self._take()
                waiter = self._waiters.pop(rid, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        # Keep a possible start of a sentinel for the next chunk.
        k = data.rfind(b"\x00", max(0, len(data) - len(prefix)))
        if k >= 0 and prefix.startswith(data[k:]):
            self._append(data[:k])
            self._carry = data[k:]
        else:
            self._append(data)

    async def segment(self, rid: int, timeout: float) -> tuple[bytes, int]:
        """The bytes written before cell ``rid``'s sentinel (waiting up to ``timeout``)."""
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
        """Everything collected so far (a partial sentinel stays behind)."""
        return self._take()

    @staticmethod
    def text(segment: tuple[bytes, int]) -> str:
        data, dropped = segment
        text = data.decode("utf-8", "replace")
        if dropped:
            text += f"\n[rlmd: fd-level output truncated: {dropped} more bytes were dropped]\n"
        return text


class _Kernel(asyncio.SubprocessProtocol):
    """One kernel process: its channel, its stderr drain, its in-flight requests and calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        self.loop = loop
        self.handler = handler
        self.cap = cap
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: Any = None
        self.pid = 0
        self.token = ""
        self.drain: _StderrDrain | None = None
        self._early_stderr: list[bytes] = []
        self.buf = bytearray()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.calls: set[asyncio.Task[None]] = set()
        self.ids = 0
        self.hello: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self.stderr_closed: asyncio.Future[None] = loop.create_future()
        self.dead = False
        self.returncode: int | None = None
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        self._finalizer: weakref.finalize | None = None

    # -- asyncio.SubprocessProtocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport
        self.pid = transport.get_pid()
        self.stdin = transport.get_pipe_transport(0)
        self._finalizer = weakref.finalize(self, _killpg, self.pid)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._on_channel(data)
        elif self.drain is not None:
            self.drain.feed(data)
        else:
            self._early_stderr.append(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._mark_dead()
        elif fd == 2 and not self.stderr_closed.done():
            self.stderr_closed.set_result(None)

    def process_exited(self) -> None:
        assert self.transport is not None
        self.returncode = self.transport.get_returncode()
        if not self.exited.done():
            self.exited.set_result(self.returncode)
        # Orphans of the kernel (forked children) may hold the channel open: end them, and
        # do not wait for EOF for long.
        _killpg(self.pid)
        self.loop.call_later(0.5, self._mark_dead)

    def pause_writing(self) -> None:
        self._write_ok.clear()

    def resume_writing(self) -> None:
        self._write_ok.set()

    # -- channel ----------------------------------------------------------------------------

    def _on_channel(self, data: bytes) -> None:
        buf = self.buf
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
                log.error("kernel %s sent a malformed frame; killing it", self.pid)
                self.kill_now()
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
            self.token = str(msg.get("token", ""))
            self.drain = _StderrDrain(self.token, self.cap)
            for chunk in self._early_stderr:
                self.drain.feed(chunk)
            self._early_stderr.clear()
            if not self.hello.done():
                self.hello.set_result(msg)
        else:
            log.warning("kernel %s sent an unknown frame op %r", self.pid, op)

    async def _serve(self, msg: dict[str, Any]) -> None:
        call_id = msg.get("call")
        try:
            value = await self.handler(str(msg.get("fn")), msg.get("args") or {})
            data = protocol.encode({"op": "reply", "call": call_id, "ok": True, "value": value})
        except asyncio.CancelledError:
            raise
        except CallError as exc:
            data = protocol.encode({"op": "reply", "call": call_id, "ok": False, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a broken handler must not break the kernel
            log.exception("host call %s failed", msg.get("fn"))
            data = protocol.encode(
                {
                    "op": "reply",
                    "call": call_id,
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
        self.send(data)

    def send(self, data: bytes) -> None:
        """Queue one frame (the transport buffers what the pipe cannot take yet)."""
        if self.dead or self.stdin is None or self.stdin.is_closing():
            return
        self.stdin.write(data)

    async def drained(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if not self._write_ok.is_set() and not self.dead:
            await self._write_ok.wait()

    def request(self, obj: dict[str, Any]) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send one request; the future gets its ``done`` frame (or ``_KernelDied``).

        Raises:
            _KernelDied: the kernel is gone.
            TypeError / ValueError: ``obj`` is not JSON-serialisable.
        """
        if self.dead:
            raise _KernelDied()
        self.ids += 1
        rid = self.ids
        data = protocol.encode({**obj, "id": rid})
        fut = self.loop.create_future()
        self.pending[rid] = fut
        self.send(data)
        return rid, fut

    def _mark_dead(self) -> None:
        if self.dead:
            return
        self.dead = True
        err = _KernelDied()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.hello.done():
            self.hello.set_exception(err)
        for task in list(self.calls):
            task.cancel()

    def stderr_now(self) -> str:
        if self.drain is None:
            return b"".join(self._early_stderr).decode("utf-8", "replace")
        return _StderrDrain.text(self.drain.take_now())

    def kill_now(self) -> None:
        if self.pid:
            _killpg(self.pid)
        self._mark_dead()

    async def kill(self) -> None:
        """Kill the process group and wait until the kernel is reaped."""
        self.kill_now()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 5)
        if self.transport is not None:
            self.transport.close()
        if self._finalizer is not None:
            self._finalizer.detach()


class SubprocessSandbox(Sandbox):
    """The kernel in a persistent child process (the default backend).

    Args:
        timeout_s: default wall-clock limit per cell (``None``: no limit).
        op_timeout_s: limit for the other operations (binding, variables).
        start_timeout_s: how long the kernel may take to start.
        python: the interpreter to run the kernel with (default: this one).
        max_output_chars: cap per stream per cell (a marker says how much was dropped).
        extra_env: variables added to the kernel's clean environment.

    The kernel gets ``PATH`` and ``LANG`` from the host, ``HOME`` and ``TMPDIR`` set to its
    private working folder, and nothing else. On a timeout, or when the kernel dies, the whole
    process group is killed and a fresh kernel started with the context, the tools and
    ``history`` bound again; other variables are lost and listed in the result.

    The :data:`CallHandler` must not call back into this sandbox (that would deadlock on the
    sandbox's lock while the cell waits for the handler).
    """

    kind = "subprocess"

    def __init__(
        self,
        *,
        timeout_s: float | None = 300.0,
        op_timeout_s: float = 120.0,
        start_timeout_s: float = 30.0,
        python: str | None = None,
        max_output_chars: int = protocol.DEFAULT_MAX_OUTPUT,
        extra_env: dict[str, str] | None = None,
    ):
        self.timeout_s = timeout_s
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        self.python = python or sys.executable
        self.max_output_chars = int(max_output_chars)
        self.extra_env = dict(extra_env or {})
        self._handler: CallHandler | None = None
        self._kernel: _Kernel | None = None
        self._lock = asyncio.Lock()
        self._workdir: str | None = None
        self._workdir_finalizer: weakref.finalize | None = None
        self._closed = False
        self._context: tuple[Any, bool] | None = None
        self._tool_callables: list[str] = []
        self._tool_values: dict[str, Any] = {}
        self._history: tuple[Any] | None = None
        self._user_names: list[str] = []
        self._notice: tuple[str, list[str]] | None = None
        self.restarts = 0

    # -- public -----------------------------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
        return {
            "backend": "subprocess",
            "isolated": True,
            "process": True,
            "network": "host",
            "filesystem": "host",
            "env": "clean",
            "namespaces": False,
            "rlimits": False,
            "seccomp": False,
            "workdir": self._workdir,
            "python": self.python,
        }

    @property
    def pid(self) -> int | None:
        """The current kernel's process id (changes on restart)."""
        return self._kernel.pid if self._kernel is not None else None

    async def start(self, handler: CallHandler) -> None:
        """Start the kernel. On a started sandbox: keep the REPL and its state and serve
        calls with ``handler`` from now on (one persistent REPL, several runs)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is not None:
            # Started already (a persistent REPL serving another run): keep the REPL, serve
            # its calls with the new handler from now on.
            if asyncio.get_running_loop() is not self._kernel.loop:
                raise SandboxError("the sandbox was started on another event loop")
            self._handler = handler
            self._kernel.handler = handler
            return
        self._handler = handler
        self._workdir = tempfile.mkdtemp(prefix="rlmd-sandbox-")
        self._workdir_finalizer = weakref.finalize(
            self, shutil.rmtree, self._workdir, ignore_errors=True
        )
        try:
            self._kernel = await self._spawn()
        except BaseException:
            await self.close()
            raise

    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        async with self._lock:
            await self._op({"op": "bind_context", "value": value, "codebase": codebase})
            self._context = (value, codebase)

    async def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        async with self._lock:
            await self._op(
                {"op": "define_tools", "callables": list(callables), "values": dict(values)}
            )
            for name in callables:
                self._tool_values.pop(name, None)
                if name not in self._tool_callables:
                    self._tool_callables.append(name)
            for name, value in values.items():
                if name in self._tool_callables:
                    self._tool_callables.remove(name)
                self._tool_values[name] = value
            self._user_names = [
                n for n in self._user_names if n not in callables and n not in values
            ]

    async def set_variable(self, name: str, value: Any) -> None:
        async with self._lock:
            await self._op({"op": "set_var", "name": name, "value": value})
            if name == "history":
                self._history = (value,)
            elif name in self._tool_values:
                self._tool_values[name] = value
            elif name not in self._user_names:
                self._user_names.append(name)

    async def get_variable(self, name: str) -> Any:
        async with self._lock:
            result = await self._op({"op": "get_var", "name": name})
            return result["value"]

    async def list_variables(self) -> list[VarInfo]:
        async with self._lock:
            result = await self._op({"op": "list_vars"})
            self._user_names = [v["name"] for v in result]
            return [VarInfo(**v) for v in result]

    async def execute(self, code: str, *, timeout_s: float | None = None) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            t0 = time.perf_counter()
            kernel = await self._live_kernel()
            notice, self._notice = self._notice, None
            try:
                rid, fut = kernel.request(
                    {"op": "exec", "code": code, "max_output": self.max_output_chars}
                )
                msg = await wait(fut, timeout)
            except asyncio.CancelledError:
                # Nobody waits for this cell any more: stop it. The next operation finds the
                # kernel dead and restarts it (reporting the lost variables).
                kernel.kill_now()
                raise
            except TimeoutError:
                partial = kernel.stderr_now()
                lost = list(self._user_names)
                await self._restart()
                return with_notice(
                    CellResult(
                        stderr=partial,
                        error=(
                            f"cell timed out after {timeout:g} s; the kernel was restarted; "
                            f"variables lost: {join_names(lost)}. {AFTER_RESTART}"
                        ),
                        timed_out=True,
                        kernel_restarted=True,
                        lost_variables=lost,
                        duration_s=time.perf_counter() - t0,
                    ),
                    notice,
                )
            except _KernelDied:
                if self._closed:
                    raise SandboxError("the sandbox was closed while the cell ran") from None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(kernel.exited), 2)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(kernel.stderr_closed), 0.5)
                partial = kernel.stderr_now()
                lost = list(self._user_names)
                how = _describe_exit(kernel.returncode)
                await self._restart()
                return with_notice(
                    CellResult(
                        stderr=partial,
                        error=(
                            f"the kernel process died while running the cell ({how}); it was "
                            f"restarted; variables lost: {join_names(lost)}. {AFTER_RESTART}"
                        ),
                        kernel_restarted=True,
                        lost_variables=lost,
                        duration_s=time.perf_counter() - t0,
                    ),
                    notice,
                )
            if not msg.get("ok"):
                raise self._error(msg)
            res = msg["result"]
            assert kernel.drain is not None
            if res.get("sentinel"):
                segment = await kernel.drain.segment(rid, 5.0)
            else:
                segment = kernel.drain.take_now()
            fd_text = _StderrDrain.text(segment)
            self._user_names = list(res.get("names") or [])
            result = result_from_kernel(res, time.perf_counter() - t0, fd_text)
            return with_notice(result, notice)

    async def close(self) -> None:
        self._closed = True
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            await kernel.kill()
        if self._workdir_finalizer is not None:
            self._workdir_finalizer()  # removes the working folder (once)

    # -- internals ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        assert self._workdir is not None
        env = {
            "PATH": os.environ.get("PATH") or os.defpath,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": self._workdir,
            "TMPDIR": self._workdir,
        }
        env.update(self.extra_env)
        return env

    async def _spawn(self) -> _Kernel:
        assert self._handler is not None and self._workdir is not None
        loop = asyncio.get_running_loop()
        handler = self._handler
        cap = self.max_output_chars
        try:
            _, kernel = await loop.subprocess_exec(
                lambda: _Kernel(loop, handler, cap),
                self.python,
                "-I",
                KERNEL_MAIN,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._workdir,
                env=self._env(),
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the kernel with {self.python!r}: {exc}") from exc
        try:
            await asyncio.wait_for(asyncio.shield(kernel.hello), self.start_timeout_s)
        except (TimeoutError, _KernelDied) as exc:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(kernel.exited), 0.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(kernel.stderr_closed), 0.5)
            detail = kernel.stderr_now().strip()
            await kernel.kill()
            what = (
                "did not start in time"
                if isinstance(exc, TimeoutError)
                else f"exited at start-up ({_describe_exit(kernel.returncode)})"
            )
            raise SandboxError(
                f"the kernel {what}" + (f":\n{detail[-4000:]}" if detail else "")
            ) from None
        return kernel

    async def _restart(self) -> None:
        """Replace the kernel with a fresh one and bind the context, tools and history."""
        old, self._kernel = self._kernel, None
        if old is not None:
            await old.kill()
        if self._closed:
            raise SandboxError("the sandbox is closed")
        self.restarts += 1
        self._user_names = []
        self._kernel = await self._spawn()
        try:
            if self._context is not None:
                value, codebase = self._context
                await self._op_raw(
                    {"op": "bind_context", "value": value, "codebase": codebase},
                    self.op_timeout_s,
                )
            if self._tool_callables or self._tool_values:
                await self._op_raw(
                    {
                        "op": "define_tools",
                        "callables": self._tool_callables,
                        "values": self._tool_values,
                    },
                    self.op_timeout_s,
                )
            if self._history is not None:
                await self._op_raw(
                    {"op": "set_var", "name": "history", "value": self._history[0]},
                    self.op_timeout_s,
                )
        except (TimeoutError, _KernelDied) as exc:
            raise SandboxError(f"the restarted kernel failed while re-binding: {exc!r}") from None

    async def _live_kernel(self) -> _Kernel:
        """The current kernel, restarted first if it died between operations."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is None:
            raise SandboxError("the sandbox is not started")
        kernel = self._kernel
        if kernel.dead:
            lost = list(self._user_names)
            how = _describe_exit(kernel.returncode)
            log.warning("kernel %s died between cells (%s); restarting", kernel.pid, how)
            await self._restart()
            self._notice = (
                f"[rlmd: the kernel died before this cell ({how}) and was restarted; "
                f"variables lost: {join_names(lost)}]\n",
                lost,
            )
            assert self._kernel is not None
            kernel = self._kernel
        return kernel

    async def _op(self, obj: dict[str, Any]) -> Any:
        """One non-exec request on a live kernel; a timeout or death restarts the kernel and
        raises :class:`SandboxError`."""
        kernel = await self._live_kernel()
        try:
            return await self._op_raw(obj, self.op_timeout_s)
        except (TimeoutError, _KernelDied) as exc:
            if self._closed:
                raise SandboxError("the sandbox was closed") from None
            lost = list(self._user_names)
            what = (
                f"timed out after {self.op_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"failed: the kernel died ({_describe_exit(kernel.returncode)})"
            )
            await self._restart()
            self._notice = (
                f"[rlmd: the kernel was restarted after {obj['op']} {what}; "
                f"variables lost: {join_names(lost)}]\n",
                lost,
            )
            raise SandboxError(f"{obj['op']} {what}; the kernel was restarted") from None

    async def _op_raw(self, obj: dict[str, Any], timeout: float | None) -> Any:
        assert self._kernel is not None
        kernel = self._kernel
        _, fut = kernel.request(obj)
        await kernel.drained()
        msg = await wait(fut, timeout)
        if not msg.get("ok"):
            raise self._error(msg)
        return msg.get("result")

    @staticmethod
    def _error(msg: dict[str, Any]) -> Exception:
        etype = str(msg.get("etype") or "")
        text = str(msg.get("error") or "")
        cls = _MAPPED_ERRORS.get(etype)
        if cls is not None:
            return cls(text)
        return SandboxError(f"kernel error: {etype}: {text}")

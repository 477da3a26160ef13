"""The default backend: the kernel in a persistent child process.

One ``python -I -S rlmd/kernel/main.py --site-packages ...`` per sandbox (``-I`` without
``-S`` for an interpreter other than the host's own: see :mod:`rlmd.kernel.main`), in its
own session (process group), with a private temporary working folder and a clean
environment. The host talks to it over the framed channel described in
:mod:`rlmd.kernel.protocol` (its stdin/stdout pipes) and drains its stderr pipe, which also
receives whatever model code writes at the fd level.

Starting a Python process costs tens of milliseconds, and every run and child run starts a
kernel. So once a process has started a second kernel with the same interpreter and
environment, it keeps one spare kernel process started ahead (:class:`_Spares`): the next
:meth:`SubprocessSandbox.start` takes it (its start-up is then already done or under way)
and a new spare is started in the background. Spares are killed at exit or by
:func:`close_spare_kernels`; ``SubprocessSandbox(spare_kernel=False)`` neither takes nor
keeps one.

Isolation today is a separate process and a clean environment only: no namespaces, no
rlimits, no seccomp, the host's network and file system (hardening comes later).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox._common import (
    AFTER_RESTART,
    RebindState,
    join_names,
    result_from_kernel,
    wait,
    with_notice,
)
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


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class _LaunchSpec:
    """How to start a kernel process; processes started from equal specs are
    interchangeable (the working folder aside: ``HOME`` and ``TMPDIR`` point at it)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # before HOME / TMPDIR
    extra_env: tuple[tuple[str, str], ...]  # after them (may override them)

    def environ(self, workdir: str) -> dict[str, str]:
        return {**dict(self.env), "HOME": workdir, "TMPDIR": workdir, **dict(self.extra_env)}


OWN_EDITABLE_PTH = "__editable__.rlmd-"
"""Name prefix of the ``.pth`` file of an editable install of rlmd (setuptools): the kernel
leaves it out (see :mod:`rlmd.kernel.main`)."""


@functools.cache
def _host_site_args() -> tuple[str, ...]:
    """What ``site`` gives this interpreter, as arguments for the kernel (see
    :mod:`rlmd.kernel.main`): its site-packages folders (not the user's: ``-I`` never let the
    kernel see them) and its prefixes."""
    import site

    args: list[str] = []
    for folder in site.getsitepackages():
        args += ["--site-packages", folder]
    args += ["--skip-pth", OWN_EDITABLE_PTH]
    return (*args, "--prefix", sys.prefix, "--exec-prefix", sys.exec_prefix)


def _kernel_argv(python: str) -> tuple[str, ...]:
    if python == sys.executable:  # the host's own site-packages are the right ones
        return (python, "-I", "-S", KERNEL_MAIN, *_host_site_args())
    return (python, "-I", KERNEL_MAIN)


class _Process:
    """A started kernel process (pipes on stdin/stdout/stderr, its own session) not yet
    attached to an event loop."""

    def __init__(self, popen: subprocess.Popen[bytes], workdir: str):
        self.popen = popen
        self.workdir = workdir

    def discard(self) -> None:
        """Kill its process group, reap it and remove its working folder."""
        _killpg(self.popen.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _launch(spec: _LaunchSpec, workdir: str | None = None) -> _Process:
    """Start a kernel process (returns once it is forked, ~1 ms; its start-up goes on), in
    ``workdir``, or in a new private folder.

    Raises:
        SandboxError: the interpreter cannot be executed.
    """
    owned = workdir is None
    folder = tempfile.mkdtemp(prefix="rlmd-sandbox-") if workdir is None else workdir
    try:
        popen = subprocess.Popen(
            spec.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=folder,
            env=spec.environ(folder),
            start_new_session=True,
        )
    except OSError as exc:
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
        raise SandboxError(f"cannot start the kernel with {spec.argv[0]!r}: {exc}") from exc
    return _Process(popen, folder)


class _Spares:
    """At most one spare kernel process, started ahead of need for the last launch spec.

    :meth:`take` counts the kernels started per spec; from the second on (a process that
    starts one kernel, such as a single run without child runs, never pays for a spare it
    would not use) it starts a new spare from a background thread after handing out the
    current one. Spares are killed at exit (:func:`atexit`), by :meth:`close`, and when a
    spare is found dead. Thread-safe; not tied to any event loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[_LaunchSpec, _Process] = {}
        self._launching: dict[_LaunchSpec, threading.Thread] = {}
        self._starts: Counter[_LaunchSpec] = Counter()
        self._closed = False
        self._pid = os.getpid()

    def take(self, spec: _LaunchSpec) -> _Process | None:
        """The spare for ``spec`` (possibly still starting up), or ``None``; starts the next
        one in the background."""
        with self._lock:
            launching = self._launching.get(spec)
        if launching is not None:
            launching.join(5.0)  # it is only forking (~1 ms)
        with self._lock:
            self._starts[spec] += 1
            spare = self._ready.pop(spec, None)
            refill = self._starts[spec] >= 2 and not self._closed and spec not in self._launching
            if refill:
                thread = threading.Thread(
                    target=self._refill, args=(spec,), name="rlmd-spare-kernel", daemon=True
                )
                self._launching[spec] = thread
        if refill:
            thread.start()
        if spare is not None and spare.popen.poll() is not None:  # died while waiting
            spare.discard()
            spare = None
        return spare

    def _refill(self, spec: _LaunchSpec) -> None:
        try:
            spare: _Process | None = _launch(spec)
        except SandboxError as exc:
            log.debug("could not start a spare kernel: %s", exc)
            spare = None
        unused: list[_Process] = []
        with self._lock:
            del self._launching[spec]
            if spare is not None and not self._closed and spec not in self._ready:
                # One spare in all: one for another spec (PATH changed since) goes.
                unused, self._ready = list(self._ready.values()), {spec: spare}
            elif spare is not None:
                unused = [spare]
        for process in unused:
            process.discard()

    def after_fork_in_child(self) -> None:
        """In a forked child the spares are the parent's: forget them (closing the copies of
        their pipes) and start afresh."""
        self._lock = threading.Lock()
        for spare in self._ready.values():
            for pipe in (spare.popen.stdin, spare.popen.stdout, spare.popen.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        self._ready = {}
        self._launching = {}
        self._starts = Counter()
        self._pid = os.getpid()

    def close(self, *, final: bool = False) -> None:
        """Kill the spares (``final``: and start no more)."""
        if os.getpid() != self._pid:  # a forked child: the spares are its parent's
            return
        with self._lock:
            self._closed = self._closed or final
            launching = list(self._launching.values())
        for thread in launching:
            thread.join(5.0)
        with self._lock:
            spares = list(self._ready.values())
            self._ready.clear()
        for spare in spares:
            spare.discard()


_SPARES = _Spares()
atexit.register(functools.partial(_SPARES.close, final=True))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SPARES.after_fork_in_child)


def close_spare_kernels() -> None:
    """Kill the spare kernel processes kept for the next sandboxes (also done at exit); new
    ones are started as sandboxes start again."""
    _SPARES.close()


# --------------------------------------------------------------------------- the kernel


class _Pipe(asyncio.Protocol):
    """One of a kernel's pipes on the event loop: forwards to the :class:`_Kernel` as
    asyncio's subprocess transport does (``fd``: 0 stdin, 1 stdout, 2 stderr)."""

    def __init__(self, kernel: _Kernel, fd: int):
        self.kernel = kernel
        self.fd = fd

    def data_received(self, data: bytes) -> None:
        self.kernel.pipe_data_received(self.fd, data)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.kernel.pipe_connection_lost(self.fd, exc)

    def pause_writing(self) -> None:
        self.kernel.pause_writing()

    def resume_writing(self) -> None:
        self.kernel.resume_writing()


class _Kernel:
    """One kernel process: its channel, its stderr drain, its in-flight requests and calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        self.loop = loop
        self.handler = handler
        self.cap = cap
        self.popen: subprocess.Popen[bytes] | None = None
        self.pipes: list[asyncio.BaseTransport] = []
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

    # -- the process and its pipes ------------------------------------------------------------

    async def attach(self, popen: subprocess.Popen[bytes]) -> None:
        """Serve the started process ``popen`` on this event loop: its pipes, and its exit
        (a thread waits for it, as asyncio's default child watcher does)."""
        self.popen = popen
        self.pid = popen.pid
        self._finalizer = weakref.finalize(self, _killpg, self.pid)
        loop = self.loop
        self.stdin, _ = await loop.connect_write_pipe(lambda: _Pipe(self, 0), popen.stdin)
        self.pipes.append(self.stdin)
        for fd, pipe in ((1, popen.stdout), (2, popen.stderr)):
            transport, _ = await loop.connect_read_pipe(lambda fd=fd: _Pipe(self, fd), pipe)
            self.pipes.append(transport)
        threading.Thread(
            target=self._wait_exit, name=f"rlmd-kernel-{self.pid}-waiter", daemon=True
        ).start()

    def _wait_exit(self) -> None:
        assert self.popen is not None
        self.popen.wait()
        with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody waits
            self.loop.call_soon_threadsafe(self.process_exited)

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
        assert self.popen is not None
        self.returncode = self.popen.returncode
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
        for pipe in self.pipes:
            pipe.close()
        if self._finalizer is not None:
            self._finalizer.detach()


class SubprocessSandbox(RebindState, Sandbox):
    """The kernel in a persistent child process (the default backend).

    Args:
        timeout_s: default wall-clock limit per cell (``None``: no limit).
        op_timeout_s: limit for the other operations (binding, variables).
        start_timeout_s: how long the kernel may take to start.
        python: the interpreter to run the kernel with (default: this one).
        max_output_chars: cap per stream per cell (a marker says how much was dropped).
        extra_env: variables added to the kernel's clean environment.
        spare_kernel: take the spare kernel process kept ready for sandboxes like this one
            and keep one for the next (see the module docstring); ``False``: start this
            one's kernel when :meth:`start` is called and keep no spare for it.

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
        spare_kernel: bool = True,
    ):
        self.timeout_s = timeout_s
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        self.python = python or sys.executable
        self.max_output_chars = int(max_output_chars)
        self.extra_env = dict(extra_env or {})
        self.spare_kernel = spare_kernel
        self._handler: CallHandler | None = None
        self._kernel: _Kernel | None = None
        self._lock = asyncio.Lock()
        self._workdir: str | None = None
        self._workdir_finalizer: weakref.finalize | None = None
        self._closed = False
        self._init_rebind_state()
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
        try:
            spec = self._spec()
            process = _SPARES.take(spec) if self.spare_kernel else None
            if process is None:
                process = _launch(spec)
            self._workdir = process.workdir
            self._workdir_finalizer = weakref.finalize(
                self, shutil.rmtree, self._workdir, ignore_errors=True
            )
            self._kernel = await self._attach(process)
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
            self._note_tools(callables, values)

    async def set_variable(self, name: str, value: Any) -> None:
        async with self._lock:
            await self._op({"op": "set_var", "name": name, "value": value})
            self._note_variable(name, value)

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

    def _spec(self) -> _LaunchSpec:
        """The kernel's command line and environment (``PATH`` and ``LANG`` as they are now)."""
        return _LaunchSpec(
            argv=_kernel_argv(self.python),
            env=(
                ("PATH", os.environ.get("PATH") or os.defpath),
                ("LANG", os.environ.get("LANG") or "C.UTF-8"),
            ),
            extra_env=tuple(self.extra_env.items()),
        )

    async def _spawn(self) -> _Kernel:
        """A new kernel process in this sandbox's working folder (a restart)."""
        assert self._workdir is not None
        return await self._attach(_launch(self._spec(), self._workdir))

    async def _attach(self, process: _Process) -> _Kernel:
        """Serve ``process`` and wait for its hello (killing it if that fails)."""
        assert self._handler is not None
        kernel = _Kernel(asyncio.get_running_loop(), self._handler, self.max_output_chars)
        try:
            await kernel.attach(process.popen)
        except BaseException:
            _killpg(process.popen.pid)
            raise
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

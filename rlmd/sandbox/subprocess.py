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

Isolation (see :mod:`rlmd.sandbox.isolate`): by default the kernel runs under ``bwrap``
(else ``unshare``) as PID 1 of its own PID namespace with a fresh ``/proc``, no network
(unless ``limits.network``), the host file system read-only with the user's home hidden,
no capabilities, uid 65534 when the host is root, and a seccomp filter; rlimits and,
where this process may create them,
cgroup-v1 memory and pids groups enforce :class:`~rlmd.sandbox.limits.Limits` from outside
model code. :attr:`SubprocessSandbox.isolation` records what a kernel really got.

Wall time: a cell past ``limits.wall_s`` gets SIGINT (``KeyboardInterrupt`` in the cell; the
REPL and its variables stay); if it does not stop within ``interrupt_grace_s`` (a C-level
loop, code that swallows the interrupt) the kernel is killed and restarted. A cancelled
``execute`` (a daemon task cancel) is interrupted the same way.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
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
from dataclasses import dataclass
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox import isolate
from rlmd.sandbox._channel import KernelChannel
from rlmd.sandbox._channel import KernelDied as _KernelDied
from rlmd.sandbox._channel import StderrDrain as _StderrDrain  # noqa: F401 - tests use it
from rlmd.sandbox._common import (
    AFTER_RESTART,
    LimitAliases,
    inside,
    join_names,
    note_stop,
    restarted_text,
    result_from_kernel,
    timed_out_text,
    wait,
    with_notice,
)
from rlmd.sandbox._files import open_regular, text_chunks, write_new
from rlmd.sandbox._ops import KernelOps, kernel_error
from rlmd.sandbox._spares import SparePool
from rlmd.sandbox.base import (
    CallHandler,
    CellResult,
    Sandbox,
    SandboxError,
)
from rlmd.sandbox.limits import Limits, limit_hint, limit_message

log = logging.getLogger(__name__)

KERNEL_MAIN = os.path.join(os.path.dirname(os.path.abspath(protocol.__file__)), "main.py")


def _killpg(pid: int) -> None:
    """SIGKILL the process group of ``pid`` and, when ``pid`` is a namespace wrapper, its
    children: the kernel runs in a session of its own there (``bwrap --new-session``), and
    killing it, PID 1 of its namespace, ends everything in the namespace."""
    for child in _children(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """Process ids of ``pid``'s children (empty if it is gone or has none)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def _signal_of(returncode: int | None, wrapped: bool) -> int | None:
    """The signal that killed the kernel, if any. A wrapper (bwrap, unshare) exits with
    128 + the kernel's signal; a negative code then means the wrapper itself was killed."""
    if returncode is None:
        return None
    if wrapped:
        return returncode - 128 if 128 < returncode < 160 else None
    return -returncode if returncode < 0 else None


def _describe_exit(returncode: int | None, wrapped: bool = False) -> str:
    if wrapped and returncode is not None and returncode < 0:
        return "the sandbox wrapper was " + _describe_exit(returncode)
    sig = _signal_of(returncode, wrapped)
    if sig is not None:
        returncode = -sig
    if returncode is None:
        return "the kernel closed its channel"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class _LaunchSpec:
    """How to start a kernel process; processes started from equal specs are
    interchangeable (the working folder aside: ``HOME`` and ``TMPDIR`` point at it)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # before HOME / TMPDIR
    extra_env: tuple[tuple[str, str], ...]  # after them (may override them)
    isolation: isolate.IsolationConfig | None = None

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


@functools.cache
def _isolation(config: isolate.IsolationConfig) -> isolate.Isolation:
    """The (cached) isolation builder of ``config``: detection runs once per process."""
    return isolate.Isolation(config)


class _Process:
    """A started kernel process (pipes on stdin/stdout/stderr, its own session) not yet
    attached to an event loop, with its isolation (``launch``: cgroups to read and remove)."""

    def __init__(self, popen: subprocess.Popen[bytes], workdir: str, launch: isolate.Launch):
        self.popen = popen
        self.workdir = workdir
        self.launch = launch

    def discard(self) -> None:
        """Kill its process group, reap it and remove its working folder."""
        _killpg(self.popen.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.launch.remove_cgroups()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _launch(spec: _LaunchSpec, workdir: str | None = None) -> _Process:
    """Start a kernel process (returns once it is forked, ~1 ms; its start-up goes on), in
    ``workdir``, or in a new private folder.

    Raises:
        SandboxError: the interpreter cannot be executed.
    """
    owned = workdir is None
    folder = tempfile.mkdtemp(prefix="rlmd-sandbox-") if workdir is None else workdir
    launch: isolate.Launch | None = None
    try:
        if spec.isolation is not None:
            iso = _isolation(spec.isolation)
            if owned and iso.sandbox_uid is not None:
                # The kernel's uid owns its folder; 0o711: bwrap (root without
                # capabilities) must still enter it, nobody else may list it.
                os.chown(folder, iso.sandbox_uid, iso.sandbox_uid)
                os.chmod(folder, 0o711)
            launch = iso.launch([*spec.argv, *iso.kernel_args()], folder)
        else:
            launch = isolate.Launch(argv=list(spec.argv))
        popen = subprocess.Popen(
            launch.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=folder,
            env=spec.environ(folder),
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except (OSError, ValueError) as exc:
        if launch is not None:
            launch.close_fds()
            launch.remove_cgroups()
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
        raise SandboxError(f"cannot start the kernel with {spec.argv[0]!r}: {exc}") from exc
    launch.close_fds()
    return _Process(popen, folder, launch)


def _close_pipes(spare: _Process) -> None:
    """In a forked child: close the child's copies of a parent's spare's pipes."""
    for pipe in (spare.popen.stdin, spare.popen.stdout, spare.popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class _Spares(SparePool[_LaunchSpec, _Process]):
    """At most one spare kernel process, started ahead of need for the last launch spec.

    :meth:`take` counts the kernels started per spec; from the second on (a process that
    starts one kernel, such as a single run without child runs, never pays for a spare it
    would not use) it starts a new spare from a background thread after handing out the
    current one. Spares are killed at exit (:func:`atexit`), by :meth:`close`, and when a
    spare is found dead. Thread-safe; not tied to any event loop.
    """

    def __init__(self) -> None:
        super().__init__(
            lambda spec: _launch(spec),
            _Process.discard,
            errors=SandboxError,
            what="kernel",
            join_s=5.0,  # it is only forking (~1 ms)
            alive=lambda spare: spare.popen.poll() is None,
            forget_item=_close_pipes,
        )

    def after_fork_in_child(self) -> None:
        """In a forked child the spares are the parent's: forget them (closing the copies of
        their pipes) and start afresh."""
        self.forget()


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


class _Kernel(KernelChannel):
    """One kernel process: its pipes, its exit and how to signal it; the channel itself is
    :class:`~rlmd.sandbox._channel.KernelChannel`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        super().__init__(loop, handler, cap)
        self.popen: subprocess.Popen[bytes] | None = None
        self.pipes: list[asyncio.BaseTransport] = []
        self.stdin: Any = None
        self.pid = 0
        self.token = ""
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self.stderr_closed: asyncio.Future[None] = loop.create_future()
        self.returncode: int | None = None
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        self._finalizer: weakref.finalize | None = None
        self.launch = isolate.Launch(argv=[])
        self.killed_by_host: str | None = None  # why the host killed it, if it did
        self._host_pid: int | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"kernel {self.pid}"

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
            self._on_frames(data)
        else:
            self.feed_stderr(data)

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
        # do not wait for EOF for long. A killed wrapper takes its kernel along.
        self._kill_kernel()
        _killpg(self.pid)
        self.loop.call_later(0.5, self._mark_dead)

    def pause_writing(self) -> None:
        self._write_ok.clear()

    def resume_writing(self) -> None:
        self._write_ok.set()

    # -- channel ----------------------------------------------------------------------------

    def _on_malformed(self) -> None:
        log.error("kernel %s sent a malformed frame; killing it", self.pid)
        self.kill_now()

    def _on_hello(self, msg: dict[str, Any]) -> None:
        self.token = str(msg.get("token", ""))
        super()._on_hello(msg)

    def send(self, data: bytes) -> None:
        """Queue one frame (the transport buffers what the pipe cannot take yet)."""
        if self.dead or self.stdin is None or self.stdin.is_closing():
            return
        self.stdin.write(data)

    async def drained(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if not self._write_ok.is_set() and not self.dead:
            await self._write_ok.wait()

    def kill_now(self, reason: str = "host") -> None:
        """Kill the process group now; ``reason`` is kept for the message to the model."""
        if self.killed_by_host is None and not self.dead:
            self.killed_by_host = reason
        self._kill_kernel()
        if self.pid:
            _killpg(self.pid)
        self._mark_dead()

    def _kill_kernel(self) -> None:
        """SIGKILL the kernel itself when it runs under a wrapper (its pid was looked up at
        hello), even if the wrapper is already gone."""
        if self._host_pid is not None and self._host_pid != self.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._host_pid, signal.SIGKILL)

    def kernel_pid(self) -> int | None:
        """The kernel's process id as the host sees it: the wrapper's child when wrapped
        (``bwrap --as-pid-1`` and ``unshare --fork`` start it directly), else ``pid``."""
        if self._host_pid is None and self.pid:
            pid = self.pid
            if self.launch.wrapper is not None:
                children = _children(pid)
                if not children:
                    return None
                pid = children[0]
            self._host_pid = pid
        return self._host_pid

    def interrupt(self) -> bool:
        """SIGINT to the kernel (``KeyboardInterrupt`` in a running cell) and fail the host
        calls it waits for; whether the signal was sent."""
        self.cancel_calls()
        pid = self.kernel_pid()
        if pid is None or self.dead:
            return False
        try:
            os.kill(pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def kill(self) -> None:
        """Kill the process group and wait until the kernel is reaped."""
        self.kill_now()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 5)
        for pipe in self.pipes:
            pipe.close()
        if self._finalizer is not None:
            self._finalizer.detach()


_UNSET: Any = object()

FILE_CONTEXT_CHARS = 1 << 20
"""A string context this long or longer goes to the kernel through a file in the working
folder, not through a JSON frame (see :meth:`SubprocessSandbox.load_context`)."""


class SubprocessSandbox(KernelOps, LimitAliases, Sandbox):
    """The kernel in a persistent child process (the default backend).

    Args:
        limits: resource limits (default :class:`Limits`); how each is enforced here is in
            ``isolation["enforced"]``.
        timeout_s: alias of ``limits.wall_s`` (seconds per cell; ``None``: no limit).
        max_output_chars: alias of ``limits.output_bytes`` (cap per stream per cell; a
            marker says how much was dropped).
        isolation: ``"auto"`` (bwrap, else unshare, else none, recorded as such),
            ``"bwrap"``, ``"unshare"`` (raise ``ValueError`` if that cannot work here) or
            ``"none"`` (no namespaces; rlimits and cgroups still apply).
        project_dir: a folder bound read-only into the sandbox at its own path.
        seccomp: load the seccomp filter (with bwrap on x86-64).
        interrupt_grace_s: seconds a cell has to stop after SIGINT before the kernel is
            killed and restarted.
        op_timeout_s: limit for the other operations (binding, variables).
        start_timeout_s: how long the kernel may take to start.
        python: the interpreter to run the kernel with (default: this one).
        extra_env: variables added to the kernel's clean environment.
        spare_kernel: take the spare kernel process kept ready for sandboxes like this one
            and keep one for the next (see the module docstring); ``False``: start this
            one's kernel when :meth:`start` is called and keep no spare for it.

    Raises:
        ValueError: bad limits, or an ``isolation`` mode that cannot work here.

    The kernel gets ``PATH`` and ``LANG`` from the host, ``HOME`` and ``TMPDIR`` set to its
    private working folder, and nothing else. When the kernel dies (a limit, ``os._exit``, a
    crash) or a cell will not stop, the whole process group is killed and a fresh kernel
    started with the context, the tools and ``history`` bound again; other variables are
    lost and listed in the result, with the limit named when one was hit.

    The :data:`CallHandler` must not call back into this sandbox (that would deadlock on the
    sandbox's lock while the cell waits for the handler).
    """

    kind = "subprocess"

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        timeout_s: float | None = _UNSET,
        max_output_chars: int = _UNSET,
        isolation: str = "auto",
        project_dir: str | None = None,
        seccomp: bool = True,
        interrupt_grace_s: float = 1.0,
        op_timeout_s: float = 120.0,
        start_timeout_s: float = 30.0,
        python: str | None = None,
        extra_env: dict[str, str] | None = None,
        spare_kernel: bool = True,
    ):
        limits = limits or Limits()
        overrides: dict[str, Any] = {}
        if timeout_s is not _UNSET:
            overrides["wall_s"] = timeout_s
        if max_output_chars is not _UNSET:
            overrides["output_bytes"] = int(max_output_chars)
        if overrides:
            limits = dataclasses.replace(limits, **overrides)
        self.limits = limits
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        self.interrupt_grace_s = interrupt_grace_s
        self.python = python or sys.executable
        self.extra_env = dict(extra_env or {})
        self.spare_kernel = spare_kernel
        self._config: isolate.IsolationConfig | None = isolate.IsolationConfig(
            limits=limits,
            mode=isolation,
            keep=isolate.keep_paths(self.python, _site_args(self.python)),
            project_dir=os.path.abspath(project_dir) if project_dir else None,
            seccomp=seccomp,
        )
        _isolation(self._config)  # detect now: a mode that cannot work raises here
        self._handler: CallHandler | None = None
        self._kernel: _Kernel | None = None
        self._lock = asyncio.Lock()
        self._workdir: str | None = None
        self._workdir_finalizer: weakref.finalize | None = None
        self._closed = False
        self._init_rebind_state()
        self._running: tuple[_Kernel, asyncio.Future[dict[str, Any]]] | None = None
        self._interrupted = False
        self._orphan: tuple[_Kernel, int, asyncio.Future[dict[str, Any]]] | None = None
        self.restarts = 0

    # -- public -----------------------------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "backend": "subprocess",
            "isolated": True,
            "process": True,
            "env": "clean",
            "workdir": self._workdir,
            "python": self.python,
            "limits": self.limits.to_dict(),
        }
        assert self._config is not None
        record.update(_isolation(self._config).record())
        return record

    @property
    def uncontained(self) -> frozenset[str]:
        """Hostile-code cases this sandbox cannot contain with the isolation it got here
        (case names as in ``tests/test_sandbox_hostile.py``)."""
        assert self._config is not None
        iso = _isolation(self._config)
        out = set()
        if not iso.pid_namespace:
            out |= {"kill_parent", "proc_environ", "background_process"}
        if iso.wrapper != "bwrap":
            out.add("read_home")
        if "pids" not in iso.controllers:
            out.add("fork_bomb")
        if self.limits.network or not iso.pid_namespace:
            out.add("network")
        return frozenset(out)

    @property
    def pid(self) -> int | None:
        """Host process id of the current kernel's process group leader: the namespace
        wrapper (bwrap, unshare) when there is one, else the kernel itself (changes on
        restart; ``health()["host_pid"]`` is the kernel's own)."""
        return self._kernel.pid if self._kernel is not None else None

    @property
    def workdir(self) -> str | None:
        """The private working folder (the kernel's current directory), once started."""
        return self._workdir

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
        """Bind ``context``. A long string (``FILE_CONTEXT_CHARS`` or more) is written to a
        file in the working folder that the kernel reads and deletes: no JSON escaping and
        framing of 100 MB."""
        async with self._lock:
            await self._live_kernel()
            await self._op_with(self._context_request(value, codebase))
            self._context = (value, codebase)

    async def execute(self, code: str, *, timeout_s: float | None = None) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            t0 = time.perf_counter()
            kernel = await self._live_kernel()
            notice, self._notice = self._notice, None
            rid, fut = kernel.request(
                {"op": "exec", "code": code, "max_output": self.max_output_chars}
            )
            self._running, self._interrupted = (kernel, fut), False
            timed_out = False
            try:
                try:
                    msg = await wait(asyncio.shield(fut), timeout)
                except TimeoutError:
                    # Past the wall-clock limit: interrupt, then kill if it will not stop.
                    timed_out = True
                    kernel.interrupt()
                    try:
                        msg = await wait(asyncio.shield(fut), self.interrupt_grace_s)
                    except TimeoutError:
                        kernel.kill_now("timeout")
                        raise _KernelDied() from None
            except asyncio.CancelledError:
                # Nobody waits for this cell any more (a cancelled task): interrupt it and
                # let the next operation collect it, or restart the kernel if it will not
                # stop (see _settle_orphan).
                self._orphan_cell(kernel, rid, fut)
                raise
            except _KernelDied:
                return with_notice(await self._died(kernel, t0, timeout, timed_out), notice)
            finally:
                self._running = None
            if not msg.get("ok"):
                raise self._error(msg)
            result = await self._result(kernel, rid, msg["result"], t0)
            note_stop(result, timeout, timed_out=timed_out, interrupted=self._interrupted)
            return with_notice(result, notice)

    async def interrupt(self) -> bool:
        """SIGINT to the running cell (``KeyboardInterrupt`` in it; variables kept); if it
        has not stopped after ``interrupt_grace_s`` the kernel is killed, and the running
        :meth:`execute` returns with ``kernel_restarted``. Returns whether a cell was
        running."""
        running = self._running
        if running is None:
            return False
        kernel, fut = running
        self._interrupted = True
        kernel.interrupt()
        self._escalate(kernel, fut)
        return True

    async def restart(self) -> list[str]:
        """Kill the kernel and start a fresh one with the context, tools and ``history``
        bound again (waits for a running cell: :meth:`interrupt` it first). Returns the
        user variables lost.

        Raises:
            SandboxError: not started, closed, or the new kernel failed.
        """
        async with self._lock:
            await self._live_kernel()
            lost = list(self._user_names)
            await self._restart()
            return lost

    async def upload(self, path: str, data: bytes) -> None:
        full = self._inside(path)
        root = os.path.realpath(self._workdir or "")
        await asyncio.to_thread(_write_file, full, bytes(data), root, self._sandbox_uid())

    async def download(self, path: str) -> bytes:
        full = self._inside(path)
        return await asyncio.to_thread(_read_file, full)

    async def health(self) -> dict[str, Any]:
        kernel = self._kernel
        alive = kernel is not None and not kernel.dead and not self._closed
        return {
            "backend": "subprocess",
            "alive": alive,
            "pid": kernel.pid if kernel is not None else None,
            "host_pid": kernel.kernel_pid() if alive and kernel is not None else None,
            "running": self._running is not None,
            "restarts": self.restarts,
            "memory_bytes": kernel.launch.memory_usage() if kernel is not None else None,
        }

    async def close(self) -> None:
        self._closed = True
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            await kernel.kill()
            await _drop_cgroups(kernel.launch)
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
            isolation=self._config,
        )

    def _sandbox_uid(self) -> int | None:
        """The kernel's uid when it is not ours (files the host makes for it are its)."""
        assert self._config is not None
        return _isolation(self._config).sandbox_uid

    def _inside(self, path: str) -> str:
        """``path`` resolved under the working folder (symlinks followed on the host).

        Raises:
            ValueError: absolute, empty, or escaping the working folder.
            SandboxError: not started.
        """
        return inside(self._workdir, path)

    def _context_request(self, value: Any, codebase: bool) -> dict[str, Any]:
        if (
            isinstance(value, str)
            and not codebase
            and len(value) >= FILE_CONTEXT_CHARS
            and self._workdir is not None
        ):
            return {"op": "bind_context_file", "path": None, "text": value}
        return {"op": "bind_context", "value": value, "codebase": codebase}

    async def _op_with(self, obj: dict[str, Any], *, raw: bool = False) -> Any:
        """Send ``obj``, first writing a context file's text if it carries one (at a fresh
        random name: model code can plant a symlink or FIFO at any predictable one)."""
        text = obj.pop("text", None)
        if text is None:
            return await (self._op_raw(obj) if raw else self._op(obj))
        assert self._workdir is not None
        path = obj["path"] = await asyncio.to_thread(
            write_new, self._workdir, ".rlmd-context-", text_chunks(text), self._sandbox_uid()
        )
        try:
            return await (self._op_raw(obj) if raw else self._op(obj))
        finally:
            with contextlib.suppress(OSError):  # the kernel deletes it; unless it died
                os.unlink(path)

    async def _result(
        self, kernel: _Kernel, rid: int, res: dict[str, Any], t0: float
    ) -> CellResult:
        fd_text = await kernel.cell_stderr(rid, res, 5.0)
        self._user_names = list(res.get("names") or [])
        result = result_from_kernel(res, time.perf_counter() - t0, fd_text)
        hint = limit_hint(result.error, self.limits)
        if hint:
            result.error = (result.error or "") + hint + "\n"
        return result

    def _death_limit(self, kernel: _Kernel) -> tuple[str, Any] | None:
        """The limit whose enforcement killed ``kernel``, if one did."""
        lim = self.limits
        sig = _signal_of(kernel.returncode, kernel.launch.wrapper is not None)
        if kernel.killed_by_host is not None:
            return None
        if lim.memory_bytes and kernel.launch.memory_oom_kills() > 0:
            return "memory_bytes", lim.memory_bytes
        if lim.cpu_s and sig in (signal.SIGXCPU, signal.SIGKILL):
            return "cpu_s", lim.cpu_s  # RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit
        if lim.file_size_bytes and sig == signal.SIGXFSZ:
            return "file_size_bytes", lim.file_size_bytes
        return None

    async def _died(
        self, kernel: _Kernel, t0: float, timeout: float | None, timed_out: bool
    ) -> CellResult:
        """The result of a cell whose kernel died (or was killed); restarts the kernel."""
        if self._closed:
            raise SandboxError("the sandbox was closed while the cell ran")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(kernel.exited), 2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(kernel.stderr_closed), 0.5)
        partial = kernel.stderr_now()
        lost = list(self._user_names)
        limit = self._death_limit(kernel)
        await self._restart()
        if kernel.killed_by_host == "timeout" or timed_out:
            assert timeout is not None
            error = restarted_text(timed_out_text(timeout, stopped=False), lost)
        elif kernel.killed_by_host == "interrupt":
            error = restarted_text(
                f"the cell did not stop within {self.interrupt_grace_s:g} s of an interrupt", lost
            )
        elif limit is not None:
            error = limit_message(limit[0], limit[1], restarted=True, lost=lost)
            error += " " + AFTER_RESTART
        else:
            how = kernel.protocol_error or _describe_exit(
                kernel.returncode, kernel.launch.wrapper is not None
            )
            error = (
                f"the kernel process died while running the cell ({how}); it was "
                f"restarted; variables lost: {join_names(lost)}. {AFTER_RESTART}"
            )
        return CellResult(
            stderr=partial,
            error=error,
            timed_out=timed_out or kernel.killed_by_host == "timeout",
            kernel_restarted=True,
            lost_variables=lost,
            duration_s=time.perf_counter() - t0,
        )

    def _escalate(self, kernel: _Kernel, fut: asyncio.Future[Any]) -> None:
        """Kill ``kernel`` if ``fut`` (its running cell) is not done after the grace time."""

        def check() -> None:
            if not fut.done():
                kernel.kill_now("interrupt")

        kernel.loop.call_later(self.interrupt_grace_s, check)

    def _orphan_cell(self, kernel: _Kernel, rid: int, fut: asyncio.Future[Any]) -> None:
        if kernel.dead:
            return
        kernel.interrupt()
        self._escalate(kernel, fut)
        self._orphan = (kernel, rid, fut)

    async def _settle_orphan(self) -> None:
        """Collect the cell whose ``execute`` was cancelled: its result and its stderr are
        dropped; if it never stopped, the kernel was killed and the caller restarts it."""
        orphan, self._orphan = self._orphan, None
        if orphan is None:
            return
        kernel, rid, fut = orphan
        try:
            msg = await wait(asyncio.shield(fut), self.interrupt_grace_s + 1.0)
        except TimeoutError:
            kernel.kill_now("interrupt")
            return
        except _KernelDied:
            return
        if msg.get("ok") and msg["result"].get("sentinel") and kernel.drain is not None:
            await kernel.drain.segment(rid, 5.0)
        elif kernel.drain is not None:
            kernel.drain.take_now()
        if msg.get("ok"):
            self._user_names = list(msg["result"].get("names") or [])

    async def _spawn(self) -> _Kernel:
        """A new kernel process in this sandbox's working folder (a restart)."""
        assert self._workdir is not None
        return await self._attach(_launch(self._spec(), self._workdir))

    async def _attach(self, process: _Process) -> _Kernel:
        """Serve ``process`` and wait for its hello (killing it if that fails)."""
        assert self._handler is not None
        kernel = _Kernel(asyncio.get_running_loop(), self._handler, self.max_output_chars)
        kernel.launch = process.launch
        try:
            await kernel.attach(process.popen)
        except BaseException:
            _killpg(process.popen.pid)
            process.launch.remove_cgroups()
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
            process.launch.remove_cgroups()
            what = (
                "did not start in time"
                if isinstance(exc, TimeoutError)
                else f"exited at start-up ({_describe_exit(kernel.returncode)})"
            )
            raise SandboxError(
                f"the kernel {what}" + (f":\n{detail[-4000:]}" if detail else "")
            ) from None
        kernel.kernel_pid()  # known from now on, even if the wrapper dies
        return kernel

    async def _drop_kernel(self) -> None:
        old, self._kernel = self._kernel, None
        if old is not None:
            await old.kill()
            await _drop_cgroups(old.launch)

    async def _new_kernel(self) -> None:
        self._kernel = await self._spawn()

    async def _bind_context_raw(self, value: Any, codebase: bool) -> None:
        await self._op_with(self._context_request(value, codebase), raw=True)

    async def _live_kernel(self) -> _Kernel:
        """The current kernel, restarted first if it died between operations (or a
        cancelled cell would not stop)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is None:
            raise SandboxError("the sandbox is not started")
        await self._settle_orphan()
        kernel = self._kernel
        if kernel.dead:
            if kernel.killed_by_host == "interrupt":
                how = "an earlier, cancelled cell did not stop when interrupted"
            else:
                wrapped = kernel.launch.wrapper is not None
                how = f"it died: {_describe_exit(kernel.returncode, wrapped)}"
            log.warning("kernel %s is gone (%s); restarting", kernel.pid, how)
            await self._restart_noting(f"the kernel was restarted before this cell ({how})")
            assert self._kernel is not None
            kernel = self._kernel
        return kernel

    async def _live(self) -> _Kernel:
        return await self._live_kernel()

    async def _op_died(self, kernel: _Kernel) -> str:
        limit = self._death_limit(kernel)
        if limit is not None:
            return limit_message(limit[0], limit[1], restarted=False)[:-1]
        how = _describe_exit(kernel.returncode, kernel.launch.wrapper is not None)
        return f"the kernel died ({how})"

    async def _op_raw(self, obj: dict[str, Any]) -> Any:
        assert self._kernel is not None
        kernel = self._kernel
        _, fut = kernel.request(obj)
        await kernel.drained()
        msg = await wait(fut, self.op_timeout_s)
        if not msg.get("ok"):
            raise self._error(msg)
        return msg.get("result")

    @staticmethod
    def _error(msg: dict[str, Any]) -> Exception:
        if msg.get("etype") == "MemoryError":
            text = str(msg.get("error") or "")
            return SandboxError(f"kernel error: MemoryError: {text} (the memory limit is too low)")
        return kernel_error(msg)


async def _drop_cgroups(launch: isolate.Launch) -> None:
    """Remove a dead kernel's cgroups, waiting up to 0.5 s for its processes to be reaped
    (then the removal is deferred to a later launch)."""
    for _ in range(50):
        if launch.remove_cgroups(defer=False):
            return
        await asyncio.sleep(0.01)
    launch.remove_cgroups()


def _site_args(python: str) -> tuple[str, ...]:
    return _host_site_args() if python == sys.executable else ()


def _makedirs(folder: str, root: str, uid: int | None) -> None:
    """``os.makedirs(folder)``; with ``uid``, every folder made below ``root`` is given to
    the kernel's uid (it must be able to write there too)."""
    missing = []
    path = folder
    while path != root and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    if uid is not None:
        for made in missing:
            os.chown(made, uid, uid)


def _write_file(path: str, data: bytes, root: str, uid: int | None = None) -> None:
    """Write ``data`` to ``path`` (parents made below ``root``), never through a symlink or
    into a FIFO model code put at ``path``; owned by ``uid`` if given.

    Raises:
        ValueError: something other than a regular file is at ``path``.
    """
    _makedirs(os.path.dirname(path), root, uid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with os.fdopen(open_regular(path, flags, uid), "wb") as f:
        f.write(data)


def _read_file(path: str) -> bytes:
    """The bytes of the regular file at ``path`` (no symlink, FIFO or device).

    Raises:
        ValueError: not a regular file. OSError: as ``os.open``.
    """
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
        return f.read()

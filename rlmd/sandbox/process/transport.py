"""The default transport: the kernel in a persistent child process.

Each kernel is a child process (:mod:`rlmd.sandbox.process.launch`: command line, clean
environment, spares started ahead) in its own session (process group), with a private
temporary working folder. The host talks to it over the framed channel described in
:mod:`rlmd.kernel.protocol` (its stdin/stdout pipes) and drains its stderr pipe, which also
receives whatever model code writes at the fd level.

Isolation (see :mod:`rlmd.sandbox.process.isolate`): by default the kernel runs under
``bwrap`` (else ``unshare``) as PID 1 of its own PID namespace with a fresh ``/proc``, no
network (unless ``limits.network``), the host file system read-only with the user's home
hidden, no capabilities, uid 65534 when the host is root, and a seccomp filter; rlimits and,
where this process may create them, cgroup-v1 memory and pids groups enforce
:class:`~rlmd.sandbox.limits.Limits` from outside model code. The isolation record says what
a kernel really got.

Interrupts are ``SIGINT`` to the kernel's own process; a kill takes the whole process group
(and, under a namespace wrapper, the namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from rlmd.sandbox import workdirs
from rlmd.sandbox.base import CallHandler, SandboxError
from rlmd.sandbox.files import (
    ContextFile,
    context_file,
    context_file_request,
    download_file,
    open_new,
    upload_file,
    write_new,
)
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.process import isolate
from rlmd.sandbox.process import launch as processes
from rlmd.sandbox.process.launch import (
    KernelProcess,
    LaunchSpec,
    children,
    isolation_of,
    kernel_argv,
    killpg,
    site_args,
)
from rlmd.sandbox.transport import Cleanup, Death, KernelHandle, Transport, small_reads

log = logging.getLogger(__name__)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second, the unit of the CPU times in ``/proc/<pid>/stat``."""


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


class _Pipe(asyncio.Protocol):
    """One of a kernel's pipes on the event loop: forwards to the :class:`ProcessKernel` as
    asyncio's subprocess transport does (``fd``: 0 stdin, 1 stdout, 2 stderr)."""

    def __init__(self, kernel: ProcessKernel, fd: int):
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


class ProcessKernel(KernelHandle):
    """One kernel process: its pipes, its exit and how to signal it; the channel itself is
    :class:`~rlmd.sandbox.channel.KernelChannel`."""

    pid: int = 0  # the process group leader (the namespace wrapper, if any)

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
        self._host_pid: int | None = None
        self._stat_fd: int | None = None
        self.clock.cpu_s = self.cpu_s

    def cpu_s(self) -> float | None:
        """The kernel process's CPU seconds so far (its threads and the children it reaped),
        from ``/proc/<pid>/stat`` (clock-tick resolution); ``None`` before it is known.

        The file stays open from the first call (the clock asks twice per sub-call: an
        ``open`` each time cost 22-56 us of the loop's CPU, a ``pread`` 7), and a read of
        it after the process is gone fails even if its pid was reused.

        Raises:
            OSError: the process is gone.
        """
        if self._stat_fd is None:
            pid = self.kernel_pid()
            if pid is None or self.dead or self.returncode is not None:
                return None
            self._stat_fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        fields = os.pread(self._stat_fd, 4096, 0).rpartition(b")")[2].split()
        return sum(int(f) for f in fields[11:15]) / _CLOCK_TICKS

    def _close_stat(self) -> None:
        fd, self._stat_fd = self._stat_fd, None
        if fd is not None:
            os.close(fd)

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"kernel {self.pid}"

    # -- the process and its pipes ------------------------------------------------------------

    async def attach(self, popen: subprocess.Popen[bytes]) -> None:
        """Serve the started process ``popen`` on this event loop: its pipes, and its exit
        (a thread waits for it, as asyncio's default child watcher does)."""
        self.popen = popen
        self.pid = popen.pid
        self._finalizer = weakref.finalize(self, killpg, self.pid)
        loop = self.loop
        self.stdin, _ = await loop.connect_write_pipe(lambda: _Pipe(self, 0), popen.stdin)
        self.pipes.append(self.stdin)
        for fd, pipe in ((1, popen.stdout), (2, popen.stderr)):
            transport, _ = await loop.connect_read_pipe(functools.partial(_Pipe, self, fd), pipe)
            small_reads(transport)
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
        self._close_stat()
        if not self.exited.done():
            self.exited.set_result(self.returncode)
        # Orphans of the kernel (forked children) may hold the channel open: end them, and
        # do not wait for EOF for long. A killed wrapper takes its kernel along.
        self._kill_kernel()
        killpg(self.pid)
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

    def kill_now(self) -> None:
        """Kill the process group now."""
        self._kill_kernel()
        if self.pid:
            killpg(self.pid)
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
                kids = children(pid)
                if not kids:
                    return None
                pid = kids[0]
            self._host_pid = pid
        return self._host_pid

    async def interrupt(self) -> None:
        """SIGINT to the kernel (``KeyboardInterrupt`` in a running cell) and fail the host
        calls it waits for (a kernel already gone gets nothing)."""
        self.cancel_calls()
        pid = self.kernel_pid()
        if pid is not None and not self.dead:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGINT)

    async def kill(self) -> None:
        """Kill the process group, wait until the kernel is reaped, remove its cgroups."""
        self.kill_now()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 5)
        for pipe in self.pipes:
            pipe.close()
        if self._finalizer is not None:
            self._finalizer.detach()
        self._close_stat()
        await _drop_cgroups(self.launch)

    async def death(self, limits: Limits) -> Death:
        """Why it died: a limit whose enforcement killed it (the OOM killer in its cgroup,
        ``RLIMIT_CPU``, ``RLIMIT_FSIZE``), else how it exited."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.stderr_closed), 0.5)
        wrapped = self.launch.wrapper is not None
        how = _describe_exit(self.returncode, wrapped)
        sig = _signal_of(self.returncode, wrapped)
        if self.kill_reason is not None:
            return Death(how)
        if limits.memory_bytes and self.launch.memory_oom_kills() > 0:
            return Death(how, "memory_bytes")
        if limits.cpu_s and sig in (signal.SIGXCPU, signal.SIGKILL):
            return Death(how, "cpu_s")  # RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit
        if limits.file_size_bytes and sig == signal.SIGXFSZ:
            return Death(how, "file_size_bytes")
        return Death(how)

    async def exit_phrase(self) -> str | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 0.5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.stderr_closed), 0.5)
        return _describe_exit(self.returncode)

    async def facts(self) -> dict[str, Any]:
        alive = not self.dead
        return {
            "host_pid": self.kernel_pid() if alive else None,
            "memory_bytes": self.launch.memory_usage(),
        }


class ProcessTransport(Transport):
    """Kernels in child processes sharing one private working folder.

    Args:
        limits: resource limits; how each is enforced here is in ``isolation["enforced"]``.
        isolation: ``"auto"`` (bwrap, else unshare, else none, recorded as such),
            ``"bwrap"``, ``"unshare"`` (raise ``ValueError`` if that cannot work here) or
            ``"none"`` (no namespaces; rlimits and cgroups still apply).
        project_dir: a folder bound read-only into the sandbox at its own path.
        seccomp: load the seccomp filter (with bwrap on x86-64).
        python: the interpreter to run the kernel with (default: this one).
        extra_env: variables added to the kernel's clean environment.
        spare_kernel: take the spare kernel process kept ready for sandboxes like this one
            and keep one for the next (see :mod:`rlmd.sandbox.process.launch`); ``False``:
            start this one's kernel when the sandbox starts and keep no spare for it.

    Raises:
        ValueError: an ``isolation`` mode that cannot work here.

    The kernel gets ``PATH`` and ``LANG`` from the host, ``HOME`` and ``TMPDIR`` set to its
    private working folder, and nothing else.
    """

    kind = "subprocess"
    interrupt_grace_s = 1.0
    start_timeout_s = 30.0

    def __init__(
        self,
        *,
        limits: Limits,
        isolation: str = "auto",
        project_dir: str | None = None,
        seccomp: bool = True,
        python: str | None = None,
        extra_env: dict[str, str] | None = None,
        spare_kernel: bool = True,
    ):
        self.limits = limits
        self.python = python or sys.executable
        self.extra_env = dict(extra_env or {})
        self.spare_kernel = spare_kernel
        self._config = isolate.IsolationConfig(
            limits=limits,
            mode=isolation,
            keep=isolate.keep_paths(self.python, site_args(self.python)),
            project_dir=os.path.abspath(project_dir) if project_dir else None,
            seccomp=seccomp,
        )
        isolation_of(self._config)  # detect now: a mode that cannot work raises here
        self._workdir: str | None = None
        self._workdir_finalizer: weakref.finalize | None = None

    @property
    def workdir(self) -> str | None:
        """The private working folder (the kernel's current directory), once started."""
        return self._workdir

    def isolation(self, kernel: KernelHandle | None) -> dict[str, Any]:
        record: dict[str, Any] = {
            "backend": "subprocess",
            "isolated": True,
            "process": True,
            "env": "clean",
            "workdir": self._workdir,
            "python": self.python,
            "limits": self.limits.to_dict(),
        }
        record.update(isolation_of(self._config).record())
        return record

    @property
    def uncontained(self) -> frozenset[str]:
        """Hostile-code cases this sandbox cannot contain with the isolation it got here
        (case names as in ``tests/test_sandbox_hostile.py``)."""
        iso = isolation_of(self._config)
        out = set()
        if not iso.pid_namespace:
            out |= {"kill_parent", "proc_environ", "background_process"}
        if iso.wrapper != "bwrap":
            out.add("read_home")
        if iso.enforced()["processes"] is None:
            out.add("fork_bomb")
        if not iso.seccomp:
            out.add("user_namespace")
        if self.limits.network or not iso.pid_namespace:
            out.add("network")
        return frozenset(out)

    def spec(self) -> LaunchSpec:
        """The kernel's command line and environment (``PATH`` and ``LANG`` as they are now)."""
        return LaunchSpec(
            argv=kernel_argv(self.python),
            env=(
                ("PATH", os.environ.get("PATH") or os.defpath),
                ("LANG", os.environ.get("LANG") or "C.UTF-8"),
            ),
            extra_env=tuple(self.extra_env.items()),
            isolation=self._config,
        )

    def warm(self) -> None:
        """Start the first kernel's process now as the spare kernel for this sandbox's spec
        (taken by :meth:`spawn`), unless ``spare_kernel=False`` or it was spawned."""
        if self.spare_kernel and self._workdir is None:
            processes.SPARES.prepare(self.spec())

    def after_cell(self) -> None:
        processes.SPARES.refill_due()  # see _first_process

    async def spawn(self, handler: CallHandler, cap: int, start_timeout_s: float) -> KernelHandle:
        # Forking (a daemon's large address space), cgroup set-up and a spare's hand-over
        # block for milliseconds to tens of them: off the event loop.
        if self._workdir is None:  # the first kernel: a spare, or a new folder
            process = await _in_thread(self._first_process, KernelProcess.discard)
            self._workdir = process.workdir
            self._workdir_finalizer = weakref.finalize(self, workdirs.remove, self._workdir)
        else:  # a restart, in the same folder (which stays)
            process = await self._relaunch()
        for attempt in range(1, _MOUNT_RACE_TRIES + 1):
            try:
                return await self._attach(process, handler, cap, start_timeout_s)
            except SandboxError as exc:
                if attempt == _MOUNT_RACE_TRIES or not _lost_mount_race(str(exc)):
                    raise
                log.info("bwrap lost a race with a host mount going away; starting again")
                process = await self._relaunch()
        raise AssertionError("unreachable")

    async def _relaunch(self) -> KernelProcess:
        """A new kernel process in this sandbox's (existing) working folder."""
        spec, folder = self.spec(), self._workdir
        assert folder is not None
        return await _in_thread(lambda: processes.launch(spec, folder), _kill_process)

    def _first_process(self) -> KernelProcess:
        spec = self.spec()
        # The next spare is made after this kernel's first cell (after_cell): its
        # interpreter's start-up would compete with that cell for the CPU (~3 ms per start).
        process = processes.SPARES.take(spec, refill_later=True) if self.spare_kernel else None
        return process if process is not None else processes.launch(spec)

    async def _attach(
        self, process: KernelProcess, handler: CallHandler, cap: int, start_timeout_s: float
    ) -> ProcessKernel:
        """Serve ``process`` and wait for its hello (killing it if that fails)."""
        kernel = ProcessKernel(asyncio.get_running_loop(), handler, cap)
        kernel.launch = process.launch
        try:
            await kernel.attach(process.popen)
        except BaseException:
            killpg(process.popen.pid)
            process.launch.remove_cgroups()
            raise
        await kernel.wait_hello(start_timeout_s)
        kernel.kernel_pid()  # known from now on, even if the wrapper dies
        return kernel

    def _sandbox_uid(self) -> int | None:
        """The kernel's uid when it is not ours (files the host makes for it are its)."""
        return isolation_of(self._config).sandbox_uid

    async def context_request(self, value: Any, codebase: bool) -> tuple[dict[str, Any], Cleanup]:
        """A large text or codebase (:data:`~rlmd.sandbox.files.FILE_CONTEXT_CHARS` or more)
        is written, in a worker thread, to a file in the working folder that the kernel reads
        (at a fresh random name: model code can plant a symlink or FIFO at any predictable
        one); removed afterwards if the kernel has not. When it does not fit there (a
        folder of ``disk_bytes`` smaller than the context, or one model code filled) the
        context goes in one frame, as a small one does."""
        picked = context_file(value, codebase)
        if picked is None or self._workdir is None:
            return await super().context_request(value, codebase)
        fmt, chunks = picked
        try:
            path = await asyncio.to_thread(
                write_new, self._workdir, f".rlmd-context-{fmt}-", chunks, self._sandbox_uid()
            )
        except OSError as exc:  # write_new left no file behind
            log.info("context file not written (%s); sending the context in one frame", exc)
            return await super().context_request(value, codebase)
        return context_file_request(fmt, path), lambda: os.unlink(path)

    def new_context_file(self) -> ContextFile | None:
        folder = self._workdir  # set on the event loop's thread once the kernel is launched
        if folder is None:
            return None
        file, path = open_new(folder, ".rlmd-context-codebase-", self._sandbox_uid())
        return ContextFile(file, path, path)

    async def upload(self, path: str, data: bytes) -> None:
        uid = self._sandbox_uid()
        own = None if uid is None else functools.partial(_give, uid=uid)
        await asyncio.to_thread(upload_file, self._workdir, path, data, own)

    async def download(self, path: str, max_bytes: int | None = None) -> bytes:
        return await asyncio.to_thread(download_file, self._workdir, path, max_bytes)

    async def close(self) -> None:
        if self._workdir_finalizer is not None:
            self._workdir_finalizer()  # removes the working folder (once)


_MOUNT_RACE_TRIES = 3
"""Starts tried when bwrap fails because a host mount vanished while it copied the root."""


def _lost_mount_race(message: str) -> bool:
    """Whether a kernel's start-up failure is bwrap losing a race with the host.

    ``--ro-bind / /`` copies every host mount, then remounts each copy read-only; a mount
    that goes away in between (another sandbox's ``tmpfs`` working folder removed, a docker
    container's overlay unmounted) fails that remount with ``ENOENT`` (seen in CI, 1 start
    in a few thousand while other sandboxes close), or with ``EINVAL`` when the path is
    still there but no longer a mount (seen in a loaded full test run). A new start copies
    the new mount table; a failure that persists is raised after the last try.
    """
    return "Can't bind mount /oldroot/" in message and (
        "No such file or directory" in message or "Invalid argument" in message
    )


async def _in_thread(
    start: Callable[[], KernelProcess], drop: Callable[[KernelProcess], None]
) -> KernelProcess:
    """``start()`` in a worker thread; if the caller is cancelled meanwhile, the process it
    starts is dropped (``drop``, in a thread too) instead of left running."""
    fut = asyncio.get_running_loop().run_in_executor(None, start)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:

        def later(f: asyncio.Future[KernelProcess]) -> None:
            if not f.cancelled() and f.exception() is None:
                threading.Thread(target=drop, args=(f.result(),), daemon=True).start()

        fut.add_done_callback(later)
        raise


def _kill_process(process: KernelProcess) -> None:
    """Kill a kernel process started in a sandbox's existing folder (the folder stays)."""
    killpg(process.popen.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.popen.wait(5)
    for pipe in (process.popen.stdin, process.popen.stdout, process.popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    process.launch.remove_cgroups()


def _give(fd: int, *, uid: int) -> None:
    os.fchown(fd, uid, uid)


async def _drop_cgroups(launch: isolate.Launch) -> None:
    """Remove a dead kernel's cgroups, waiting up to 0.5 s for its processes to be reaped
    (then the removal is deferred to a later launch)."""
    for _ in range(50):
        if launch.remove_cgroups(defer=False):
            return
        await asyncio.sleep(0.01)
    launch.remove_cgroups()

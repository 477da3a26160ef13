"""The in-process backend: the same kernel (:mod:`rlmd.kernel.core`) in this process.

Cells run in a persistent worker thread (:class:`_Worker`); host calls from that thread go
back to the event loop, one task each (:class:`_HostCall`). Fast and convenient for
tests and trusted code, but **not a sandbox**: see :class:`InProcessSandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from rlmd.kernel import protocol
from rlmd.kernel.core import CellInterrupted, Kernel, json_copy
from rlmd.sandbox import workdirs
from rlmd.sandbox.base import (
    CallError,
    CallHandler,
    CellResult,
    Sandbox,
    SandboxError,
    VarInfo,
    VarPage,
    check_page,
)
from rlmd.sandbox.channel import result_from_kernel, wait
from rlmd.sandbox.clock import CallClock, CellTimeout, timeout_cause, wait_cell
from rlmd.sandbox.files import download_file, upload_file
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.messages import AFTER_RESTART, join_names, note_stop, with_notice
from rlmd.sandbox.session import UNSET, Bindings, SandboxState, resolve_limits

log = logging.getLogger(__name__)

_GIVEN_UP: Any = object()  # a cell's future resolved by the host: its thread was abandoned
_CANCELLED: Any = object()  # a host call's outcome when it was cancelled


class _Bell:
    """Wakes a thread blocked in :meth:`wait` from another thread (:meth:`ring`), over a
    pipe: the cell's thread and the event loop hand work to each other this way.

    A pipe, not a lock or a queue: writing to a pipe wakes its reader with Linux's "sync"
    hint (the writer is about to sleep), so the reader is run on the writer's CPU once the
    writer blocks; a futex wake (``Lock.release``, ``SimpleQueue.put``) sends it to another
    CPU, which on a busy machine it must first win, and there it then waits again for the
    GIL the writer still holds. The event loop's own wake-up (``call_soon_threadsafe``) is
    a socket write already. A host call's round trip between a thread and the loop, load
    ~4 on 2 vCPUs: 40-45 µs over pipes against 62-211 µs with a lock. Without a descriptor
    to spare, a semaphore does the same (without the hint).
    """

    __slots__ = ("_r", "_w", "_sem")

    def __init__(self) -> None:
        self._sem: threading.Semaphore | None = None
        try:
            self._r, self._w = os.pipe()
        except OSError:  # out of descriptors (model code shares the process)
            self._r = self._w = -1
            self._sem = threading.Semaphore(0)

    def ring(self) -> None:
        """Wake the waiting thread (or the next :meth:`wait`); a no-op once closed."""
        if self._sem is not None:
            self._sem.release()
        elif self._w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._w, b"\0")

    def wait(self) -> None:
        """Block (the GIL released) until a :meth:`ring` not yet waited for, or the ringing
        end is closed."""
        if self._sem is not None:
            self._sem.acquire()
        elif self._r >= 0:
            os.read(self._r, 1)

    def close_ringer(self) -> None:
        """Close the ringing end (after its last :meth:`ring`; a waiter then sees the end)."""
        w, self._w = self._w, -1
        if w >= 0:
            with contextlib.suppress(OSError):
                os.close(w)
        if self._sem is not None:
            self._sem.release()

    def close_waiter(self) -> None:
        """Close the waiting end (once nobody waits on it)."""
        r, self._r = self._r, -1
        if r >= 0:
            with contextlib.suppress(OSError):
                os.close(r)


class _HostCall:
    """One host call from a cell's thread, served on the event loop: the calling thread
    waits (:meth:`wait`) until :meth:`settle` has put the outcome in :attr:`value` or
    :attr:`error`.

    Leaner than ``asyncio.run_coroutine_threadsafe``: the task serving the call wakes the
    cell's thread itself as it ends, one pass of the event loop earlier than the chained
    ``concurrent.futures.Future`` did, and over a :class:`_Bell` (a pipe) instead of that
    future's ``Condition``. :meth:`settle` and :meth:`cancel` run on the event loop's thread
    only, so the outcome is set once without a lock of its own.
    """

    __slots__ = ("bell", "task", "value", "error", "done")

    def __init__(self) -> None:
        self.bell = _Bell()
        self.task: asyncio.Task[None] | None = None
        self.value: Any = None
        self.error: Any = None
        self.done = False

    def __del__(self) -> None:  # a call whose thread never waited (an interrupt came first)
        self.bell.close_ringer()
        self.bell.close_waiter()

    def wait(self) -> None:
        """Block the calling thread until the call is settled (its pipe is closed then)."""
        try:
            self.bell.wait()
        finally:
            self.bell.close_waiter()

    def settle(self, value: Any = None, *, error: Any = None) -> None:
        """Hand the outcome to the waiting thread (the first outcome wins)."""
        if self.done:
            return
        self.done = True
        self.value, self.error = value, error
        self.bell.ring()
        self.bell.close_ringer()

    def cancel(self) -> None:
        """Fail the call as cancelled now and stop its task (the cell timed out, was
        interrupted, or the sandbox closed)."""
        self.settle(error=_CANCELLED)
        if self.task is not None:
            self.task.cancel()


UNCONTAINED = frozenset(
    {
        "c_level_loop",
        "memory_bomb",
        "fork_bomb",
        "huge_file",
        "os_exit",
        "kill_parent",
        "network",
        "env_keys",
        "proc_environ",
        "read_home",
        "ctypes",
        "close_channel",
        "background_process",
        "fd_output_flood",
        "write_outside",
        "fill_disk",
    }
)
"""Hostile-code cases (names as in ``tests/test_sandbox_hostile.py``) the in-process
backend cannot contain: they would hurt or read the host process itself."""


def _async_raise(thread_id: int, exc_type: type[BaseException]) -> int:
    """Ask CPython to raise ``exc_type`` in the thread ``thread_id`` at its next bytecode."""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


class _Worker:
    """A daemon thread that runs cells one at a time, kept for the sandbox's life: starting
    a thread per cell costs a thread start and hand-overs of the GIL, which can wait a whole
    switch interval (5 ms).

    :meth:`submit`, :meth:`finished` and :meth:`interrupt` are called on the event loop's
    thread only, so whether a cell is running (between a submit and its result arriving) is
    known there exactly, and ``CellInterrupted`` is raised into the thread only then. An
    interrupt that lands after the cell's own code, on the way to handing its result over,
    is absorbed by the thread; one still pending once the thread is idle is cleared before
    the next cell is submitted, so it can never hit a later cell.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._bell = _Bell()  # rung once per job (see _Bell: a pipe wakes the thread sooner)
        self._running = False
        self._stopped = False
        self._raised = False  # an interrupt was raised since the last submit
        self.thread = threading.Thread(target=self._serve, name="rlmd-inprocess-cell", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while not self._stopped:
                try:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        # Taken from the queue, not from the bell: an interrupt landing
                        # between the two cannot lose a job (an extra ring only loops once).
                        self._bell.wait()
                        continue
                    if job is None:
                        return
                    job()  # a job hands its result over itself
                except CellInterrupted:
                    pass  # it came late: the cell it was meant for is over
        finally:
            self._bell.close_waiter()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` (one cell) in the thread; it may be interrupted until
        :meth:`finished`."""
        if self._stopped:
            raise SandboxError("the cell thread was stopped")
        if self._raised and self.thread.ident is not None:  # clear a late interrupt still pending
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident), None)
        self._raised = False
        self._running = True
        self._jobs.put(job)
        self._bell.ring()

    def finished(self) -> None:
        """The cell's result has arrived on the event loop: no interrupt after this."""
        self._running = False

    def interrupt(self) -> bool:
        """Raise ``CellInterrupted`` in the running cell, if any; whether one was raised."""
        if not self._running or self.thread.ident is None:
            return False
        self._raised = True
        _async_raise(self.thread.ident, CellInterrupted)
        return True

    def stop(self) -> None:
        """End the thread once its current cell (if any) is over (safe twice)."""
        if self._stopped:
            return
        self._stopped = True
        self._jobs.put(None)
        self._bell.ring()
        self._bell.close_ringer()  # its last ring: nothing is submitted after a stop


class InProcessSandbox(Sandbox):
    """The kernel in this process; cells run in a worker thread that persists between them.

    Not isolated. Model code shares the host's process, memory, file system, environment
    variables (API keys included) and network. In particular it cannot stop:

    * **runaway cells**: on timeout it raises ``CellInterrupted`` in the cell's thread
      (``PyThreadState_SetAsyncExc``). That stops pure-Python loops, but not code blocked in
      C (``time.sleep``, a slow regex, a C extension) or code that catches ``BaseException``.
      If the cell does not stop within ``interrupt_grace_s``, its thread is abandoned (it
      keeps running and holding memory in the host) and a fresh REPL replaces the old one:
      ``kernel_restarted=True`` with the lost variables listed;
    * ``os._exit()``, ``os.kill(os.getpid(), ...)``, segfaults: they end the host;
    * memory exhaustion (no limit);
    * fd-level output (``os.write(1, ...)``, child processes) goes to the host's stdout and
      stderr; only ``sys.stdout``/``sys.stderr`` writes from the cell's own thread are
      captured (threads started by model code print to the host's streams);
    * any :class:`Limits` but ``wall_s`` and ``output_bytes`` (memory, CPU, processes, files,
      network): they are recorded as not enforced. :data:`UNCONTAINED` lists the hostile
      cases this backend cannot contain.

    A timeout that the interrupt does stop keeps the REPL state: ``timed_out=True``,
    ``kernel_restarted=False``. :meth:`upload` / :meth:`download` use a private temporary
    folder (:attr:`workdir`), but cells run in the host's current directory.

    Args:
        limits: only ``wall_s`` and ``output_bytes`` are enforced.
        timeout_s / max_output_chars: aliases of ``limits.wall_s`` / ``limits.output_bytes``.
        interrupt_grace_s: seconds an interrupted cell has to stop before its thread is
            abandoned and a fresh REPL started.
    """

    kind = "inprocess"

    uncontained = UNCONTAINED

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        timeout_s: float | None = UNSET,
        max_output_chars: int | None = UNSET,
        interrupt_grace_s: float = 1.0,
    ):
        self.limits = resolve_limits(limits, timeout_s, max_output_chars)
        self.state = SandboxState.STOPPED
        self.interrupt_grace_s = interrupt_grace_s
        self.workdir: str | None = None
        self.restarts = 0
        self._running: tuple[Kernel, _Worker, asyncio.Future[Any]] | None = None
        self._interrupted = False
        self._handler: CallHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._kernel: Kernel | None = None
        self._inflight: set[_HostCall] = set()
        self._clock = CallClock()
        self._worker: _Worker | None = None
        self._lock = asyncio.Lock()
        self.bound = Bindings()
        self._orphan: tuple[Kernel, _Worker, asyncio.Future[Any]] | None = None
        self.abandoned_threads = 0

    @property
    def _closed(self) -> bool:
        return self.state is SandboxState.CLOSED

    @property
    def isolation(self) -> dict[str, Any]:
        lim = self.limits
        return {
            "backend": "inprocess",
            "isolated": False,
            "process": False,
            "network": "host",
            "filesystem": "host",
            "env": "host",
            "namespaces": [],
            "rlimits": {},
            "cgroup": None,
            "seccomp": False,
            "interrupt": "async-exception",
            "limits": lim.to_dict(),
            "enforced": {
                "wall_s": "async exception (pure Python only)" if lim.wall_s else None,
                "cpu_s": None,
                "memory_bytes": None,
                "processes": None,
                "open_files": None,
                "file_size_bytes": None,
                "disk_bytes": None,
                "output_bytes": "capture cap" if lim.output_bytes else None,
                "network": None,
            },
            "uncontained": sorted(UNCONTAINED),
        }

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, handler: CallHandler) -> None:
        """Start the REPL. On a started sandbox: keep the REPL and its state and serve
        calls with ``handler`` from now on (one persistent REPL, several runs)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is not None:
            # Started already (a persistent REPL serving another run): keep the REPL, serve
            # its calls with the new handler from now on.
            if asyncio.get_running_loop() is not self._loop:
                raise SandboxError("the sandbox was started on another event loop")
            self._handler = handler
            return
        self._handler = handler
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.workdir = workdirs.make("inprocess")
        self._kernel = self._new_kernel()
        self.state = SandboxState.READY

    async def close(self) -> None:
        self.state = SandboxState.CLOSED
        self._cancel_calls(self._inflight)
        worker, self._worker = self._worker, None
        self._kernel = None
        if worker is not None:
            worker.interrupt()
            worker.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def interrupt(self) -> bool:
        """Raise ``CellInterrupted`` in the running cell (variables kept); if it has not
        stopped after ``interrupt_grace_s`` (blocked in C), its thread is abandoned and a
        fresh REPL started, and the running :meth:`execute` returns with
        ``kernel_restarted``. Returns whether a cell was running."""
        running = self._running
        if running is None:
            return False
        kernel, worker, fut = running
        self._interrupted = True
        self._cancel_calls(self._inflight)
        worker.interrupt()

        def escalate() -> None:
            if not fut.done() and self._running is running:
                fut.set_result(_GIVEN_UP)

        asyncio.get_running_loop().call_later(self.interrupt_grace_s, escalate)
        return True

    async def restart(self) -> list[str]:
        """A fresh REPL with the context, tools and ``history`` bound again (waits for a
        running cell: :meth:`interrupt` it first). Returns the user variables lost.

        Raises:
            SandboxError: not started or closed.
        """
        async with self._lock:
            await self._settle_orphan()
            self._live()
            lost = list(self.bound.user_names)
            self._replace_kernel()
            return lost

    async def upload(self, path: str, data: bytes) -> None:
        upload_file(self.workdir, path, bytes(data))

    async def download(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return download_file(self.workdir, path, max_bytes)

    async def health(self) -> dict[str, Any]:
        return {
            "backend": "inprocess",
            "alive": self._kernel is not None and not self._closed,
            "pid": os.getpid(),
            "running": self._running is not None,
            "restarts": self.restarts,
            "abandoned_threads": self.abandoned_threads,
        }

    # -- the bridge for host calls ----------------------------------------------------------

    def _new_kernel(self) -> Kernel:
        inflight: set[_HostCall] = set()
        self._inflight = inflight
        loop = self._loop
        loop_thread = self._loop_thread
        assert loop is not None

        async def serve(pending: _HostCall, fn: str, args: dict[str, Any]) -> None:
            handler = self._handler
            assert handler is not None
            token = self._clock.started(fn, args)
            try:
                try:
                    value = await handler(fn, args)
                finally:
                    self._clock.ended(token)
            except CallError as exc:
                pending.settle(error=RuntimeError(str(exc)))
                return
            except asyncio.CancelledError:
                pending.settle(error=_CANCELLED)
                raise
            except Exception as exc:  # noqa: BLE001 - reported inside the cell
                pending.settle(error=RuntimeError(f"{type(exc).__name__}: {exc}"))
                return
            try:
                pending.settle(json_copy(value, f"the host's answer to {fn}"))
            except TypeError as exc:
                pending.settle(error=RuntimeError(str(exc)))

        def start(pending: _HostCall, fn: str, args: dict[str, Any]) -> None:
            if not pending.done:  # not cancelled before the loop got to it
                pending.task = loop.create_task(serve(pending, fn, args))

        def call(fn: str, args: dict[str, Any]) -> Any:
            if threading.get_ident() == loop_thread:
                raise RuntimeError(f"{fn} cannot be called from the event loop's thread")
            args = json_copy(args, f"{fn} arguments")
            pending = _HostCall()
            inflight.add(pending)
            try:
                try:
                    loop.call_soon_threadsafe(start, pending, fn, args)
                except RuntimeError:
                    raise RuntimeError(f"{fn}: the host is shutting down") from None
                pending.wait()  # settled on the loop's thread
            finally:
                inflight.discard(pending)
            if pending.error is _CANCELLED:
                raise RuntimeError(f"{fn} was cancelled (the cell timed out or the sandbox closed)")
            if pending.error is not None:
                raise pending.error
            return pending.value

        return Kernel(call, capture="thread", workdir=self.workdir)

    @staticmethod
    def _cancel_calls(inflight: set[_HostCall]) -> None:
        for pending in list(inflight):
            pending.cancel()

    def _live(self) -> Kernel:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is None:
            raise SandboxError("the sandbox is not started")
        return self._kernel

    def _replace_kernel(self) -> None:
        """A fresh REPL with the context, the tools and ``history`` bound again."""
        kernel = self._new_kernel()
        if self.bound.context is not None:
            kernel.bind_context(*self.bound.context)
        if self.bound.tool_callables or self.bound.tool_values:
            kernel.define_tools(self.bound.tool_callables, self.bound.tool_values)
        if self.bound.history is not None:
            kernel.set_var("history", self.bound.history[0])
        self._kernel = kernel
        self.bound.user_names = []
        self.restarts += 1

    # -- operations ---------------------------------------------------------------------------

    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        async with self._lock:
            kernel = self._live()
            if not isinstance(value, str):
                value = json_copy(value, "the context")
            kernel.bind_context(value, codebase)
            self.bound.context = (value, codebase)

    async def update_codebase(
        self, value: dict[str, str], changed: dict[str, str], removed: list[str]
    ) -> None:
        """See :meth:`Sandbox.update_codebase`: the difference is applied to the kernel's
        copy (only the changed files are copied); the whole ``value`` is bound when no
        codebase is bound or the kernel refuses the difference."""
        async with self._lock:
            kernel = self._live()
            bound = self.bound.context
            if bound is not None and bound[1]:
                try:
                    new = kernel.update_codebase(
                        json_copy(changed, "the context"), list(removed), len(value)
                    )
                except (ValueError, TypeError) as exc:
                    log.info("codebase update refused (%s); binding the whole codebase", exc)
                else:
                    self.bound.context = (new, True)
                    return
            copy = json_copy(value, "the context")
            kernel.bind_context(copy, True)
            self.bound.context = (copy, True)

    async def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        async with self._lock:
            kernel = self._live()
            callables = list(callables)
            values = json_copy(dict(values), "tool values")
            kernel.define_tools(callables, values)
            self.bound.note_tools(callables, values)

    async def set_variable(self, name: str, value: Any) -> None:
        async with self._lock:
            kernel = self._live()
            value = json_copy(value, f"the value of {name!r}")
            kernel.set_var(name, value)
            self.bound.note_variable(name, value)

    async def get_variable(self, name: str) -> Any:
        async with self._lock:
            return self._live().get_var(name)

    async def list_variables(self) -> list[VarInfo]:
        async with self._lock:
            infos = self._live().list_vars()
            self.bound.user_names = [v["name"] for v in infos]
            return [VarInfo(**v) for v in infos]

    async def list_variables_page(
        self,
        offset: int = 0,
        limit: int = protocol.VARS_PAGE,
        match: str = "",
        *,
        by_name: bool = True,
    ) -> VarPage:
        # In a thread: the pass over a large namespace leaves the loop (the sort keeps the
        # GIL, ~40 ms for 200,000 names), and so does the preview helper's wait.
        check_page(offset, limit)
        request = {"offset": offset, "limit": limit, "match": match}
        request["order"] = "name" if by_name else "defined"
        async with self._lock:
            out = await asyncio.to_thread(self._live().list_vars_page, request)
        return VarPage.from_kernel(out, offset, limit)

    # In a thread: the file I/O leaves the loop (the JSON calls keep the GIL: in this
    # process they stall it anyway, as a cell does).
    async def save_variables(
        self,
        names: list[str] | None,
        path: str,
        *,
        max_var_bytes: int,
        max_total_bytes: int,
        info_path: str | None = None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"names": None if names is None else list(names)}
        request.update(path=path, info_path=info_path, max_var_bytes=int(max_var_bytes))
        request["max_total_bytes"] = int(max_total_bytes)
        async with self._lock:
            return await asyncio.to_thread(self._live().save_vars, request)

    async def load_variables(
        self, path: str, names: list[str], *, only_missing: bool = False
    ) -> dict[str, Any]:
        request = {"path": path, "names": list(names), "only_missing": bool(only_missing)}
        async with self._lock:
            out = await asyncio.to_thread(self._live().load_vars, request)
            self.bound.note_restored(out["restored"], names)
            return out

    async def remove_file(self, path: str) -> None:
        async with self._lock:
            self._live().remove_file({"path": path})

    async def execute(
        self, code: str, *, timeout_s: float | None = None, wall_limit_s: float | None = None
    ) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            await self._settle_orphan()
            kernel = self._live()
            notice = self.bound.take_notice()
            loop = asyncio.get_running_loop()
            t0 = time.perf_counter()
            fut: asyncio.Future[Any] = loop.create_future()
            max_output = self.max_output_chars

            if self._worker is None:
                self._worker = _Worker()
            worker = self._worker

            def resolve(value: Any) -> None:
                worker.finished()
                if not fut.done():
                    fut.set_result(value)

            def run() -> None:
                try:
                    res: Any = kernel.exec_cell(code, max_output=max_output)
                except CellInterrupted:
                    # The interrupt landed just after the cell's own code had finished.
                    res = {
                        "stdout": "",
                        "stderr": "",
                        "error": "CellInterrupted: the cell timed out\n",
                        "final": None,
                        "variables": [],
                        "restored": kernel.restore_reserved(),
                        "names": kernel.user_names(),
                        "duration_s": 0.0,
                    }
                except BaseException as exc:  # noqa: BLE001 - handed to the event loop
                    res = exc
                with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                    loop.call_soon_threadsafe(resolve, res)

            worker.submit(run)
            self._running, self._interrupted = (kernel, worker, fut), False
            self.state = SandboxState.RUNNING
            try:
                res = await wait_cell(fut, self._clock, timeout, wall_limit_s)
            except asyncio.CancelledError:
                # Nobody waits for this cell any more: interrupt it; the next execute makes
                # sure it has stopped (or replaces the REPL) before running anything.
                self._cancel_calls(self._inflight)
                worker.interrupt()
                self._orphan = (kernel, worker, fut)
                raise
            except CellTimeout as exc:
                cause = timeout_cause(self._clock, exc)
                timed_out = await self._on_timeout(worker, fut, exc.limit_s, t0, cause)
                return with_notice(timed_out, notice)
            finally:
                self._running = None
                if self.state is SandboxState.RUNNING:
                    self.state = SandboxState.READY
            if res is _GIVEN_UP:  # interrupt() escalated: the thread would not stop
                self._abandon(worker)
                lost = list(self.bound.user_names)
                self._replace_kernel()
                return with_notice(
                    CellResult(
                        error=(
                            f"the cell did not stop within {self.interrupt_grace_s:g} s of an "
                            "interrupt (it keeps running in a background thread of the host); "
                            f"a fresh REPL was started; variables lost: {join_names(lost)}. "
                            f"{AFTER_RESTART}"
                        ),
                        kernel_restarted=True,
                        lost_variables=lost,
                        duration_s=time.perf_counter() - t0,
                    ),
                    notice,
                )
            if isinstance(res, BaseException):
                raise SandboxError(f"the kernel failed: {res!r}") from res
            self.bound.note_names(res.get("names"))
            result = result_from_kernel(res, time.perf_counter() - t0)
            note_stop(result, timeout, timed_out=False, interrupted=self._interrupted)
            return with_notice(result, notice)

    async def _settle_orphan(self) -> None:
        """Make sure a cell whose ``execute`` was cancelled has stopped; if it will not,
        abandon its thread and start a fresh REPL (reported on the next result)."""
        orphan, self._orphan = self._orphan, None
        if orphan is None:
            return
        kernel, worker, fut = orphan
        if await self._stop(worker, fut) or kernel is not self._kernel:
            return
        lost = list(self.bound.user_names)
        self._abandon(worker)
        self._replace_kernel()
        self.bound.notice = (
            "[rlmd: an earlier, cancelled cell could not be interrupted; a fresh REPL was "
            f"started; variables lost: {join_names(lost)}]\n",
            lost,
        )

    async def _stop(self, worker: _Worker, fut: asyncio.Future[Any]) -> bool:
        """Interrupt the cell ``worker`` runs until it stops or the grace time ends."""
        self._cancel_calls(self._inflight)
        deadline = time.perf_counter() + self.interrupt_grace_s
        while not fut.done() and time.perf_counter() < deadline:
            worker.interrupt()
            with contextlib.suppress(TimeoutError):
                await wait(asyncio.shield(fut), 0.02)
        return fut.done()

    def _abandon(self, worker: _Worker) -> None:
        """Leave ``worker`` to the cell it is stuck in (it ends once that returns); the next
        cell gets a new one."""
        self.abandoned_threads += 1
        worker.stop()
        if self._worker is worker:
            self._worker = None

    async def _on_timeout(
        self,
        worker: _Worker,
        fut: asyncio.Future[Any],
        timeout: float | None,
        t0: float,
        cause: str = "",
    ) -> CellResult:
        await self._stop(worker, fut)
        if fut.done() and not isinstance(fut.result(), BaseException):
            res = fut.result()
            self.bound.note_names(res.get("names"))
            result = result_from_kernel(res, time.perf_counter() - t0)
            return note_stop(result, timeout, timed_out=True, interrupted=False, cause=cause)
        # The thread would not stop: abandon it and start a fresh REPL.
        self._abandon(worker)
        lost = list(self.bound.user_names)
        self._replace_kernel()
        return CellResult(
            error=(
                f"cell timed out after {timeout:g} s{': ' + cause if cause else ''} and "
                "could not be interrupted (it keeps "
                "running in a background thread of the host); a fresh REPL was started; "
                f"variables lost: {join_names(lost)}. {AFTER_RESTART}"
            ),
            timed_out=True,
            kernel_restarted=True,
            lost_variables=lost,
            duration_s=time.perf_counter() - t0,
        )

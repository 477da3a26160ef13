"""The one out-of-process :class:`Sandbox`: a persistent REPL over any transport.

A :class:`SandboxSession` drives a kernel that a :class:`~rlmd.sandbox.transport.Transport`
starts (a child process, a docker container, a process in a cloud VM) through the same
lifecycle everywhere:

* ``start``: the transport spawns a kernel that said hello; on a started session, the REPL
  is kept and serves host calls with the new handler;
* ``execute``: one cell under the wall-clock limit; past it the kernel gets ``SIGINT``
  (``KeyboardInterrupt`` in the cell, the REPL state kept); a cell that does not stop within
  ``interrupt_grace_s`` gets its kernel killed, and a fresh kernel is started with the
  context, tools and ``history`` bound again; the result names what was lost and why
  (:mod:`rlmd.sandbox.messages`);
* cancellation (a cancelled ``execute``, :meth:`interrupt`) goes through one path: the cell
  is stopped in the background and the next operation waits for that first;
* the other operations (variables, tools, context) restart a kernel that died meanwhile and
  owe the next cell a notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import time
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox import workdirs
from rlmd.sandbox.base import (
    CallHandler,
    CellResult,
    Sandbox,
    SandboxError,
    VarInfo,
    VarPage,
    check_page,
)
from rlmd.sandbox.channel import KernelDied, exec_done_problem, result_from_kernel, wait
from rlmd.sandbox.clock import CellTimeout, timeout_cause, wait_cell
from rlmd.sandbox.files import FILE_CONTEXT_CHARS, ContextFile, context_file_request
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.messages import (
    AFTER_RESTART,
    died_text,
    limit_hint,
    limit_message,
    limit_phrase,
    note_stop,
    notice_text,
    restarted_text,
    timed_out_text,
    with_notice,
)
from rlmd.sandbox.transport import KernelHandle, Transport

PREVIEW_GRACE_S = 10.0
"""Seconds a cell's result may take after its code finished (the kernel's ``ran`` frame):
the previews' own bound (``rlmd.kernel.core.PREVIEW_BUDGET_S``) plus sending a large
result over a slow channel. A forged ``ran`` frame buys the code at most this much."""

DISK_WATCH_S = 0.25
"""Seconds between two looks at a watched working folder's size while a cell runs."""

log = logging.getLogger(__name__)

DELTA_MAX_CHARS = FILE_CONTEXT_CHARS
"""A codebase difference (:meth:`SandboxSession.update_codebase`) of this many characters
or more is not sent as one: the whole codebase is bound instead, through a file where the
transport has one (a difference goes inline, encoded on the event loop: 1 MiB is ~5 ms)."""

UNSET: Any = object()
"""Default of the ``timeout_s`` / ``max_output_chars`` aliases: "take it from ``limits``"."""


class SandboxState(enum.Enum):
    """Where a sandbox is in its life."""

    STOPPED = "stopped"  # made, not started
    STARTING = "starting"
    READY = "ready"  # a kernel is up and idle
    RUNNING = "running"  # a cell runs
    RESTARTING = "restarting"  # a kernel is being replaced
    CLOSED = "closed"


def resolve_limits(
    limits: Limits | dict[str, Any] | None,
    timeout_s: float | None = UNSET,
    max_output_chars: int | None = UNSET,
) -> Limits:
    """``limits`` (a :class:`Limits`, its dict form or ``None`` for the defaults) with the
    aliases folded in: ``timeout_s`` is ``wall_s`` (``None``: no limit), ``max_output_chars``
    is ``output_bytes`` (``None``: keep the limit's).

    Raises:
        ValueError: an unknown or invalid limit.
    """
    resolved = limits if isinstance(limits, Limits) else Limits.from_dict(limits)
    overrides: dict[str, Any] = {}
    if timeout_s is not UNSET:
        overrides["wall_s"] = timeout_s
    if max_output_chars is not UNSET and max_output_chars is not None:
        overrides["output_bytes"] = int(max_output_chars)
    return dataclasses.replace(resolved, **overrides) if overrides else resolved


def open_session(
    transport_class: type[Transport],
    *,
    limits: Limits | dict[str, Any] | None = None,
    timeout_s: float | None = UNSET,
    max_output_chars: int | None = UNSET,
    op_timeout_s: float = 120.0,
    start_timeout_s: float | None = None,
    interrupt_grace_s: float | None = None,
    **transport_options: Any,
) -> SandboxSession:
    """A not yet started session over a new ``transport_class(limits=...,
    **transport_options)``; the limits with their aliases folded in (:func:`resolve_limits`).

    Raises:
        ValueError: bad limits, or transport options that cannot work here.
        TypeError: an option the transport does not take.
    """
    resolved = resolve_limits(limits, timeout_s, max_output_chars)
    transport = transport_class(limits=resolved, **transport_options)
    return SandboxSession(
        transport,
        op_timeout_s=op_timeout_s,
        start_timeout_s=start_timeout_s,
        interrupt_grace_s=interrupt_grace_s,
    )


_MAPPED_ERRORS: dict[str, type[Exception]] = {
    "KeyError": KeyError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def kernel_error(msg: dict[str, Any]) -> Exception:
    """The exception for a failed request's ``done`` frame: ``KeyError``, ``ValueError`` and
    ``TypeError`` as themselves, anything else as :class:`SandboxError` ``"kernel error:
    <type>: <text>"`` (a ``MemoryError`` says the memory limit is too low)."""
    etype = str(msg.get("etype") or "")
    text = str(msg.get("error") or "")
    cls = _MAPPED_ERRORS.get(etype)
    if cls is not None:
        return cls(text)
    if etype == "MemoryError":
        return SandboxError(f"kernel error: MemoryError: {text} (the memory limit is too low)")
    return SandboxError(f"kernel error: {etype}: {text}")


class Bindings:
    """What a sandbox binds again after its REPL is replaced: the context, user tools and
    ``history``, plus the user variables it knows of and the notice owed to the next cell."""

    def __init__(self) -> None:
        self.context: tuple[Any, bool] | None = None
        self.tool_callables: list[str] = []
        self.tool_values: dict[str, Any] = {}
        self.history: tuple[Any] | None = None
        self.user_names: list[str] = []
        self.notice: tuple[str, list[str]] | None = None

    def note_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        """Record tools just defined (a later definition replaces an earlier)."""
        for name in callables:
            self.tool_values.pop(name, None)
            if name not in self.tool_callables:
                self.tool_callables.append(name)
        for name, value in values.items():
            if name in self.tool_callables:
                self.tool_callables.remove(name)
            self.tool_values[name] = value
        self.user_names = [n for n in self.user_names if n not in callables and n not in values]

    def note_names(self, names: Any) -> None:
        """Record the user names an exec result gives (``None``: the same as when the cell
        started, kept as they are)."""
        if names is not None:
            self.user_names = list(names)

    def note_variable(self, name: str, value: Any) -> None:
        """Record a value just set from the host."""
        if name == "history":
            self.history = (value,)
        elif name in self.tool_values:
            self.tool_values[name] = value
        elif name not in self.user_names:
            self.user_names.append(name)

    def note_restored(self, names: Any, wanted: list[str]) -> None:
        """Record the variables a ``load_vars`` says it bound: the strings of ``names`` that
        are among ``wanted``. In one pass: :meth:`note_variable` per name looked each up in
        the list of names, so a checkpoint of 200,000 variables held the daemon's event loop
        (every client) for hours (review22)."""
        asked = set(wanted)
        known = set(self.user_names)
        for name in names if isinstance(names, list) else ():
            if not isinstance(name, str) or name not in asked:
                continue
            if name == "history" or name in self.tool_values:
                self.note_variable(name, None)
            elif name not in known:
                known.add(name)
                self.user_names.append(name)

    def take_notice(self) -> tuple[str, list[str]] | None:
        """The pending restart notice (cleared)."""
        notice, self.notice = self.notice, None
        return notice


class SandboxSession(Sandbox):
    """A persistent REPL in a kernel that ``transport`` starts (see the module docstring).

    Args:
        transport: where kernels run; its ``limits`` are this sandbox's.
        op_timeout_s: limit for the other operations (binding, variables), seconds.
        start_timeout_s: how long a kernel may take to start (default: the transport's).
        interrupt_grace_s: seconds an interrupted or timed-out cell has to stop before its
            kernel is killed and restarted (default: the transport's).

    The :data:`CallHandler` must not call back into this sandbox (that would deadlock on the
    sandbox's lock while the cell waits for the handler).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        op_timeout_s: float = 120.0,
        start_timeout_s: float | None = None,
        interrupt_grace_s: float | None = None,
    ):
        self.transport = transport
        self.kind = transport.kind
        self.limits = transport.limits
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = (
            transport.start_timeout_s if start_timeout_s is None else start_timeout_s
        )
        self.interrupt_grace_s = (
            transport.interrupt_grace_s if interrupt_grace_s is None else interrupt_grace_s
        )
        self.state = SandboxState.STOPPED
        self.restarts = 0
        self.bound = Bindings()
        self._handler: CallHandler | None = None
        self._kernel: KernelHandle | None = None
        self._lock = asyncio.Lock()
        self._running: tuple[KernelHandle, asyncio.Future[dict[str, Any]]] | None = None
        self._interrupted = False
        self._stopping: asyncio.Task[None] | None = None
        self._disk_how: tuple[KernelHandle | None, str] = (None, "")

    # -- what the transport decides ---------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
        return self.transport.isolation(self._kernel)

    @property
    def uncontained(self) -> frozenset[str]:  # type: ignore[override]
        return self.transport.uncontained

    @property
    def pid(self) -> int | None:
        """The current kernel's process id as its transport reports it (changes on restart)."""
        return self._kernel.pid if self._kernel is not None else None

    @property
    def kernel(self) -> KernelHandle | None:
        """The current kernel handle (``None`` before start and after close; a restart
        replaces it): its ``pid``, and what its transport adds (a container's ``id``)."""
        return self._kernel

    @property
    def workdir(self) -> str | None:
        """The kernel's working folder (``upload`` / ``download`` paths are under it)."""
        return self.transport.workdir

    @property
    def _closed(self) -> bool:
        return self.state is SandboxState.CLOSED

    # -- lifecycle ----------------------------------------------------------------------------

    def warm(self) -> None:
        if self._kernel is None and not self._closed:
            self.transport.warm()

    async def start(self, handler: CallHandler) -> None:
        """Start the kernel. On a started sandbox: keep the REPL and its state and serve
        calls with ``handler`` from now on (one persistent REPL, several runs).

        Raises:
            SandboxError: closed, started on another event loop, or the kernel failed to
                start (everything made is freed again).
        """
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is not None:
            if asyncio.get_running_loop() is not self._kernel.loop:
                raise SandboxError("the sandbox was started on another event loop")
            self._handler = handler
            self._kernel.handler = handler
            return
        self._handler = handler
        self.state = SandboxState.STARTING
        try:
            self._kernel = await self._spawn()
        except BaseException:
            await self.close()
            raise
        self.state = SandboxState.READY

    async def close(self) -> None:
        """Kill the kernel and free what the transport made. Safe to call twice."""
        self.state = SandboxState.CLOSED
        stopping, self._stopping = self._stopping, None
        if stopping is not None and not stopping.done():
            stopping.cancel()
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            await kernel.kill()
        await self.transport.close()

    async def restart(self) -> list[str]:
        """Kill the kernel and start a fresh one with the context, tools and ``history``
        bound again (waits for a running cell: :meth:`interrupt` it first). Returns the
        user variables lost.

        Raises:
            SandboxError: not started, closed, or the new kernel failed.
        """
        async with self._lock:
            await self._live()
            lost = list(self.bound.user_names)
            await self._restart()
            return lost

    # -- cells --------------------------------------------------------------------------------

    async def execute(
        self, code: str, *, timeout_s: float | None = None, wall_limit_s: float | None = None
    ) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            t0 = time.perf_counter()
            kernel = await self._live()
            notice = self.bound.take_notice()
            timed_out, cause = False, ""
            watch: asyncio.Task[None] | None = None
            try:
                rid, fut = kernel.request(
                    {"op": "exec", "code": code, "max_output": self.max_output_chars}
                )
                ran = kernel.ran_future(rid)
                self._running, self._interrupted = (kernel, fut), False
                self.state = SandboxState.RUNNING
                watch = self._watch_disk(kernel)
                try:
                    # The wall-clock limit covers the code, not time blocked on sub-calls
                    # (rlmd.sandbox.clock); the variable previews after it (model-defined
                    # __repr__) have their own bound in the kernel.
                    await wait_cell(ran, kernel.clock, timeout, wall_limit_s)
                    if fut.done():  # the common case: its done frame ended the wait
                        msg = fut.result()
                    else:
                        grace = None if timeout is None else PREVIEW_GRACE_S
                        msg = await wait(asyncio.shield(fut), grace)
                except TimeoutError as exc:
                    # Past the wall-clock limit: interrupt, then kill if it will not stop.
                    timed_out, cause = True, timeout_cause(kernel.clock, exc)
                    if isinstance(exc, CellTimeout):
                        timeout = exc.limit_s
                    if not await self._stop_cell(kernel, fut, "timeout"):
                        raise KernelDied() from None
                    msg = fut.result()
            except asyncio.CancelledError:
                # Nobody waits for this cell any more (a cancelled task): stop it in the
                # background; the next operation waits for that first (see _live).
                if self._running is not None:
                    self._stopping = asyncio.ensure_future(self._stop_orphan(kernel, rid, fut))
                raise
            except KernelDied:
                return with_notice(await self._died(kernel, t0, timeout, timed_out, cause), notice)
            finally:
                if watch is not None:
                    watch.cancel()
                self._running = None
                if self.state is SandboxState.RUNNING:
                    self.state = SandboxState.READY
                # at the loop's next turn: after the caller has taken the cell's result
                asyncio.get_running_loop().call_soon(self.transport.after_cell)
            problem = exec_done_problem(msg)
            if problem is not None:
                # A forged or broken frame (model code can write to the channel): a kernel
                # protocol error, never the run's failure. Replace the kernel, tell the model.
                kernel.protocol_error = f"kernel protocol error: {problem}"
                await kernel.kill()
                return with_notice(await self._died(kernel, t0, timeout, timed_out, cause), notice)
            result = await self._result(kernel, rid, msg["result"], t0)
            note_stop(
                result, timeout, timed_out=timed_out, interrupted=self._interrupted, cause=cause
            )
            return with_notice(result, notice)

    def _watch_disk(self, kernel: KernelHandle) -> asyncio.Task[None] | None:
        """While a cell runs, a task that kills ``kernel`` when its working folder holds
        more than ``limits.disk_bytes``, only where no mount caps the folder (the isolation
        record says ``host watch``). Best effort: a check every :data:`DISK_WATCH_S`."""
        cap, folder = self.limits.disk_bytes, self.workdir
        if not cap or folder is None or workdirs.capped(folder):
            return None
        if self._disk_how[0] is not kernel:  # the isolation record costs ~1 ms: once per kernel
            how = (self.isolation.get("enforced") or {}).get("disk_bytes") or ""
            self._disk_how = (kernel, how)
        if not self._disk_how[1].startswith("host watch"):
            return None

        async def watch() -> None:
            while not kernel.dead:
                await asyncio.sleep(DISK_WATCH_S)
                used = await asyncio.to_thread(workdirs.usage, folder)
                if used > cap:
                    log.info("%s: working folder holds %d bytes, over %d", kernel.label, used, cap)
                    kernel.kill_reason = "disk_bytes"
                    await kernel.kill()
                    return

        return asyncio.ensure_future(watch())

    async def interrupt(self) -> bool:
        """``KeyboardInterrupt`` in the running cell (its host calls fail first; variables
        kept); if it has not stopped after ``interrupt_grace_s`` the kernel is killed and the
        running :meth:`execute` returns with ``kernel_restarted``. Returns whether a cell was
        running."""
        running = self._running
        if running is None or running[1].done() or running[0].dead:
            return False
        self._interrupted = True
        await self._stop_cell(*running, "interrupt")
        return True

    async def _stop_cell(
        self, kernel: KernelHandle, fut: asyncio.Future[dict[str, Any]], reason: str
    ) -> bool:
        """Stop the cell whose ``done`` frame ``fut`` waits for: interrupt it and wait up to
        ``interrupt_grace_s``; kill the kernel (``reason``, told to the model) if it has not
        stopped by then. Returns whether the kernel survived (``fut`` then has the result)."""
        if not fut.done() and not kernel.dead:
            try:
                await kernel.interrupt()
            except Exception as exc:  # noqa: BLE001 - undeliverable: the kill below ends it
                log.warning("could not interrupt %s: %r", kernel.label, exc)
            else:
                with contextlib.suppress(TimeoutError, KernelDied):
                    await wait(asyncio.shield(fut), self.interrupt_grace_s)
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            return True
        if kernel.kill_reason is None and not kernel.dead:
            kernel.kill_reason = reason
        await kernel.kill()
        return False

    async def _stop_orphan(
        self, kernel: KernelHandle, rid: int, fut: asyncio.Future[dict[str, Any]]
    ) -> None:
        """Stop a cell whose ``execute`` was cancelled and drop its output; the user
        variables it made are still known afterwards."""
        if not await self._stop_cell(kernel, fut, "interrupt"):
            return
        msg = fut.result()
        if msg.get("ok"):
            with contextlib.suppress(Exception):
                await kernel.cell_stderr(rid, msg["result"], self.transport.stderr_wait_s)
            self.bound.note_names(msg["result"].get("names"))

    async def _result(
        self, kernel: KernelHandle, rid: int, res: dict[str, Any], t0: float
    ) -> CellResult:
        """A finished cell's result, with its fd-level stderr and a hint naming the limit
        an error shows was hit (``MemoryError`` under the memory limit, ...)."""
        fd_text = await kernel.cell_stderr(rid, res, self.transport.stderr_wait_s)
        self.bound.note_names(res.get("names"))
        result = result_from_kernel(res, time.perf_counter() - t0, fd_text)
        hint = limit_hint(result.error, self.limits)
        if hint:
            result.error = (result.error or "") + hint + "\n"
        return result

    async def _died(
        self,
        kernel: KernelHandle,
        t0: float,
        timeout: float | None,
        timed_out: bool,
        cause: str = "",
    ) -> CellResult:
        """The result of a cell whose kernel died (or was killed); restarts the kernel."""
        if self._closed:
            raise SandboxError("the sandbox was closed while the cell ran")
        death = await kernel.death(self.limits)
        partial = kernel.stderr_now()
        lost = list(self.bound.user_names)
        await self._restart()
        timed_out = timed_out or kernel.kill_reason == "timeout"
        if timed_out:
            assert timeout is not None
            error = restarted_text(timed_out_text(timeout, stopped=False, cause=cause), lost)
        elif kernel.kill_reason == "disk_bytes":
            error = limit_message("disk_bytes", self.limits.disk_bytes, restarted=True, lost=lost)
            error += (
                " The files stay in the working folder: delete the ones you do not need "
                f"before writing more. {AFTER_RESTART}"
            )
        elif kernel.kill_reason == "interrupt":
            error = restarted_text(
                f"the cell did not stop within {self.interrupt_grace_s:g} s of an interrupt", lost
            )
        elif death.limit is not None:
            value = getattr(self.limits, death.limit)
            error = limit_message(death.limit, value, restarted=True, lost=lost)
            error += " " + AFTER_RESTART
        else:
            error = died_text(kernel.protocol_error or death.how, lost)
        return CellResult(
            stderr=partial,
            error=error,
            timed_out=timed_out,
            kernel_restarted=True,
            lost_variables=lost,
            duration_s=time.perf_counter() - t0,
        )

    # -- operations ---------------------------------------------------------------------------

    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        """Bind ``context``. A large text (or codebase) may travel through a file in the
        working folder, as the transport decides: no JSON framing of 100 MB."""
        async with self._lock:
            await self._live()
            await self._bind_context(value, codebase, rebinding=False)
            self.bound.context = (value, codebase)

    async def update_codebase(
        self, value: dict[str, str], changed: dict[str, str], removed: list[str]
    ) -> None:
        """See :meth:`Sandbox.update_codebase`: one ``update_codebase`` request on the
        channel when the difference is under :data:`DELTA_MAX_CHARS` characters and a
        codebase is bound; else, or when the kernel refuses it (an older kernel that lacks
        the op, a codebase other than the one the difference is from) or fails with it (it
        was restarted with the old codebase), the whole codebase is bound as
        :meth:`load_context` does."""
        async with self._lock:
            await self._live()
            bound = self.bound.context
            if (
                bound is not None
                and bound[1]
                and sum(map(len, changed.values())) + sum(map(len, removed)) < DELTA_MAX_CHARS
            ):
                request = {
                    "op": "update_codebase",
                    "changed": changed,
                    "removed": removed,
                    "files": len(value),
                }
                try:
                    await self._op(request)
                except (ValueError, KeyError, TypeError, SandboxError) as exc:
                    log.info("codebase update refused (%s); binding the whole codebase", exc)
                else:
                    self.bound.context = (value, True)
                    return
            await self._live()
            await self._bind_context(value, True, rebinding=False)
            self.bound.context = (value, True)

    def new_context_file(self) -> ContextFile | None:
        return self.transport.new_context_file()

    async def load_context_file(
        self, value: dict[str, str], file: ContextFile, index_at: int
    ) -> None:
        async with self._lock:
            try:
                await self._live()
                await self._op(context_file_request("codebase", file.kernel_path, index_at))
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(file.path)  # the kernel removed it, unless it failed first
            self.bound.context = (value, True)  # a restarted kernel gets it the usual way

    async def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        async with self._lock:
            await self._op(
                {"op": "define_tools", "callables": list(callables), "values": dict(values)}
            )
            self.bound.note_tools(callables, values)

    async def set_variable(self, name: str, value: Any) -> None:
        async with self._lock:
            await self._op({"op": "set_var", "name": name, "value": value})
            self.bound.note_variable(name, value)

    async def get_variable(self, name: str) -> Any:
        async with self._lock:
            return (await self._op({"op": "get_var", "name": name}))["value"]

    async def list_variables(self) -> list[VarInfo]:
        async with self._lock:
            result = await self._op({"op": "list_vars"})
            self.bound.user_names = [v["name"] for v in result]
            return [VarInfo(**v) for v in result]

    async def list_variables_page(
        self,
        offset: int = 0,
        limit: int = protocol.VARS_PAGE,
        match: str = "",
        *,
        by_name: bool = True,
    ) -> VarPage:
        check_page(offset, limit)
        request = {"op": "list_vars_page", "offset": offset, "limit": limit, "match": match}
        request["order"] = "name" if by_name else "defined"
        async with self._lock:
            out = await self._op(request)
        return VarPage.from_kernel(out, offset, limit)

    async def save_variables(
        self,
        names: list[str] | None,
        path: str,
        *,
        max_var_bytes: int,
        max_total_bytes: int,
        info_path: str | None = None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"op": "save_vars", "path": path, "info_path": info_path}
        request["names"] = None if names is None else list(names)
        request.update(max_var_bytes=int(max_var_bytes), max_total_bytes=int(max_total_bytes))
        async with self._lock:
            return await self._op(request)

    async def load_variables(
        self, path: str, names: list[str], *, only_missing: bool = False
    ) -> dict[str, Any]:
        request = {"op": "load_vars", "path": path, "names": list(names)}
        async with self._lock:
            out = await self._op({**request, "only_missing": bool(only_missing)})
            restored = out.get("restored") if isinstance(out, dict) else None
            self.bound.note_restored(restored, names)  # what a kill would lose now
            return out

    async def remove_file(self, path: str) -> None:
        async with self._lock:
            await self._op({"op": "remove_file", "path": path})

    async def upload(self, path: str, data: bytes) -> None:
        self._check_started()
        await self.transport.upload(path, bytes(data))

    async def download(self, path: str, *, max_bytes: int | None = None) -> bytes:
        self._check_started()
        return await self.transport.download(path, max_bytes)

    async def health(self) -> dict[str, Any]:
        kernel = self._kernel
        info: dict[str, Any] = {
            "backend": self.kind,
            "alive": kernel is not None and not kernel.dead and not self._closed,
            "pid": kernel.pid if kernel is not None else None,
            "running": self._running is not None,
            "restarts": self.restarts,
            "state": self.state.value,
        }
        if kernel is not None:
            facts = await kernel.facts()
            info["alive"] = info["alive"] and facts.pop("alive", True)
            info.update(facts)
        return info

    # -- internals ----------------------------------------------------------------------------

    def _check_started(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is None:
            raise SandboxError("the sandbox is not started")

    async def _spawn(self) -> KernelHandle:
        assert self._handler is not None
        return await self.transport.spawn(
            self._handler, self.max_output_chars, self.start_timeout_s
        )

    async def _live(self) -> KernelHandle:
        """The current kernel, restarted first if it died between operations (or a
        cancelled cell would not stop).

        Raises:
            SandboxError: closed, not started, or the restart failed.
        """
        self._check_started()
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            with contextlib.suppress(Exception):
                await stopping
        self._check_started()
        kernel = self._kernel
        assert kernel is not None
        if kernel.dead:
            if kernel.kill_reason == "interrupt":
                how = "an earlier, cancelled cell did not stop when interrupted"
            else:
                how = await self._why_dead(kernel, "it died: {}")
            log.warning("%s is gone (%s); restarting", kernel.label, how)
            await self._restart_noting(f"the kernel was restarted before this cell ({how})")
            assert self._kernel is not None
            kernel = self._kernel
        return kernel

    async def _why_dead(self, kernel: KernelHandle, died: str) -> str:
        """Why ``kernel`` died, as a phrase: the limit that killed it, else ``died``
        formatted with how it ended."""
        death = await kernel.death(self.limits)
        if death.limit is not None:
            return limit_phrase(death.limit, getattr(self.limits, death.limit))
        return died.format(kernel.protocol_error or death.how)

    async def _op_raw(self, obj: dict[str, Any]) -> Any:
        """One request on the current kernel, its ``result``.

        Raises:
            TimeoutError, KernelDied, or :func:`kernel_error`'s exception.
        """
        kernel = self._kernel
        if kernel is None:
            raise KernelDied()
        _, fut = kernel.request(obj)
        await kernel.drained()
        msg = await wait(fut, self.op_timeout_s)
        if not msg.get("ok"):
            raise kernel_error(msg)
        return msg.get("result")

    async def _op(self, obj: dict[str, Any]) -> Any:
        """One non-exec request on a live kernel, its result.

        Raises:
            SandboxError: it timed out or the kernel died (the kernel was restarted and the
                next cell is told), or the sandbox was closed meanwhile.
            KeyError / ValueError / TypeError: the kernel refused the request.
        """
        kernel = await self._live()
        try:
            return await self._op_raw(obj)
        except (TimeoutError, KernelDied) as exc:
            if self._closed:
                raise SandboxError("the sandbox was closed") from None
            if isinstance(exc, TimeoutError):
                what = f"timed out after {self.op_timeout_s:g} s"
            else:
                what = "failed: " + await self._why_dead(kernel, "the kernel died ({})")
            await self._restart_noting(f"the kernel was restarted after {obj['op']} {what}")
            raise SandboxError(f"{obj['op']} {what}; the kernel was restarted") from None

    async def _bind_context(self, value: Any, codebase: bool, *, rebinding: bool) -> None:
        request, cleanup = await self.transport.context_request(value, codebase)
        try:
            await (self._op_raw(request) if rebinding else self._op(request))
        finally:
            with contextlib.suppress(OSError):
                cleanup()

    async def _restart(self) -> None:
        """Replace the kernel with a fresh one and bind the context, tools and ``history``
        again (counted in ``restarts``; the user's variables are gone).

        Raises:
            SandboxError: the sandbox is closed, or the new kernel failed to start or bind.
        """
        old, self._kernel = self._kernel, None
        if old is not None:
            await old.kill()
        if self._closed:
            raise SandboxError("the sandbox is closed")
        self.state = SandboxState.RESTARTING
        self.restarts += 1
        self.bound.user_names = []
        self._kernel = await self._spawn()
        self.state = SandboxState.READY
        await self._rebind()

    async def _restart_noting(self, what: str) -> None:
        """:meth:`_restart`, and owe the next cell the notice ``[rlmd: <what>; variables
        lost: ...]`` (the user variables there were before the restart)."""
        lost = list(self.bound.user_names)
        await self._restart()
        self.bound.notice = (notice_text(what, lost), lost)

    async def _rebind(self) -> None:
        """Bind the context, tools and ``history`` again on a fresh kernel.

        Raises:
            SandboxError: the kernel timed out or died meanwhile.
        """
        bound = self.bound
        try:
            if bound.context is not None:
                await self._bind_context(*bound.context, rebinding=True)
            if bound.tool_callables or bound.tool_values:
                await self._op_raw(
                    {
                        "op": "define_tools",
                        "callables": bound.tool_callables,
                        "values": bound.tool_values,
                    }
                )
            if bound.history is not None:
                await self._op_raw({"op": "set_var", "name": "history", "value": bound.history[0]})
        except (TimeoutError, KernelDied) as exc:
            raise SandboxError(f"the restarted kernel failed while re-binding: {exc!r}") from None

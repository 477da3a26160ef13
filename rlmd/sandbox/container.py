"""The container backend: one warm docker container per sandbox with the kernel inside.

The container runs ``python3 -I /opt/rlmd/kernel/main.py --reap 1`` from a template image
(:mod:`rlmd.sandbox.images`; ``rlmd/kernel`` is bind-mounted read-only, so images need only
a ``python3``) as its PID 1 (whatever a cell leaves running is killed after it) and as uid
1000. The host speaks the kernel's framed channel over the container's attach socket
(:mod:`rlmd.sandbox._attach`): about 0.5 ms a round trip. Host calls (``llm_query`` ...) come back over the same channel; the container
never gets a network for them.

Hardening, on by default: no network (``network_mode="none"`` unless ``Limits.network``),
read-only root file system, a ``tmpfs`` ``/tmp``, a private host folder mounted at ``/work``
(the working folder, also used by :meth:`ContainerSandbox.upload` / ``download``), all
capabilities dropped, ``no-new-privileges``, and :class:`~rlmd.sandbox.limits.Limits`
enforced by the engine: memory (+ swap) and pids through cgroups, open files, file size and
CPU time as rlimits, CPU share as ``nano_cpus``.

A cell past its wall-clock time is interrupted (its host calls fail, then ``SIGINT``;
variables kept); if it does not stop within ``interrupt_grace_s`` (a C-level loop), the
container is removed and a fresh one started with the context, tools and ``history`` bound
again. A container that dies (the OOM killer, the CPU limit, ``os._exit``) is replaced the
same way, and the cell's error names the limit (``memory limit 512 MiB exceeded; the kernel
was restarted; variables lost: ...``).

A missing ``base`` image is built on first use when its root filesystem is already cached
(about 5 s); any other missing image raises :class:`SandboxError` naming the command
(``rlmd sandbox build NAME``). Containers are labelled with their owning process and orphans
are removed when a process starts its first container (:mod:`rlmd.sandbox.docker_host`).
From a process's second sandbox on, one spare container is kept started ahead, so a start
takes milliseconds (:mod:`rlmd.sandbox._launch`; ``spare_container=False`` opts out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from rlmd.sandbox import docker_host, images
from rlmd.sandbox._attach import KernelConnection, KernelDied
from rlmd.sandbox._common import (
    AFTER_RESTART,
    LimitAliases,
    join_names,
    note_stop,
    restarted_text,
    result_from_kernel,
    timed_out_text,
    wait,
    with_notice,
)
from rlmd.sandbox._files import open_regular, text_chunks, write_new
from rlmd.sandbox._launch import (
    CONTAINER_WORKDIR,
    SPARES,
    Created,
    LaunchSpec,
    close_spare_containers,
    discard,
    own,
    remove_container,
)
from rlmd.sandbox._ops import KernelOps, kernel_error
from rlmd.sandbox.base import CallHandler, CellResult, Sandbox, SandboxError
from rlmd.sandbox.limits import Limits, MiB, limit_message

log = logging.getLogger(__name__)

__all__ = ["ContainerSandbox", "close_spare_containers"]

DEFAULT_USER = "1000:1000"
FILE_CONTEXT_CHARS = 1 << 20
"""Contexts at least this large (characters) are passed through a file, not the channel."""

_UNSET: Any = object()

_ERRNO_LIMITS = (
    ("[Errno 27] File too large", "file_size_bytes"),
    ("[Errno 24] Too many open files", "open_files"),
    ("[Errno 11] Resource temporarily unavailable", "processes"),
)
"""Errors a cell sees when it reaches a limit enforced as an rlimit or a cgroup count."""


class _Box:
    """One container and the kernel connection over its attach socket."""

    def __init__(self, cid: str, conn: KernelConnection):
        self.id = cid
        self.conn = conn
        self.pid: int | None = None  # the kernel's pid inside the container
        self.kill_reason: str | None = None  # set when rlmd itself stopped the container


def _describe_state(state: dict[str, Any]) -> str:
    if not state:
        return "its container was removed"
    code = state.get("ExitCode")
    if isinstance(code, int) and code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    if state.get("Running"):
        return "its channel closed"
    return f"exit code {code}"


class ContainerSandbox(KernelOps, LimitAliases, Sandbox):
    """The kernel in a warm, hardened docker container (see the module docstring).

    Args:
        template: the sandbox template (``sandboxes/<template>/Dockerfile``), run as image
            ``rlmd/sandbox-<template>:latest``.
        limits: a :class:`Limits` (or a dict of its fields); default ``Limits()``.
        timeout_s: alias of ``limits.wall_s`` (seconds per cell; ``None``: no limit).
        op_timeout_s: seconds for the other operations (binding, variables).
        start_timeout_s: seconds the container's kernel may take to say hello.
        max_output_chars: alias of ``limits.output_bytes`` (cap per stream per cell).
        cpus: CPU share (``nano_cpus``; ``None``: no cap).
        tmp_bytes: size of the ``/tmp`` tmpfs (bytes; counted against the memory limit).
        interrupt_grace_s: how long a timed-out or interrupted cell may take to stop after
            ``SIGINT`` before the container is replaced.
        user: ``uid:gid`` the kernel runs as.
        python: the interpreter inside the image.
        spare_container: take the spare container kept ready for sandboxes like this one
            and keep one for the next (see :mod:`rlmd.sandbox._launch`).

    Raises (from :meth:`start`): :class:`SandboxError` when the engine is unreachable, the
    image is missing and cannot be built quickly, or the kernel does not start.
    """

    kind = "container"

    def __init__(
        self,
        *,
        template: str = "base",
        limits: Limits | dict[str, Any] | None = None,
        timeout_s: float | None | object = _UNSET,
        op_timeout_s: float = 120.0,
        start_timeout_s: float = 60.0,
        max_output_chars: int | object = _UNSET,
        cpus: float | None = 1.0,
        tmp_bytes: int = 256 * MiB,
        interrupt_grace_s: float = 2.0,
        user: str = DEFAULT_USER,
        python: str = "python3",
        spare_container: bool = True,
    ):
        self.template = template
        self.image = images.image_name(template)
        limits = limits if isinstance(limits, Limits) else Limits.from_dict(limits)
        overrides: dict[str, Any] = {}
        if timeout_s is not _UNSET:
            overrides["wall_s"] = timeout_s
        if max_output_chars is not _UNSET:
            overrides["output_bytes"] = int(max_output_chars)  # type: ignore[call-overload]
        self.limits = dataclasses.replace(limits, **overrides) if overrides else limits
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        self.cpus = cpus
        self.tmp_bytes = int(tmp_bytes)
        self.interrupt_grace_s = interrupt_grace_s
        self.user = user
        self.python = python
        self.restarts = 0
        self._handler: CallHandler | None = None
        self._box: _Box | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._workdir: str | None = None
        self._spec: LaunchSpec | None = None
        self.spare_container = spare_container
        self._image_id: str | None = None
        self._effective: dict[str, Any] = {}
        self._engine: dict[str, Any] = {}
        self._running: tuple[_Box, asyncio.Future[dict[str, Any]]] | None = None
        self._interrupted = False  # interrupt() was called on the running cell
        self._stopping: asyncio.Future[Any] | None = None
        self._init_rebind_state()

    # -- availability ---------------------------------------------------------------------

    @staticmethod
    def unavailable_reason() -> str | None:
        """``None`` if a container sandbox can start here, else why not: no docker engine
        answers, or the ``base`` image is not built and cannot be (no cached root file
        system and no debootstrap / not root)."""
        reason = docker_host.engine_unavailable_reason()
        if reason is not None:
            return reason
        try:
            engine = docker_host.client()
            if images.find_image(engine, images.image_name("base")) is not None:
                return None
            if images.find_image(engine, images.ROOTFS_IMAGE) is not None:
                return None
        except docker_host.ENGINE_ERRORS as exc:
            return f"the docker engine failed: {exc}"
        missing = images.rootfs_unavailable_reason()
        if missing is not None:
            return f"{missing}; or build the image elsewhere: rlmd sandbox build base"
        return None

    # -- public -----------------------------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
        lim = self.limits
        return {
            "backend": "container",
            "isolated": True,
            "process": True,
            "container": True,
            "engine": f"docker {self._engine.get('version', '')}".strip(),
            "runtime": self._engine.get("runtime"),
            "seccomp": self._engine.get("seccomp"),
            "template": self.template,
            "image": self.image,
            "image_id": self._image_id,
            "container_id": self._box.id[:12] if self._box else None,
            "network": "bridge" if lim.network else "none",
            "filesystem": "container",
            "read_only_root": True,
            "env": "clean",
            "user": self.user,
            "cap_drop": ["ALL"],
            "no_new_privileges": True,
            "limits": lim.to_dict(),
            "background_processes": "killed after each cell",
            "enforced": {
                "wall_s": "host timer, SIGINT, then a new container" if lim.wall_s else None,
                "cpu_s": "RLIMIT_CPU" if lim.cpu_s else None,
                "memory_bytes": "cgroup memory, no swap" if lim.memory_bytes else None,
                "processes": "cgroup pids" if lim.processes else None,
                "open_files": "RLIMIT_NOFILE" if lim.open_files else None,
                "file_size_bytes": "RLIMIT_FSIZE" if lim.file_size_bytes else None,
                "output_bytes": "host cap" if lim.output_bytes else None,
                "network": "bridge network" if lim.network else "no network (network_mode none)",
            },
            "cpus": self.cpus,
            "effective": dict(self._effective),
        }

    @property
    def pid(self) -> int | None:
        """The kernel's pid inside the current container (changes on restart)."""
        return self._box.pid if self._box else None

    @property
    def container_id(self) -> str | None:
        """The current container's full id (changes on restart)."""
        return self._box.id if self._box else None

    async def start(self, handler: CallHandler) -> None:
        """Start the container and its kernel. On a started sandbox: keep the REPL and serve
        calls with ``handler`` from now on."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._box is not None:
            self._handler = handler
            self._box.conn.handler = handler
            return
        self._handler = handler
        try:
            self._spec = await asyncio.to_thread(self._prepare)
            self._box = await self._spawn()
        except BaseException:
            await self.close()
            raise

    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        async with self._lock:
            await self._live_box()
            request, path = await self._context_request(value, codebase)
            try:
                await self._op(request)
            finally:
                if path is not None:
                    path.unlink(missing_ok=True)
            self._context = (value, codebase)

    async def execute(self, code: str, *, timeout_s: float | None = None) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            t0 = time.perf_counter()
            box = await self._live_box()
            notice, self._notice = self._notice, None
            conn = box.conn
            try:
                rid, fut = conn.request(
                    {"op": "exec", "code": code, "max_output": self.max_output_chars}
                )
            except KernelDied:
                return with_notice(await self._died(box, t0), notice)
            self._running = (box, fut)
            self._interrupted = False
            try:
                msg = await wait(asyncio.shield(fut), timeout)
            except asyncio.CancelledError:
                # Nobody waits for this cell any more: interrupt it (or replace the container);
                # the next operation waits for that first.
                self._stopping = asyncio.ensure_future(self._stop_cell(box, fut))
                raise
            except TimeoutError:
                assert timeout is not None
                if await self._stop_cell(box, fut):
                    result = await self._cell_result(box, rid, fut.result(), t0)
                    note_stop(result, timeout, timed_out=True, interrupted=False)
                    return with_notice(result, notice)
                partial = conn.stderr_now()
                lost = list(self._user_names)
                await self._restart()
                return with_notice(
                    CellResult(
                        stderr=partial,
                        error=restarted_text(timed_out_text(timeout, stopped=False), lost),
                        timed_out=True,
                        kernel_restarted=True,
                        lost_variables=lost,
                        duration_s=time.perf_counter() - t0,
                    ),
                    notice,
                )
            except KernelDied:
                return with_notice(await self._died(box, t0), notice)
            finally:
                self._running = None
            result = await self._cell_result(box, rid, msg, t0)
            note_stop(result, timeout, timed_out=False, interrupted=self._interrupted)
            return with_notice(result, notice)

    async def interrupt(self) -> bool:
        """``KeyboardInterrupt`` in the running cell (``SIGINT`` to the kernel; host calls it
        waits on fail first); a cell that does not stop within ``interrupt_grace_s`` gets
        its container replaced. Returns ``True`` if a cell was running."""
        running = self._running
        if running is None or running[1].done():
            return False
        self._interrupted = True
        await self._stop_cell(*running)
        return True

    async def restart(self) -> list[str]:
        """A fresh container and kernel, with context, tools and ``history`` bound again.

        Returns: the user variables that were lost."""
        async with self._lock:
            if self._closed or self._box is None:
                raise SandboxError("the sandbox is not running")
            lost = list(self._user_names)
            await self._restart()
            return lost

    async def upload(self, path: str, data: bytes) -> None:
        target = self._host_path(path)
        await asyncio.to_thread(self._write_file, target, bytes(data))

    async def download(self, path: str) -> bytes:
        target = self._host_path(path)
        if not target.is_file():
            raise FileNotFoundError(f"no such file in the sandbox: {path}")

        def read() -> bytes:  # no symlink swapped in since, no FIFO
            with os.fdopen(open_regular(str(target), os.O_RDONLY), "rb") as f:
                return f.read()

        return await asyncio.to_thread(read)

    async def health(self) -> dict[str, Any]:
        box = self._box
        info: dict[str, Any] = {
            "backend": "container",
            "alive": bool(box and not box.conn.dead and not self._closed),
            "pid": box.pid if box else None,
            "running": self._running is not None,
            "restarts": self.restarts,
            "container_id": box.id[:12] if box else None,
            "status": None,
        }
        if box is not None:
            try:
                attrs = await asyncio.to_thread(docker_host.client().api.inspect_container, box.id)
                info["status"] = attrs["State"]["Status"]
                info["alive"] = info["alive"] and bool(attrs["State"]["Running"])
            except docker_host.ENGINE_ERRORS as exc:
                info["status"] = f"unknown ({type(exc).__name__})"
        return info

    async def close(self) -> None:
        self._closed = True
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            with contextlib.suppress(Exception):
                await stopping
        box, self._box = self._box, None
        if box is not None:
            await self._remove(box)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- containers -------------------------------------------------------------------------

    def _prepare(self) -> LaunchSpec:
        """Reap orphans and make sure the image exists (blocking); the launch spec."""
        try:
            docker_host.reap_orphans_once()
            engine = docker_host.client()
            image = images.find_image(engine, self.image)
            if image is None:
                image = self._build_missing(engine)
        except docker_host.ENGINE_ERRORS as exc:
            raise SandboxError(f"the docker engine is unreachable: {exc}") from None
        self._image_id = image.id
        with contextlib.suppress(*docker_host.ENGINE_ERRORS):
            self._engine = docker_host.engine_facts()
        return LaunchSpec(
            image=self.image,
            image_id=image.id,
            template=self.template,
            user=self.user,
            python=self.python,
            limits=self.limits,
            cpus=self.cpus,
            tmp_bytes=self.tmp_bytes,
        )

    def _build_missing(self, engine: Any) -> Any:
        quick = self.template == "base" and (
            images.find_image(engine, images.ROOTFS_IMAGE) is not None
            or images.rootfs_tarball().is_file()
        )
        if not quick:
            raise SandboxError(
                f"the sandbox image {self.image} is not built; run: rlmd sandbox build "
                f"{self.template}"
            )
        log.warning("building the missing sandbox image %s (a few seconds)", self.image)
        return images.build_template(engine, self.template)

    def _create(self) -> Created:
        """A spare container if one is ready (first start only), else a new one on this
        sandbox's working folder (blocking)."""
        assert self._spec is not None
        if self._workdir is None and self.spare_container:
            spare = SPARES.take(self._spec)
            if spare is not None:
                return spare
        return self._spec.create(self._workdir)

    async def _spawn(self) -> _Box:
        """A started container with a kernel that said hello."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(asyncio.to_thread(self._create))
        try:
            created = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._discard_created)
            raise
        except docker_host.ENGINE_ERRORS as exc:
            raise SandboxError(f"cannot start the sandbox container: {exc}") from None
        self._workdir = created.workdir
        host_config = created.host_config
        self._effective = {
            "network_mode": host_config.get("NetworkMode"),
            "read_only": host_config.get("ReadonlyRootfs"),
            "cap_drop": host_config.get("CapDrop"),
            "security_opt": host_config.get("SecurityOpt"),
            "memory_bytes": host_config.get("Memory") or None,
            "pids_limit": host_config.get("PidsLimit"),
            "nano_cpus": host_config.get("NanoCpus") or None,
            "init": host_config.get("Init"),
            "log_driver": (host_config.get("LogConfig") or {}).get("Type"),
        }
        assert self._handler is not None
        conn = KernelConnection(loop, self._handler, self.max_output_chars)
        box = _Box(created.cid, conn)
        try:
            created.sock.setblocking(False)
            await loop.create_connection(lambda: conn, sock=created.sock)
            hello = await asyncio.wait_for(asyncio.shield(conn.hello), self.start_timeout_s)
        except (TimeoutError, KernelDied, OSError) as exc:
            detail = conn.stderr_now().strip()
            await self._remove(box)
            what = "did not start in time" if isinstance(exc, TimeoutError) else "exited"
            raise SandboxError(
                f"the kernel in the container {what}" + (f":\n{detail[-4000:]}" if detail else "")
            ) from None
        except BaseException:
            await self._remove(box)
            raise
        box.pid = hello.get("pid")
        return box

    def _discard_created(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is None:
            created = task.result()
            keep = created.workdir == self._workdir
            asyncio.ensure_future(asyncio.to_thread(discard, created, keep_workdir=keep))

    async def _remove(self, box: _Box) -> None:
        """Drop the channel and remove the container (killing it)."""
        box.conn.abort()
        await asyncio.shield(asyncio.to_thread(remove_container, box.id))

    @staticmethod
    def _exit_state(cid: str) -> dict[str, Any]:
        """The container's ``State`` once it stopped (waiting up to 3 s)."""
        try:
            api = docker_host.client().api
            # A hung wait raises ReadTimeout or ConnectionError (see the notes); a container
            # removed from outside raises NotFound: both leave an empty state.
            with contextlib.suppress(*docker_host.ENGINE_ERRORS):
                api.wait(cid, timeout=3)
            return api.inspect_container(cid)["State"]
        except docker_host.ENGINE_ERRORS:
            return {}

    async def _stop_cell(self, box: _Box, fut: asyncio.Future[Any]) -> bool:
        """Stop the running cell: fail its host calls and send ``SIGINT`` (the kernel raises
        ``KeyboardInterrupt`` in a running cell only, and holds it while a frame is being
        read), then replace the container if the cell has not ended after
        ``interrupt_grace_s``. Returns ``True`` if the kernel survived (``fut`` then holds
        the cell's result)."""
        conn = box.conn
        if not fut.done() and not conn.dead:
            conn.cancel_calls()
            try:
                await asyncio.to_thread(docker_host.client().api.kill, box.id, signal="SIGINT")
            except docker_host.ENGINE_ERRORS as exc:
                log.warning("could not interrupt container %s: %s", box.id[:12], exc)
            with contextlib.suppress(TimeoutError, KernelDied):
                await wait(asyncio.shield(fut), self.interrupt_grace_s)
        if fut.done() and fut.exception() is None:
            return True
        box.kill_reason = "the cell did not stop when interrupted"
        await self._remove(box)
        return False

    async def _cell_result(self, box: _Box, rid: int, msg: dict[str, Any], t0: float) -> CellResult:
        if not msg.get("ok"):
            raise self._error(msg)
        res = msg["result"]
        fd_text = await box.conn.cell_stderr(rid, res, 5.0)
        self._user_names = list(res.get("names") or [])
        result = result_from_kernel(res, time.perf_counter() - t0, fd_text)
        if result.error:
            result.error += self._limit_hint(result.error)
        return result

    def _limit_hint(self, error: str) -> str:
        """A note naming the limit an ``OSError`` in ``error`` most likely hit, else ``""``."""
        for errno_text, name in _ERRNO_LIMITS:
            value = getattr(self.limits, name)
            if value and errno_text in error:
                return f"\n[rlmd: probably the sandbox's {limit_message(name, value, restarted=False)}]\n"
        return ""

    async def _death(self, box: _Box) -> tuple[str, bool]:
        """Why ``box``'s kernel died, as ``(text, limit_exceeded)``; ``text`` is a phrase
        ("killed by SIGKILL") or, for an exceeded limit, the limit's name and value."""
        if box.kill_reason is not None:
            return box.kill_reason, False
        state = await asyncio.to_thread(self._exit_state, box.id)
        lim = self.limits
        if state.get("OOMKilled") and lim.memory_bytes:
            return "memory_bytes", True
        if lim.cpu_s and state.get("ExitCode") in (128 + signal.SIGXCPU, 128 + signal.SIGKILL):
            # RLIMIT_CPU: SIGXCPU at the soft limit, which the kernel as PID 1 does not get,
            # then SIGKILL at the hard one, 1 s later. rlmd's own kills are told apart by
            # kill_reason and the OOM killer by OOMKilled; only a kill from outside rlmd
            # could be mistaken for this.
            return "cpu_s", True
        return _describe_state(state), False

    def _limit_text(self, name: str, lost: list[str]) -> str:
        value = getattr(self.limits, name)
        return limit_message(name, value, restarted=True, lost=lost)

    async def _died(self, box: _Box, t0: float) -> CellResult:
        """The result of a cell whose kernel died; the kernel is restarted."""
        if self._closed:
            raise SandboxError("the sandbox was closed while the cell ran")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(box.conn.closed), 1.0)
        partial = box.conn.stderr_now()
        lost = list(self._user_names)
        why, is_limit = await self._death(box)
        await self._restart()
        if is_limit:
            error = f"{self._limit_text(why, lost)} {AFTER_RESTART}"
        else:
            error = (
                f"the kernel died while running the cell ({why}); it was restarted; "
                f"variables lost: {join_names(lost)}. {AFTER_RESTART}"
            )
        return CellResult(
            stderr=partial,
            error=error,
            kernel_restarted=True,
            lost_variables=lost,
            duration_s=time.perf_counter() - t0,
        )

    async def _drop_kernel(self) -> None:
        old, self._box = self._box, None
        if old is not None:
            await self._remove(old)

    async def _new_kernel(self) -> None:
        self._box = await self._spawn()  # a fresh container

    async def _bind_context_raw(self, value: Any, codebase: bool) -> None:
        request, path = await self._context_request(value, codebase)
        try:
            await self._op_raw(request)
        finally:
            if path is not None:
                path.unlink(missing_ok=True)

    async def _live_box(self) -> _Box:
        """The current container, replaced first if its kernel died between operations."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            with contextlib.suppress(Exception):
                await stopping
        if self._box is None:
            raise SandboxError("the sandbox is not started")
        box = self._box
        if box.conn.dead:
            lost = list(self._user_names)
            why, is_limit = await self._death(box)
            log.warning("container kernel %s died between cells (%s)", box.id[:12], why)
            await self._restart()
            text = (
                self._limit_text(why, lost)
                if is_limit
                else (
                    f"the kernel died before this cell ({why}) and was restarted; "
                    f"variables lost: {join_names(lost)}"
                )
            )
            self._notice = (f"[rlmd: {text.rstrip('.')}]\n", lost)
            assert self._box is not None
            box = self._box
        return box

    async def _live(self) -> _Box:
        return await self._live_box()

    async def _op_died(self, box: _Box) -> str:
        why, is_limit = await self._death(box)
        return self._limit_text(why, list(self._user_names)) if is_limit else why

    async def _op_raw(self, obj: dict[str, Any]) -> Any:
        assert self._box is not None
        conn = self._box.conn
        _, fut = conn.request(obj)
        await conn.drained()
        msg = await wait(fut, self.op_timeout_s)
        if not msg.get("ok"):
            raise self._error(msg)
        return msg.get("result")

    # -- files ------------------------------------------------------------------------------

    async def _context_request(
        self, value: Any, codebase: bool
    ) -> tuple[dict[str, Any], Path | None]:
        """The request that binds ``value``: a large text or codebase goes through a file in
        the mounted working folder (100 MB of text: ~0.5 s instead of ~2 s through the
        channel), with its host path returned for removal; anything else inline."""
        request: dict[str, Any] = {"op": "bind_context", "value": value, "codebase": codebase}
        if isinstance(value, str) and not codebase:
            fmt, size = "text", len(value)
        elif codebase and isinstance(value, dict):
            fmt, size = "json", sum(len(v) for v in value.values() if isinstance(v, str))
        else:
            return request, None
        if size < FILE_CONTEXT_CHARS or self._workdir is None:
            return request, None
        folder = os.path.join(self._workdir, "work")

        def write() -> Path:
            # A fresh random name: model code can plant a symlink or FIFO at a fixed one
            # (the hostile fresh-user test overwrote a root-owned host file that way).
            if fmt == "text":  # surrogatepass: the kernel decodes it the same way
                chunks = text_chunks(value)
            else:  # ASCII escapes: any str survives
                chunks = (part.encode("ascii") for part in json.JSONEncoder().iterencode(value))
            written = write_new(folder, f".rlmd-context-{fmt}-", chunks)
            own(written, self.user)
            return Path(written)

        path = await asyncio.to_thread(write)
        inside = f"{CONTAINER_WORKDIR}/{path.name}"
        if fmt == "text":  # the kernel decodes it from a memory map and deletes the file
            return {"op": "bind_context_file", "path": inside}, path
        return {"op": "bind_context", "path": inside, "format": "json", "codebase": True}, path

    def _host_path(self, path: str) -> Path:
        """The host path of ``path`` (relative, or absolute under ``/work``) in the working
        folder; symlinks are resolved on the host, so none can lead out.

        Raises:
            ValueError: ``path`` leads out of the working folder. SandboxError: not started.
        """
        if self._workdir is None:
            raise SandboxError("the sandbox is not started")
        root = Path(self._workdir, "work").resolve()
        rel = path
        if path.startswith(CONTAINER_WORKDIR + "/"):
            rel = path[len(CONTAINER_WORKDIR) + 1 :]
        if os.path.isabs(rel):
            raise ValueError(f"path {path!r} is outside the sandbox's working folder")
        target = (root / rel).resolve()
        if target == root or root not in target.parents:
            raise ValueError(f"path {path!r} is outside the sandbox's working folder")
        return target

    def _write_file(self, target: Path, data: bytes) -> None:
        root = Path(self._workdir or "", "work").resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with os.fdopen(open_regular(str(target), flags), "wb") as f:  # no symlink, no FIFO
            f.write(data)
        for part in [target, *target.parents]:
            if part == root:
                break
            own(str(part), self.user)

    _error = staticmethod(kernel_error)

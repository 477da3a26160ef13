"""The container transport: one warm docker container per sandbox with the kernel inside.

The container runs ``python3 -I /opt/rlmd/kernel/main.py --reap 1`` from a template image
(:mod:`rlmd.sandbox.docker.images`; ``rlmd/kernel`` is bind-mounted read-only, so images
need only a ``python3``) as its PID 1 (whatever a cell leaves running is killed after it) and
as uid 1000. The host speaks the kernel's framed channel over the container's attach socket
(:mod:`rlmd.sandbox.docker.attach`): about 0.5 ms a round trip. Host calls (``llm_query``
...) come back over the same channel; the container never gets a network for them.

Hardening, on by default: no network (``network_mode="none"`` unless ``Limits.network``),
read-only root file system, a ``tmpfs`` ``/tmp``, a private host folder mounted at ``/work``
(the working folder, also used by ``upload`` / ``download``), all
capabilities dropped, ``no-new-privileges``, and :class:`~rlmd.sandbox.limits.Limits`
enforced by the engine: memory (+ swap) and pids through cgroups, open files, file size and
CPU time as rlimits, CPU share as ``nano_cpus``.

An interrupt is ``SIGINT`` sent through the engine; a kill removes the container, and the
session's restart is a fresh container on the same working folder. A container that dies
is asked why (the OOM killer, the CPU limit, its exit code).

A missing ``base`` image is built on first use when its root filesystem is already cached
(about 5 s); any other missing image raises :class:`SandboxError` naming the command
(``rlmd sandbox build NAME``). Containers are labelled with their owning process and orphans
are removed when a process starts its first container (:mod:`rlmd.sandbox.docker.engine`).
From a process's second sandbox on, one spare container is kept started ahead, so a start
takes milliseconds (:mod:`rlmd.sandbox.docker.launch`; ``spare_container=False`` opts out).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from pathlib import Path
from typing import Any

from rlmd.sandbox import workdirs
from rlmd.sandbox.base import CallHandler, SandboxError
from rlmd.sandbox.docker import engine as docker_host
from rlmd.sandbox.docker import images
from rlmd.sandbox.docker.attach import KernelConnection
from rlmd.sandbox.docker.launch import (
    CONTAINER_WORKDIR,
    SPARES,
    Created,
    LaunchSpec,
    discard,
    own,
    remove_container,
)
from rlmd.sandbox.files import (
    ContextFile,
    context_file,
    context_file_request,
    download_file,
    open_new,
    upload_file,
    write_new,
)
from rlmd.sandbox.limits import Limits, MiB
from rlmd.sandbox.transport import Cleanup, Death, KernelHandle, Transport

log = logging.getLogger(__name__)

DEFAULT_USER = "1000:1000"


def _nothing() -> None:
    return None


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


class ContainerKernel(KernelConnection):
    """The kernel in one container, over the container's attach socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int, cid: str):
        super().__init__(loop, handler, cap)
        self.id = cid

    async def interrupt(self) -> None:
        """Fail the host calls in flight, then ``SIGINT`` through the engine (the kernel
        raises ``KeyboardInterrupt`` in a running cell only, and holds it while a frame is
        being read)."""
        self.cancel_calls()
        try:
            await asyncio.to_thread(docker_host.client().api.kill, self.id, signal="SIGINT")
        except docker_host.ENGINE_ERRORS as exc:
            log.warning("could not interrupt container %s: %s", self.id[:12], exc)

    async def kill(self) -> None:
        """Drop the channel and remove the container (killing it)."""
        self.abort()
        await asyncio.shield(asyncio.to_thread(remove_container, self.id))

    async def death(self, limits: Limits) -> Death:
        """What the engine says: the OOM killer, the CPU limit, or its exit."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.closed), 1.0)
        if self.kill_reason is not None:
            return Death("the cell did not stop when interrupted")
        state = await asyncio.to_thread(_exit_state, self.id)
        if state.get("OOMKilled") and limits.memory_bytes:
            return Death("killed by the OOM killer", "memory_bytes")
        if limits.cpu_s and state.get("ExitCode") in (128 + signal.SIGXCPU, 128 + signal.SIGKILL):
            # RLIMIT_CPU: SIGXCPU at the soft limit, which the kernel as PID 1 does not get,
            # then SIGKILL at the hard one, 1 s later. rlmd's own kills are told apart by
            # kill_reason and the OOM killer by OOMKilled; only a kill from outside rlmd
            # could be mistaken for this.
            return Death(_describe_state(state), "cpu_s")
        return Death(_describe_state(state))

    async def facts(self) -> dict[str, Any]:
        info: dict[str, Any] = {"container_id": self.id[:12], "status": None}
        try:
            attrs = await asyncio.to_thread(docker_host.client().api.inspect_container, self.id)
            info["status"] = attrs["State"]["Status"]
            info["alive"] = bool(attrs["State"]["Running"])
        except docker_host.ENGINE_ERRORS as exc:
            info["status"] = f"unknown ({type(exc).__name__})"
        return info


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


class ContainerTransport(Transport):
    """Kernels in warm, hardened docker containers sharing one working folder (see the
    module docstring).

    Args:
        limits: resource limits.
        template: the sandbox template (``sandboxes/<template>/Dockerfile``), run as image
            ``rlmd/sandbox-<template>:latest``.
        cpus: CPU share (``nano_cpus``; ``None``: no cap).
        tmp_bytes: size of the ``/tmp`` tmpfs (bytes; counted against the memory limit).
        user: ``uid:gid`` the kernel runs as.
        python: the interpreter inside the image.
        spare_container: take the spare container kept ready for sandboxes like this one
            and keep one for the next (see :mod:`rlmd.sandbox.docker.launch`).

    Raises (from :meth:`spawn`): :class:`SandboxError` when the engine is unreachable, the
    image is missing and cannot be built quickly, or the kernel does not start.
    """

    kind = "container"
    interrupt_grace_s = 2.0
    start_timeout_s = 60.0

    def __init__(
        self,
        *,
        limits: Limits,
        template: str = "base",
        cpus: float | None = 1.0,
        tmp_bytes: int = 256 * MiB,
        user: str = DEFAULT_USER,
        python: str = "python3",
        spare_container: bool = True,
    ):
        self.limits = limits
        self.template = template
        self.image = images.image_name(template)
        self.cpus = cpus
        self.tmp_bytes = int(tmp_bytes)
        self.user = user
        self.python = python
        self.spare_container = spare_container
        self._workdir: str | None = None
        self._spec: LaunchSpec | None = None
        self._image_id: str | None = None
        self._effective: dict[str, Any] = {}
        self._engine: dict[str, Any] = {}

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

    @property
    def workdir(self) -> str | None:
        """The host folder whose ``work/`` is the container's ``/work``."""
        return self._workdir

    def isolation(self, kernel: KernelHandle | None) -> dict[str, Any]:
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
            "container_id": kernel.id[:12] if isinstance(kernel, ContainerKernel) else None,
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
                "disk_bytes": workdirs.enforcement(lim.disk_bytes),
                "output_bytes": "host cap" if lim.output_bytes else None,
                "network": "bridge network" if lim.network else "no network (network_mode none)",
            },
            "cpus": self.cpus,
            "effective": dict(self._effective),
        }

    async def spawn(self, handler: CallHandler, cap: int, start_timeout_s: float) -> KernelHandle:
        """A started container with a kernel that said hello (the first: the image checked
        or built, orphans reaped, a spare taken if one is ready)."""
        if self._spec is None:
            self._spec = await asyncio.to_thread(self._prepare)
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
        kernel = ContainerKernel(loop, handler, cap, created.cid)
        try:
            created.sock.setblocking(False)
            await loop.create_connection(lambda: kernel, sock=created.sock)
        except OSError:
            await kernel.kill()
            raise SandboxError("the kernel in the container exited") from None
        except BaseException:
            await kernel.kill()
            raise
        try:
            hello = await kernel.wait_hello(start_timeout_s, "the kernel in the container")
        except asyncio.CancelledError:
            await kernel.kill()
            raise
        kernel.pid = hello.get("pid")
        return kernel

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

    def _discard_created(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is None:
            created = task.result()
            keep = created.workdir == self._workdir
            asyncio.ensure_future(asyncio.to_thread(discard, created, keep_workdir=keep))

    async def close(self) -> None:
        if self._workdir is not None:
            workdirs.remove(self._workdir)
            self._workdir = None

    # -- files ------------------------------------------------------------------------------

    async def context_request(self, value: Any, codebase: bool) -> tuple[dict[str, Any], Cleanup]:
        """The request that binds ``value``: a large text or codebase goes through a file in
        the mounted working folder (100 MB of text: ~0.5 s instead of ~2 s through the
        channel), with its host path returned for removal; anything else inline."""
        request: dict[str, Any] = {"op": "bind_context", "value": value, "codebase": codebase}
        picked = context_file(value, codebase)
        if picked is None or self._workdir is None:
            return request, _nothing
        fmt, chunks = picked
        folder = os.path.join(self._workdir, "work")

        def write() -> Path:
            # A fresh random name: model code can plant a symlink or FIFO at a fixed one
            # (the hostile fresh-user test overwrote a root-owned host file that way).
            written = write_new(folder, f".rlmd-context-{fmt}-", chunks)
            own(written, self.user)
            return Path(written)

        try:
            path = await asyncio.to_thread(write)
        except OSError as exc:  # write_new left no file behind (a full disk, as the process
            # backend's REPL folder can be): the context goes in one frame, as a small one does
            log.info("context file not written (%s); sending the context in one frame", exc)
            return request, _nothing
        return context_file_request(fmt, f"{CONTAINER_WORKDIR}/{path.name}"), path.unlink

    def new_context_file(self) -> ContextFile | None:
        workdir = self._workdir
        if workdir is None:
            return None
        file, path = open_new(os.path.join(workdir, "work"), ".rlmd-context-codebase-")
        own(file.fileno(), self.user)  # logs, never raises
        return ContextFile(file, path, f"{CONTAINER_WORKDIR}/{os.path.basename(path)}")

    def _host_folder(self, path: str) -> tuple[str | None, str]:
        """The host folder behind ``/work`` and ``path`` relative to it (``path`` may be
        relative or absolute under ``/work``); :mod:`rlmd.sandbox.files` resolves it there
        without following any symlink.

        Raises:
            ValueError: ``path`` is absolute outside ``/work``.
        """
        rel = path
        if isinstance(path, str) and path.startswith(CONTAINER_WORKDIR + "/"):
            rel = path[len(CONTAINER_WORKDIR) + 1 :]
        if isinstance(rel, str) and os.path.isabs(rel):
            raise ValueError(f"path {path!r} is outside the sandbox's working folder")
        folder = None if self._workdir is None else os.path.join(self._workdir, "work")
        return folder, rel

    async def upload(self, path: str, data: bytes) -> None:
        folder, rel = self._host_folder(path)
        own_fd = functools.partial(own, user=self.user)
        await asyncio.to_thread(upload_file, folder, rel, data, own_fd)

    async def download(self, path: str, max_bytes: int | None = None) -> bytes:
        folder, rel = self._host_folder(path)
        return await asyncio.to_thread(download_file, folder, rel, max_bytes)

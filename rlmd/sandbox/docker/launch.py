"""Creating sandbox containers (blocking docker calls, run from worker threads) and keeping
one spare started ahead.

A container costs about half a second to create and start, and every run and child run
starts one. So, as the subprocess backend does with its kernels, once a process has started
a second container from the same :class:`LaunchSpec` it keeps one spare container started
ahead (:data:`SPARES`, a :class:`~rlmd.sandbox.spares.SparePool`): the next start takes it
(its kernel has already said hello into the socket's buffer) and a new spare is made in a
background thread. Spares are removed at exit or by :func:`close_spare_containers`;
``create_sandbox("container", spare_container=False)`` neither takes nor keeps one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import resource
import socket
from dataclasses import dataclass
from typing import Any

import docker.errors
import docker.types

from rlmd.kernel import KERNEL_DIR
from rlmd.sandbox import workdirs
from rlmd.sandbox.docker import engine as docker_host
from rlmd.sandbox.docker import images
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.spares import SparePool

log = logging.getLogger(__name__)

CONTAINER_KERNEL = "/opt/rlmd/kernel"
CONTAINER_WORKDIR = "/work"

_LIVE: set[str] = set()
"""Ids of containers this process made and has not removed yet (removed at exit)."""


@dataclass
class Created:
    """A started container: its id, our attach socket (the kernel's channel), the
    ``HostConfig`` the engine applied, and the host folder whose ``work/`` is its ``/work``."""

    cid: str
    sock: socket.socket
    host_config: dict[str, Any]
    workdir: str


def own(path: str | int, user: str) -> None:
    """Give ``path`` (or an open descriptor) to the container user ``uid:gid`` (as root),
    else make it writable."""
    uid, _, gid = user.partition(":")
    try:
        if os.geteuid() == 0 and uid.isdigit():
            os.chown(path, int(uid), int(gid or uid))
        else:
            os.chmod(path, 0o777)
    except OSError as exc:
        log.warning("cannot hand %s to the sandbox user: %s", path, exc)


def remove_container(cid: str) -> None:
    """Kill and remove container ``cid`` (blocking; engine errors are logged)."""
    try:
        docker_host.client().api.remove_container(cid, force=True)
    except docker.errors.NotFound:
        pass
    except docker_host.ENGINE_ERRORS as exc:
        log.warning("could not remove sandbox container %s: %s", cid[:12], exc)
        return
    _LIVE.discard(cid)


def discard(created: Created, *, keep_workdir: bool = False) -> None:
    """Close the socket, remove the container and (unless ``keep_workdir``) its folder."""
    with contextlib.suppress(OSError):
        created.sock.close()
    remove_container(created.cid)
    if not keep_workdir:
        workdirs.remove(created.workdir)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a container is made from; containers from equal specs are
    interchangeable (their working folders aside)."""

    image: str
    image_id: str
    template: str
    user: str
    python: str
    limits: Limits
    cpus: float | None
    tmp_bytes: int

    def _ulimits(self) -> list[Any]:
        lim = self.limits
        out = []
        if lim.open_files:
            n = int(lim.open_files)
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            if hard != resource.RLIM_INFINITY:
                n = min(n, hard)  # no CAP_SYS_RESOURCE: a hard limit cannot be raised
            out.append(docker.types.Ulimit(name="nofile", soft=n, hard=n))
        if lim.file_size_bytes:
            n = int(lim.file_size_bytes)
            out.append(docker.types.Ulimit(name="fsize", soft=n, hard=n))
        if lim.cpu_s:
            n = max(1, int(lim.cpu_s))
            out.append(docker.types.Ulimit(name="cpu", soft=n, hard=n + 1))
        return out

    def options(self, workdir: str) -> dict[str, Any]:
        """``create_container_config`` keyword arguments for a container on ``workdir``."""
        lim = self.limits
        host: dict[str, Any] = {
            # No docker-init: the kernel is PID 1, so nothing model code starts can kill it
            # (the kernel namespace's init gets no signal it has no handler for) while its
            # --reap kill(-1) after each cell reaches every other process.
            "init": False,
            "network_mode": "bridge" if lim.network else "none",
            "read_only": True,
            "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={self.tmp_bytes}"},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "binds": {
                KERNEL_DIR: {"bind": CONTAINER_KERNEL, "mode": "ro"},
                os.path.join(workdir, "work"): {"bind": CONTAINER_WORKDIR, "mode": "rw"},
            },
            "ulimits": self._ulimits(),
            # The channel rides on stdout: no log driver may keep a copy of it on disk.
            "log_config": docker.types.LogConfig(type=docker.types.LogConfig.types.NONE),
        }
        if lim.memory_bytes:
            host["mem_limit"] = int(lim.memory_bytes)
            host["memswap_limit"] = int(lim.memory_bytes)  # no swap on top
        if lim.processes:
            host["pids_limit"] = int(lim.processes)
        if self.cpus:
            host["nano_cpus"] = int(self.cpus * 1e9)
        return {
            "stdin_open": True,
            "tty": False,
            "labels": {**docker_host.owner_labels(), images.LABEL_TEMPLATE: self.template},
            "user": self.user,
            "hostname": "rlmd-sandbox",
            "working_dir": CONTAINER_WORKDIR,
            "environment": {"HOME": CONTAINER_WORKDIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8"},
            "volumes": [CONTAINER_KERNEL, CONTAINER_WORKDIR],
            "host_config": docker_host.client().api.create_host_config(**host),
        }

    def create(self, workdir: str | None = None) -> Created:
        """Create, attach to and start a container on ``workdir`` (a new private folder if
        ``None``). Attaching before the start means no output can be missed. Blocking.

        Raises:
            docker.errors.DockerException / requests exceptions: the engine failed.
        """
        made = workdir is None
        if workdir is None:
            workdir = workdirs.make("container", self.limits.disk_bytes)
            os.mkdir(os.path.join(workdir, "work"))
            own(os.path.join(workdir, "work"), self.user)
        api = docker_host.client().api
        try:
            config = api.create_container_config(
                self.image_id,
                # --reap: after each cell the kernel (PID 1) kills what the cell left running.
                [self.python, "-I", f"{CONTAINER_KERNEL}/main.py", "--reap", "1"],
                **self.options(workdir),
            )
            # The SDK has no argument for it: the host closing the attach socket is EOF on
            # the kernel's stdin, so a kernel whose host is gone exits.
            config["StdinOnce"] = True
            cid = api.create_container_from_config(config)["Id"]
        except BaseException:
            if made:
                workdirs.remove(workdir)
            raise
        _LIVE.add(cid)
        try:
            raw = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            inner = getattr(raw, "_sock", raw)
            # A socket of our own: the SDK's response object may close its copy when it is
            # garbage-collected.
            sock = socket.socket(fileno=os.dup(inner.fileno()))
            with contextlib.suppress(OSError):
                raw.close()
            api.start(cid)
            host_config = api.inspect_container(cid).get("HostConfig") or {}
        except BaseException:
            remove_container(cid)
            if made:
                workdirs.remove(workdir)
            raise
        return Created(cid, sock, host_config, workdir)


def _close_sock(created: Created) -> None:
    """In a forked child: close the child's copy of a parent's spare's socket."""
    with contextlib.suppress(OSError):
        created.sock.close()


SPARES: SparePool[LaunchSpec, Created] = SparePool(
    LaunchSpec.create,
    discard,
    errors=docker_host.ENGINE_ERRORS,
    what="container",
    join_s=30.0,
    forget_item=_close_sock,
)


def close_spare_containers() -> None:
    """Remove the spare containers kept for the next sandboxes (also done at exit)."""
    SPARES.close()


def _at_exit() -> None:
    SPARES.close(final=True)
    if _LIVE:
        with contextlib.suppress(*docker_host.ENGINE_ERRORS):
            for cid in list(_LIVE):
                remove_container(cid)


def _after_fork() -> None:
    SPARES.forget()
    _LIVE.clear()  # the parent removes its own


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=functools.partial(_after_fork))

"""The docker engine as the container backend sees it: one shared client, a cheap
reachability probe, the labels on every container rlmd starts, and orphan reaping.

Every container carries ``rlmd.sandbox=1`` plus the owning process (``rlmd.host``,
``rlmd.pid``, ``rlmd.pid-start``: the pid's start time, so a reused pid is not taken for
the owner). :func:`reap_orphans` removes those whose owner on this host is gone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import docker
import docker.errors
import requests.exceptions

from rlmd.sandbox.workdirs import owner_alive, start_time

log = logging.getLogger(__name__)

LABEL = "rlmd.sandbox"
LABEL_HOST = "rlmd.host"
LABEL_PID = "rlmd.pid"
LABEL_PID_START = "rlmd.pid-start"

ENGINE_ERRORS = (
    docker.errors.DockerException,
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    OSError,
)
"""What a call to the engine raises when the engine is unreachable or slow."""

_lock = threading.Lock()
_client: Any = None
_probe: tuple[float, str | None] | None = None  # (monotonic time, reason)
_reaped_for: int | None = None


def client() -> Any:
    """The process's shared ``docker.DockerClient`` (from the environment: ``DOCKER_HOST``
    or the default socket; 300 s per API call, builds included).

    Raises:
        docker.errors.DockerException: no engine configuration can be made.
    """
    global _client
    with _lock:
        if _client is None:
            _client = docker.from_env(timeout=300)
        return _client


def engine_unavailable_reason(timeout_s: float = 3.0) -> str | None:
    """``None`` if the docker engine answers a ping within ``timeout_s`` seconds, else why
    not. A success is remembered for 30 s, a failure for 2 s (something may start the
    engine meanwhile)."""
    global _probe
    now = time.monotonic()
    cached = _probe
    if cached is not None and now - cached[0] < (30.0 if cached[1] is None else 2.0):
        return cached[1]
    try:
        probe = docker.from_env(timeout=timeout_s)
        try:
            probe.ping()
        finally:
            probe.close()
        reason = None
    except ENGINE_ERRORS as exc:
        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        reason = f"no docker engine answers at {host} ({type(exc).__name__}: {exc})"[:300]
    _probe = (now, reason)
    return reason


_facts: dict[str, Any] | None = None


def engine_facts() -> dict[str, Any]:
    """What the engine says about itself, for the isolation record (asked once per
    process): ``{"version": str, "runtime": str, "seccomp": str | None}`` (``seccomp``: the
    default profile every container gets, ``None`` if the engine applies none).

    Raises:
        docker.errors.DockerException / requests exceptions: the engine is unreachable.
    """
    global _facts
    if _facts is None:
        info = client().info()
        options = info.get("SecurityOptions") or []
        seccomp = next((o for o in options if o.startswith("name=seccomp")), None)
        _facts = {
            "version": str(info.get("ServerVersion") or ""),
            "runtime": str(info.get("DefaultRuntime") or ""),
            "seccomp": seccomp.partition("profile=")[2] or "on" if seccomp else None,
        }
    return _facts


def owner_labels() -> dict[str, str]:
    """The labels that mark a container as this process's."""
    labels = {LABEL: "1", LABEL_HOST: socket.gethostname(), LABEL_PID: str(os.getpid())}
    start = start_time(os.getpid())
    if start is not None:
        labels[LABEL_PID_START] = start
    return labels


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get(LABEL_HOST) != socket.gethostname():
        return True  # another host's engine user: not ours to judge
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    return owner_alive(pid, labels.get(LABEL_PID_START))


def reap_orphans(engine: Any | None = None) -> list[str]:
    """Remove (force) every rlmd container whose owning process on this host is gone.

    Returns: the short ids of the removed containers.

    Raises:
        docker.errors.DockerException / requests exceptions: the engine is unreachable.
    """
    engine = engine or client()
    removed = []
    # sparse: the list alone, no inspect per container (which raised NotFound for a container
    # another reaper removed in between); its labels are then top-level attributes
    for container in engine.containers.list(all=True, sparse=True, filters={"label": f"{LABEL}=1"}):
        if _owner_alive(container.attrs.get("Labels") or {}):
            continue
        try:
            container.remove(force=True)
            removed.append(container.short_id)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # e.g. removal already in progress
            log.debug("could not remove orphan %s: %s", container.short_id, exc)
    if removed:
        log.info("removed %d orphaned rlmd sandbox container(s): %s", len(removed), removed)
    return removed


def reap_orphans_once() -> None:
    """:func:`reap_orphans` the first time a process starts a container (again in a forked
    child); engine errors are logged, not raised."""
    global _reaped_for
    if _reaped_for == os.getpid():
        return
    _reaped_for = os.getpid()
    try:
        reap_orphans()
    except ENGINE_ERRORS as exc:
        log.warning("could not reap orphaned sandbox containers: %s", exc)

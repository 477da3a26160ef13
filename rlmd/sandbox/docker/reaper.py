"""Removing orphaned sandbox containers at daemon start, without making docker a requirement.

The container backend reaps when a process starts its first container; the daemon also
calls :func:`reap_in_background` when it starts, so containers left by a crashed daemon go
even if no container sandbox is used again.
"""

from __future__ import annotations

import importlib.util
import logging
import threading

log = logging.getLogger(__name__)


def reap_in_background() -> threading.Thread | None:
    """Start a daemon thread that removes orphaned rlmd containers if the Docker SDK is
    installed and an engine answers within 2 s; ``None`` (nothing started) without the SDK.
    Never raises."""
    if importlib.util.find_spec("docker") is None:
        return None

    def run() -> None:
        try:
            from rlmd.sandbox.docker import engine as docker_host

            if docker_host.engine_unavailable_reason(timeout_s=2.0) is None:
                docker_host.reap_orphans_once()
        except Exception as exc:  # noqa: BLE001 - best effort, off the daemon's path
            log.debug("reaping sandbox containers failed: %s", exc)

    thread = threading.Thread(target=run, name="rlmd-reap-containers", daemon=True)
    thread.start()
    return thread

"""Removing orphaned sandbox containers at daemon start, without making docker a requirement.

The container backend reaps when a process starts its first container; the daemon also
calls :func:`reap_in_background` when it starts, so containers left by a crashed daemon go
even if no container sandbox is used again.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time

log = logging.getLogger(__name__)

REAP_AGAIN_S = (5.0, 25.0)
"""Pauses before the second and third sweeps after a daemon's start (seconds)."""


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
                # A container whose create request was in flight when its daemon was
                # killed appears after the first sweep: look again a little later.
                for delay in REAP_AGAIN_S:
                    time.sleep(delay)
                    docker_host.reap_orphans()
        except Exception as exc:  # noqa: BLE001 - best effort, off the daemon's path
            log.debug("reaping sandbox containers failed: %s", exc)

    thread = threading.Thread(target=run, name="rlmd-reap-containers", daemon=True)
    thread.start()
    return thread

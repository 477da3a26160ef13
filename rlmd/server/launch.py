"""Reach the daemon's socket, starting ``rlmd serve`` in the background when none answers.

Shared by every client that may bring the daemon up itself: ``rlmd attach --stdio`` (editors)
and the front doors (:mod:`rlmd.frontdoors.link`: the MCP server and the ACP agent).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from rlmd import paths

START_TIMEOUT_S = 15.0


def try_connect(path: Path) -> socket.socket | None:
    """A connected socket to the daemon at ``path``, or ``None`` if nobody listens."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def start_daemon(extra_args: list[str] | None = None) -> subprocess.Popen:
    """Start ``rlmd serve`` in the background (its own session, logging to
    ``run/daemon.log``); returns the process (it outlives this one)."""
    cmd = [sys.executable, "-m", "rlmd", "serve", "--log-file", str(paths.log_path())]
    cmd += extra_args or []
    return subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def connect_or_start(
    *,
    autostart: bool = True,
    timeout_s: float = START_TIMEOUT_S,
    extra_args: list[str] | None = None,
) -> socket.socket:
    """A socket connected to the daemon; starts one when none answers and ``autostart``.

    Raises:
        ConnectionError: no daemon, and none could be started in ``timeout_s`` seconds (the
            message points at the daemon log).
    """
    path = paths.socket_path()
    sock = try_connect(path)
    if sock is not None:
        return sock
    if not autostart:
        raise ConnectionError(f"no rlmd daemon listens on {path}; start one with: rlmd serve")
    proc = start_daemon(extra_args)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock = try_connect(path)
        if sock is not None:
            return sock
        code = proc.poll()
        if code is not None:
            # imported only here: the daemon's module loads pygls and lsprotocol (~0.4 s of
            # a client's start-up), which a client that found its daemon never needs
            from rlmd.server.daemon import EXIT_ALREADY_RUNNING

            if code != EXIT_ALREADY_RUNNING:
                break
        time.sleep(0.05)
    raise ConnectionError(
        f"could not start the rlmd daemon (socket {path}); see {paths.log_path()}"
    )

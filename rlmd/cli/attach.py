"""``rlmd attach --stdio``: bridge an editor's stdio to the daemon's socket, starting the
daemon if none runs.

The bridge sends the daemon's token (:mod:`rlmd.server.auth`) and then copies bytes both
ways without parsing them (the daemon does the framing and its checks). It ends when the daemon closes the connection (after ``exit``, or when the daemon
stops) or, once stdin is closed, when the daemon has answered and closed its side.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlmd import paths
from rlmd.server import auth, daemon

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
        if code is not None and code != daemon.EXIT_ALREADY_RUNNING:
            break
        time.sleep(0.05)
    raise ConnectionError(
        f"could not start the rlmd daemon (socket {path}); see {paths.log_path()}"
    )


def bridge(sock: socket.socket, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Send the daemon's token, then copy stdin → socket and socket → stdout until the
    daemon closes; returns 0."""
    token = auth.token_for(paths.socket_path())
    if token:
        try:
            sock.sendall(auth.handshake(token))
        except OSError:
            pass

    def pump_in() -> None:
        try:
            while True:
                data = os.read(stdin_fd, 65536)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    threading.Thread(target=pump_in, name="stdin-to-daemon", daemon=True).start()
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            view = memoryview(data)
            while view:
                n = os.write(stdout_fd, view)
                view = view[n:]
    except OSError:
        pass
    finally:
        sock.close()
    return 0


def main(*, autostart: bool = True, timeout_s: float = START_TIMEOUT_S) -> int:
    """``rlmd attach --stdio``: exit code 0, or 2 when no daemon could be reached."""
    try:
        sock = connect_or_start(autostart=autostart, timeout_s=timeout_s)
    except (ConnectionError, PermissionError) as exc:  # PermissionError: an unsafe socket folder
        print(f"rlmd attach: {exc}", file=sys.stderr)
        return 2
    return bridge(sock)

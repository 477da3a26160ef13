"""``rlmd attach --stdio``: bridge an editor's stdio to the daemon's socket, starting the
daemon if none runs.

The bridge sends the daemon's token (:mod:`rlmd.server.auth`) and then copies bytes both
ways without parsing them (the daemon does the framing and its checks). It ends when the daemon closes the connection (after ``exit``, or when the daemon
stops) or, once stdin is closed, when the daemon has answered and closed its side.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from rlmd import paths
from rlmd.server import auth
from rlmd.server.launch import START_TIMEOUT_S, connect_or_start


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

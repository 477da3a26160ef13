"""The daemon's client token: a per-user secret a socket client sends before any command.

The socket is mode 0600, but every process of the user may connect to it, model code in a
subprocess sandbox included. So the daemon also asks for a secret that only the user's own
tools can read: ``<rlmd home>/run/daemon.token`` (mode 0600, a new one at each daemon start;
the rlmd home is hidden inside every sandbox). A client proves it knows the token with one
header block before its first message (a standard LSP header next to ``Content-Length``)::

    Rlmd-Token: <token>\\r\\n\\r\\n

``rlmd attach --stdio`` (so the VS Code extension), the TUI, ``rlmd doctor`` and
:class:`rlmd.server.client.Client` send it. ``rlmd serve --stdio`` needs none: its only
client started it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from rlmd import paths

HEADER = "Rlmd-Token"
TOKEN_FILE = "daemon.token"


def token_path() -> Path:
    """``<rlmd home>/run/daemon.token``."""
    return paths.run_dir() / TOKEN_FILE


def new_token() -> str:
    """Write a fresh token to :func:`token_path` (mode 0600, replaced atomically) and
    return it (64 hex characters).

    Raises:
        OSError: the run folder is not writable.
    """
    token = secrets.token_hex(32)
    path = token_path()
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return token


def token_for(socket: str | Path) -> str | None:
    """The token of the daemon listening at ``socket``: the token file beside a
    ``run/rlmd.sock``, else this rlmd home's; ``None`` when there is none to read."""
    socket = Path(socket)
    candidates = [token_path()]
    if socket.name == "rlmd.sock":
        candidates.insert(0, socket.parent / TOKEN_FILE)
    for path in candidates:
        try:
            return path.read_text(encoding="ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            continue
    return None


def handshake(token: str) -> bytes:
    """The header block that authenticates a connection (bytes to send first)."""
    return f"{HEADER}: {token}\r\n\r\n".encode("ascii")


def matches(expected: str, given: str) -> bool:
    """Constant-time comparison of two tokens."""
    return hmac.compare_digest(expected.encode(), given.encode())

"""Where rlmd keeps its state: one folder, ``$RLMD_HOME`` or the platform's user data folder,
private to the user (mode 0700, the store 0600: it holds every question, answer and code
context).

Layout under the home folder:
    config.toml        user-level configuration (models, run defaults)
    rlmd.db            the trajectory store (SQLite, WAL)
    models/            pulled local GGUF models, named with their SHA-256
    run/               sockets and pid files (the daemon)

Also the small process helpers that go with them: is the daemon running, how much memory a
process holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path

import platformdirs

MAX_SOCKET_PATH = 100
"""Unix socket paths are limited to 107 bytes on Linux (103 on macOS); stay under both."""

PROJECT_CONFIG_NAMES = (".rlmd.toml", "rlmd.toml")
"""Project-level config files, looked up in the project folder; they override the user's."""


def home_location() -> Path:
    """Where the rlmd home folder is (``$RLMD_HOME`` if set, else
    ``platformdirs.user_data_dir("rlmd")``), without creating it."""
    env = os.environ.get("RLMD_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("rlmd"))


def home() -> Path:
    """The rlmd home folder (:func:`home_location`). Created if missing with mode 0700; an
    existing one of this user's that others may read is made private (see
    :func:`make_private`)."""
    path = home_location()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    make_private(path)
    return path


def make_private(path: str | Path) -> None:
    """Take the group and other permissions off ``path`` (0755 -> 0700, 0644 -> 0600) when
    this user owns it; a missing path, someone else's or one on a read-only file system is
    left as it is. Works on the path, never an open descriptor (closing one on a SQLite file
    drops the locks the process holds on it)."""
    try:
        st = os.stat(path)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
    except OSError:
        pass


def create_private_file(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (then :func:`make_private`). An
    existing file is never opened, so this is safe on a database the process holds open.

    Raises:
        OSError: the folder is missing or not writable.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        make_private(path)


_STORES: set[str] = set()
"""Absolute paths of the SQLite stores this process opened (see :func:`protect_store`)."""

SQLITE_SUFFIXES = (".db", ".db3", ".sqlite", ".sqlite3", "-wal", "-shm", "-journal")
"""File names that mark a SQLite database or one of its side files; the context loader skips
them by name, before opening anything."""


def protect_store(path: str | Path) -> None:
    """Record that this process holds the SQLite store at ``path`` open. SQLite's locks are
    POSIX record locks, owned by the *process*: closing any descriptor of the database or
    its ``-shm`` file, even one opened only to read, drops them all, and another process
    may then delete the WAL under this one. Code that reads files it did not choose (the
    context loader) asks :func:`protected_files` first and never opens these."""
    _STORES.add(os.path.abspath(path))


def protected_files() -> frozenset[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every file of the stores this process opened (the database,
    its ``-wal``, ``-shm`` and ``-journal``) and of the rlmd home folder, as they are now:
    a hard link or bind mount under another name is still recognised."""
    found = set()
    candidates = [str(home_location())]
    for db in _STORES:
        candidates += [db + suffix for suffix in ("", "-wal", "-shm", "-journal")]
    for candidate in candidates:
        with contextlib.suppress(OSError):
            st = os.stat(candidate)
            found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def in_home(path: str | Path) -> bool:
    """Whether ``path`` (resolved) is the rlmd home folder or lies inside it."""
    home_real = os.path.realpath(home_location())
    real = os.path.realpath(path)
    return real == home_real or real.startswith(home_real.rstrip("/") + "/")


def store_path() -> Path:
    """The trajectory database file."""
    return home() / "rlmd.db"


def user_config_path() -> Path:
    return home() / "config.toml"


def models_dir() -> Path:
    path = home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def project_config_path(project: Path) -> Path | None:
    """The first project config file found in ``project``, else ``None``."""
    for name in PROJECT_CONFIG_NAMES:
        candidate = project / name
        if candidate.is_file():
            return candidate
    return None


def run_dir() -> Path:
    """``<rlmd home>/run`` (created, mode 0700)."""
    path = home() / "run"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def socket_path() -> Path:
    """Where the daemon of this rlmd home listens: ``run/rlmd.sock``, or, when that path is
    too long for a Unix socket (:data:`MAX_SOCKET_PATH` bytes), a short name derived from it in
    the first of these that is an absolute folder short enough for it: ``$XDG_RUNTIME_DIR``,
    a private ``rlmd-<uid>`` folder in the temp folder (``$TMPDIR``), the same in ``/tmp``.

    Raises:
        PermissionError: the private folder chosen belongs to another user or is a symlink.
    """
    preferred = run_dir() / "rlmd.sock"
    if len(str(preferred).encode()) <= MAX_SOCKET_PATH:
        return preferred
    name = f"rlmd-{hashlib.sha256(str(preferred).encode()).hexdigest()[:16]}.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    # A relative value is invalid (the XDG spec), and a long one would not fit either.
    fits = len(os.path.join(runtime, name).encode()) <= MAX_SOCKET_PATH
    if os.path.isabs(runtime) and os.path.isdir(runtime) and fits:
        return Path(runtime) / name
    # A long $TMPDIR would not fit either; /tmp always does.
    private = Path(tempfile.gettempdir()) / f"rlmd-{os.getuid()}"
    if len(str(private / name).encode()) > MAX_SOCKET_PATH:
        private = Path("/tmp") / f"rlmd-{os.getuid()}"
    return own_private_dir(private) / name


def own_private_dir(path: Path) -> Path:
    """``path`` as a folder only this user can use: made with mode 0700 if missing, else
    checked (never followed if a symlink) to be a real folder owned by this user, then made
    0700. In a shared folder such as ``/tmp`` another user may have made it first; one who
    owns it could swap the daemon's socket, so it is refused rather than trusted.

    Raises:
        PermissionError: ``path`` is a symlink, not a folder, or owned by another user.
        OSError: it cannot be made.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(
            f"{path} is not a folder of this user (owner uid {st.st_uid}, "
            f"{'folder' if stat.S_ISDIR(st.st_mode) else 'not a folder'}): another user may "
            f"have made it to take over the rlmd socket. Remove it, or set XDG_RUNTIME_DIR "
            f"or a shorter RLMD_HOME."
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def pid_path() -> Path:
    return run_dir() / "daemon.pid"


def log_path() -> Path:
    return run_dir() / "daemon.log"


def running_pid() -> int | None:
    """The pid in ``daemon.pid`` if that process is alive, else ``None``."""
    try:
        pid = int(pid_path().read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def rss_bytes(pid: int | str = "self") -> int | None:
    """Resident memory of a process in bytes (Linux ``/proc``), ``None`` elsewhere."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None

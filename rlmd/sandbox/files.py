"""Host-side file I/O in a folder that model code can also write to.

The sandbox's working folder is a host path the kernel shares (the subprocess backend's
folder, the container's ``/work`` mount). Model code can plant a symlink, a FIFO or a device
at any name there, so the host (often root) never opens a name there the ordinary way:

* new files get a fresh random name created with ``O_EXCL`` (nothing planted can be at it);
* files at a name the user chose (uploads, downloads) are opened with ``O_NOFOLLOW`` and
  ``O_NONBLOCK`` and must turn out to be regular files, so a FIFO cannot block the host and a
  symlink cannot lead it to another file.

Found by the hostile fresh-user test: the container backend wrote a large context through a
planted symlink over a root-owned host file, and a FIFO at the subprocess backend's
predictable context-file name hung the host in ``open()``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator

from rlmd.sandbox.base import SandboxError

_CHUNK = 8 << 20


def _owned(fd: int, uid: int | None) -> int:
    if uid is not None:
        os.fchown(fd, uid, uid)
    return fd


def write_new(folder: str, prefix: str, chunks: Iterable[bytes], uid: int | None = None) -> str:
    """Write ``chunks`` (an iterable of bytes) to a new file with a random name in ``folder``.

    Returns:
        The new file's path. It is created with ``O_EXCL`` (mode 0600, owned by ``uid`` if
        given), so nothing model code planted can be at that name.

    Raises:
        OSError: the folder is not writable, or the disk is full (the file is removed).
    """
    fd, path = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        with os.fdopen(_owned(fd, uid), "wb") as f:
            for chunk in chunks:
                f.write(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def text_chunks(text: str, chunk: int = _CHUNK) -> Iterator[bytes]:
    """``text`` as UTF-8 in slices of ``chunk`` characters (lone surrogates passed through):
    never a second full-size copy of a 100 MB context in memory."""
    for i in range(0, len(text), chunk):
        yield text[i : i + chunk].encode("utf-8", "surrogatepass")


def open_regular(path: str, flags: int, uid: int | None = None) -> int:
    """Open ``path`` with ``flags`` (``os.O_RDONLY``, or ``os.O_WRONLY | os.O_CREAT | ...``)
    never through a symlink and never blocking; returns the descriptor (blocking again).

    Raises:
        ValueError: ``path`` is not a regular file (a FIFO, device, socket or folder).
        OSError: as ``os.open`` (``ELOOP`` for a symlink, ``ENOENT``, ``ENXIO`` for a FIFO
            opened for writing with no reader).
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        if uid is not None and flags & os.O_CREAT:
            os.fchown(fd, uid, uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def inside(workdir: str | None, path: str) -> str:
    """``path`` resolved under the host folder ``workdir`` (symlinks followed on the host).

    Raises:
        ValueError: ``path`` is absolute, empty, or escapes ``workdir``.
        SandboxError: ``workdir`` is ``None`` (the sandbox is not started).
    """
    if workdir is None:
        raise SandboxError("the sandbox is not started")
    if not isinstance(path, str) or not path or "\x00" in path or os.path.isabs(path):
        raise ValueError(f"path {path!r} must be relative to the working folder")
    root = os.path.realpath(workdir)
    full = os.path.realpath(os.path.join(root, path))
    if not full.startswith(root + os.sep):
        raise ValueError(f"path {path!r} escapes the working folder")
    return full


def makedirs_owned(folder: str, root: str, uid: int | None) -> None:
    """``os.makedirs(folder)``; with ``uid``, every folder made below ``root`` is given to
    the kernel's uid (it must be able to write there too)."""
    missing = []
    path = folder
    while path != root and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    if uid is not None:
        for made in missing:
            os.chown(made, uid, uid)


def write_file(path: str, data: bytes, root: str, uid: int | None = None) -> None:
    """Write ``data`` to ``path`` (parents made below ``root``), never through a symlink or
    into a FIFO model code put at ``path``; owned by ``uid`` if given.

    Raises:
        ValueError: something other than a regular file is at ``path``.
    """
    makedirs_owned(os.path.dirname(path), root, uid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with os.fdopen(open_regular(path, flags, uid), "wb") as f:
        f.write(data)


def read_file(path: str) -> bytes:
    """The bytes of the regular file at ``path`` (no symlink, FIFO or device).

    Raises:
        ValueError: not a regular file. OSError: as ``os.open``.
    """
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
        return f.read()

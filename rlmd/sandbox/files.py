"""Host-side file I/O in a folder that model code can also write to.

The sandbox's working folder is a host path the kernel shares (the subprocess backend's
folder, the container's ``/work`` mount). Model code can plant a symlink, a FIFO or a device
at any name there, so the host (often root) never opens a name there the ordinary way:

* new files get a fresh random name created with ``O_EXCL`` (nothing planted can be at it);
* files at a name the user chose (uploads, downloads) are resolved one component at a
  time from a descriptor of the working folder (``openat2`` with ``RESOLVE_BENEATH`` and
  ``RESOLVE_NO_SYMLINKS`` where the kernel has it), never through a symlink at any
  component, opened ``O_NONBLOCK`` and must turn out to be regular files: a FIFO cannot
  block the host, and a folder swapped for a symlink between a check and the open cannot
  lead it out (there is no check apart from the open).

Found by the hostile fresh-user test: the container backend wrote a large context through a
planted symlink over a root-owned host file, and a FIFO at the subprocess backend's
predictable context-file name hung the host in ``open()``; and swapping ``d/`` for a symlink
to ``/etc`` between the old path check and the open let the host read ``/etc/shadow``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import stat
import struct
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from rlmd.sandbox.base import SandboxError

_CHUNK = 8 << 20


def _owned(fd: int, uid: int | None) -> int:
    if uid is not None:
        os.fchown(fd, uid, uid)
    return fd


def open_new(folder: str, prefix: str, uid: int | None = None) -> tuple[BinaryIO, str]:
    """A new file with a random name in ``folder``, open for writing (buffered, binary).

    Returns:
        ``(file, path)``. The file is created with ``O_EXCL`` (mode 0600, owned by ``uid``
        if given), so nothing model code planted can be at that name.

    Raises:
        OSError: the folder is not writable (nothing is left behind).
    """
    fd, path = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        return os.fdopen(_owned(fd, uid), "wb"), path
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def write_new(folder: str, prefix: str, chunks: Iterable[bytes], uid: int | None = None) -> str:
    """Write ``chunks`` (an iterable of bytes) to a new file with a random name in ``folder``
    (see :func:`open_new`).

    Returns:
        The new file's path.

    Raises:
        OSError: the folder is not writable, or the disk is full (the file is removed).
    """
    f, path = open_new(folder, prefix, uid)
    try:
        with f:
            for chunk in chunks:
                f.write(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


@dataclass
class ContextFile:
    """A codebase file being written in a sandbox's working folder while the codebase is
    read (see :meth:`rlmd.sandbox.base.Sandbox.new_context_file`).

    Attributes:
        file: the new, empty file, open for binary writing (the writer closes it).
        path: its host path (removed after the bind, or with the working folder).
        kernel_path: its path as the kernel sees it.
    """

    file: BinaryIO
    path: str
    kernel_path: str


def text_chunks(text: str, chunk: int = _CHUNK) -> Iterator[bytes]:
    """``text`` as UTF-8 in slices of ``chunk`` characters (lone surrogates passed through):
    never a second full-size copy of a 100 MB context in memory."""
    for i in range(0, len(text), chunk):
        yield text[i : i + chunk].encode("utf-8", "surrogatepass")


FILE_CONTEXT_CHARS = 1 << 20
"""A context of this many characters or more goes to the kernel through a file in its working
folder, written off the event loop, instead of one JSON frame on the channel (100 MB of text:
~0.5 s instead of ~2 s; the stdlib as a codebase: 0.58 s of encoding no longer on the loop)."""


def codebase_chunks(files: dict[str, str]) -> Iterator[bytes]:
    """A codebase ``{relpath: text}`` in the kernel's ``codebase`` file format: one line of
    ASCII JSON ``{"paths": [...], "sizes": [...]}`` (each file's length in UTF-8 bytes), then
    every text as UTF-8 (lone surrogates passed through), back to back. The kernel slices
    the body and decodes each file on its own (one mostly-ASCII file stays a compact string):
    no JSON escaping of 100 MB of source on either side."""
    paths = list(files)
    body = [files[p].encode("utf-8", "surrogatepass") for p in paths]
    head = {"paths": paths, "sizes": [len(b) for b in body]}
    yield json.dumps(head, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
    yield from body


def context_file(value: Any, codebase: bool) -> tuple[str, Iterator[bytes]] | None:
    """How a large context is written to a file: ``("text", chunks)`` for a string (the
    kernel memory-maps and decodes it), ``("codebase", chunks)`` for a codebase dict of
    strings (:func:`codebase_chunks`); ``None`` when it is small or of another type (it then
    goes inline). The chunks are lazy: iterate them off the event loop."""
    if isinstance(value, str) and not codebase:
        if len(value) >= FILE_CONTEXT_CHARS:
            return "text", text_chunks(value)
    elif codebase and isinstance(value, dict):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return None  # the kernel refuses it with its own message
        if sum(len(v) for v in value.values()) >= FILE_CONTEXT_CHARS:
            return "codebase", codebase_chunks(value)
    return None


def context_file_request(fmt: str, path: str, index_at: int | None = None) -> dict[str, Any]:
    """The kernel request that binds a context written by :func:`context_file` at ``path``
    (its path as the kernel sees it); the kernel memory-maps and decodes it, then deletes
    the file. ``index_at``: a codebase file whose index is at its end, from that offset
    (written while the codebase was read: ``rlmd.context.Spool``)."""
    request: dict[str, Any] = {"op": "bind_context_file", "path": path, "format": fmt}
    if index_at is not None:
        request["index_at"] = index_at
    return request


def parts_of(path: str) -> list[str]:
    """The components of ``path``, a path relative to a working folder.

    Raises:
        ValueError: ``path`` is not a string, is empty, absolute, holds a NUL, or has a
            ``..`` component (it could only lead out).
    """
    if not isinstance(path, str) or not path or "\x00" in path or os.path.isabs(path):
        raise ValueError(f"path {path!r} must be relative to the working folder")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"path {path!r} escapes the working folder")
    return parts


# openat2(2) (Linux 5.6+): resolve a whole path below a folder's descriptor in the kernel,
# refusing symlinks and ``..`` escapes, with no window between check and use.
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE = 0x02 | 0x04 | 0x08  # RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_openat2_works: bool | None = None if sys.platform == "linux" else False


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int | None:
    """``openat2(dir_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``; ``None`` where the
    kernel (or a seccomp profile) does not have it. Raises OSError as ``open``."""
    global _openat2_works
    if _openat2_works is False:
        return None
    libc = _libc()
    how = struct.pack("=QQQ", flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.c_char_p(how),
        ctypes.c_size_t(len(how)),
    )
    if fd >= 0:
        _openat2_works = True
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and not _openat2_works:
        _openat2_works = False
        return None
    raise OSError(err, os.strerror(err), rel)


def _open_beneath(dir_fd: int, parts: list[str], flags: int, mode: int = 0o600) -> int:
    """Open ``parts`` below ``dir_fd`` following no symlink at any component: with
    openat2 where the kernel has it, else one ``O_NOFOLLOW`` component at a time, each
    opened from the descriptor of the one before (a folder swapped for a symlink between
    two steps makes the next open fail, never lead out).

    Raises:
        ValueError: a component is a symlink. OSError: as ``open``.
    """
    try:
        return _open_nofollow(dir_fd, parts, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            path = "/".join(parts)
            raise ValueError(f"{path!r} leads through a symlink (never followed)") from exc
        raise


def _open_nofollow(dir_fd: int, parts: list[str], flags: int, mode: int) -> int:
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _openat2(dir_fd, "/".join(parts), flags, mode)
    if fd is not None:
        return fd
    at = dir_fd
    try:
        for name in parts[:-1]:
            step = os.open(name, _DIR_FLAGS, dir_fd=at)
            if at != dir_fd:
                os.close(at)
            at = step
        return os.open(parts[-1], flags, mode, dir_fd=at)
    finally:
        if at != dir_fd:
            os.close(at)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _regular(fd: int, path: str) -> int:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_folders(root_fd: int, parts: list[str], own: Callable[[int], None] | None) -> int:
    """A descriptor of the folder ``parts`` below ``root_fd``, making missing ones (each
    given to ``own``); never through a symlink."""
    at = os.dup(root_fd)
    try:
        for name in parts:
            try:
                step = _open_beneath(at, [name], _DIR_FLAGS)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(name, 0o755, dir_fd=at)
                step = _open_beneath(at, [name], _DIR_FLAGS)
                if own is not None:
                    own(step)
            os.close(at)
            at = step
    except BaseException:
        os.close(at)
        raise
    return at


def _root_fd(workdir: str | None) -> int:
    if workdir is None:
        raise SandboxError("the sandbox is not started")
    return os.open(workdir, _DIR_FLAGS)


def upload_file(
    workdir: str | None, path: str, data: bytes, own: Callable[[int], None] | None = None
) -> None:
    """Write ``data`` to ``path`` below the host folder ``workdir``, making missing folders.
    Every component is resolved from a descriptor of ``workdir`` and no symlink is followed,
    so model code swapping a folder for a symlink at any moment cannot lead the write out;
    a FIFO cannot block it. New folders and the file are given to ``own`` (a function of a
    descriptor: the kernel's uid must be able to write them too).

    Raises:
        ValueError: a bad ``path`` (see :func:`parts_of`), or something other than a regular
            file is at it. SandboxError: ``workdir`` is ``None`` (not started).
        OSError: ``ELOOP``/``ENOTDIR``/``EXDEV`` for a symlink on the way, disk full, ...
    """
    parts = parts_of(path)
    root = _root_fd(workdir)
    try:
        folder = _make_folders(root, parts[:-1], own)
    finally:
        os.close(root)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        fd = _regular(_open_beneath(folder, parts[-1:], flags), path)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as f:
        if own is not None:
            own(fd)
        f.truncate()  # after the checks: a planted FIFO or device is never truncated
        f.write(data)


def download_file(workdir: str | None, path: str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` below the host folder ``workdir``, resolved
    as :func:`upload_file` does (no symlink at any component, no FIFO or device); with
    ``max_bytes``, a longer file is refused without being read whole.

    Raises:
        ValueError: a bad ``path``, not a regular file, or over ``max_bytes``.
        SandboxError: not started.
        OSError: as ``open`` (``ENOENT``; ``ELOOP``/``ENOTDIR``/``EXDEV`` for a symlink).
    """
    parts = parts_of(path)
    root = _root_fd(workdir)
    try:
        fd = _regular(_open_beneath(root, parts, os.O_RDONLY | os.O_NONBLOCK), path)
    finally:
        os.close(root)
    with os.fdopen(fd, "rb") as f:
        if max_bytes is None:
            return f.read()
        data = f.read(max_bytes + 1)  # the file may still be growing: never trust a stat
    return check_size(data, path, max_bytes)


def check_size(data: bytes, path: str, max_bytes: int | None) -> bytes:
    """``data`` (read from ``path``) if it is at most ``max_bytes`` long.

    Raises:
        ValueError: it is longer.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"{path} is larger than the {max_bytes:,} bytes allowed")
    return data

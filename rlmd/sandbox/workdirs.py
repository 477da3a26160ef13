"""Host working folders named after the rlmd process that owns them, and reaped when it died.

A killed rlmd never removes its sandboxes' working folders (one per kill, each as large as
model code made it). Each folder's name carries its owner's pid and start time
(``rlmd-sandbox-<pid>-<start>-<random>``); the first folder a process makes sweeps the
temporary folder for those of owners that are gone, as the container backend does for
containers and the subprocess backend for cgroups.

A folder made with a size (``disk_bytes``) is a ``tmpfs`` of that size mounted on it where
this process may mount (root with ``CAP_SYS_ADMIN``): writing past it fails with ``ENOSPC``
(its pages are memory, charged to the memory cgroup of whoever wrote them). Elsewhere (a
normal user) the folder is a plain one and the session watches its size during each cell
(:func:`usage`), stopping the cell past the cap. :func:`capped` tells which.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import shutil
import stat
import sys
import tempfile

log = logging.getLogger(__name__)

_NAME = re.compile(r"rlmd-(?:sandbox|container|inprocess)-(\d+)-(\d+|x)-")


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), else ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def owner_alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` runs and (when ``start`` is known) is the one that started
    at ``start`` (not a later process given the same pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or start == start_time(pid)


def make(kind: str, size_bytes: int | None = None) -> str:
    """A new private folder ``rlmd-<kind>-<pid>-<start>-<random>`` in the temporary folder
    (``kind``: ``"sandbox"``, ``"container"`` or ``"inprocess"``), holding at most
    ``size_bytes`` where a ``tmpfs`` can be mounted on it (see :func:`capped`); the first
    call in a process reaps the folders of dead owners first (see :func:`reap_stale`).
    Remove it with :func:`remove`.

    Raises:
        OSError: the temporary folder is not writable.
    """
    _reap_once()
    pid = os.getpid()
    path = tempfile.mkdtemp(prefix=f"rlmd-{kind}-{pid}-{start_time(pid) or 'x'}-")
    if size_bytes and can_mount():
        try:
            _mount_tmpfs(path, int(size_bytes))
        except OSError as exc:
            log.warning("working folder %s is not size-limited: %s", path, exc)
        else:
            _MOUNTED.add(path)
    return path


_MOUNTED: set[str] = set()
"""Working folders of this process that are size-limited ``tmpfs`` mounts."""

_MS_NOSUID, _MS_NODEV, _MS_PRIVATE, _MNT_DETACH = 2, 4, 1 << 18, 2


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    # The process's own symbols, libc's among them (as rlmd.sandbox.files does):
    # ctypes.util.find_library ran /sbin/ldconfig -p in every rlmd process that starts a kernel
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: str, size: int) -> None:
    libc = _libc()
    if libc is None:
        raise OSError("mounting needs Linux")
    opts = f"size={size},mode=0700,uid={os.geteuid()},gid={os.getegid()}".encode()
    if libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    # Private: its unmount must not propagate into the mount namespaces of sandboxes that
    # copied it (bwrap binds the whole host root, then remounts each copy read-only; a copy
    # vanishing in between fails that sandbox's start).
    if libc.mount(None, path.encode(), None, _MS_PRIVATE, None) != 0:
        err = ctypes.get_errno()
        _unmount(path)
        raise OSError(err, os.strerror(err))


def _unmount(path: str) -> None:
    libc = _libc()
    if libc is not None and libc.umount2(path.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        log.debug("cannot unmount %s: %s", path, os.strerror(err))


@functools.cache
def can_mount() -> bool:
    """Whether this process can mount a size-limited ``tmpfs`` (tried once, on a scratch
    folder: root with ``CAP_SYS_ADMIN`` on Linux)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    probe = tempfile.mkdtemp(prefix="rlmd-mountprobe-")
    try:
        _mount_tmpfs(probe, 1024 * 1024)
    except OSError as exc:
        log.info("working folders cannot be tmpfs mounts here (%s): their size is watched", exc)
        return False
    finally:
        if os.path.ismount(probe):
            _unmount(probe)
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return True


def capped(path: str | None) -> bool:
    """Whether the working folder ``path`` is a size-limited mount (else its size must be
    watched)."""
    return path in _MOUNTED


def enforcement(size_bytes: int | None) -> str | None:
    """How a working-folder size limit is enforced here, for the isolation record."""
    if not size_bytes:
        return None
    if can_mount():
        return "tmpfs working folder"
    return "host watch (checked during each cell; the cell is stopped past it)"


def usage(path: str) -> int:
    """Bytes of storage the files under ``path`` take (allocated blocks: a sparse file
    counts what it really holds); symlinks are not followed, unreadable entries skipped."""
    total = 0
    todo = [path]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
    return total


def remove(path: str) -> None:
    """Remove a working folder made by :func:`make` (unmounting it first if it is a mount);
    errors are ignored."""
    if path in _MOUNTED or os.path.ismount(path):
        _unmount(path)
        _MOUNTED.discard(path)
    shutil.rmtree(path, ignore_errors=True)


def reap_stale(folder: str | None = None) -> list[str]:
    """Remove the working folders in ``folder`` (default: the temporary folder) whose owner
    process is gone; returns their paths. Folders of live owners, and names that are not
    ours, are left alone; one that cannot be removed (another user's) is skipped."""
    folder = folder or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = _NAME.match(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid, start = int(match[1]), match[2]
            if owner_alive(pid, None if start == "x" else start):
                continue
            if os.path.ismount(entry.path):  # a size-limited tmpfs working folder
                _unmount(entry.path)
            try:
                shutil.rmtree(entry.path)  # never follows a symlink model code planted
            except OSError as exc:
                log.debug("cannot remove stale working folder %s: %s", entry.path, exc)
                continue
            removed.append(entry.path)
    if removed:
        log.info("removed %d working folders of rlmd processes that died", len(removed))
    return removed


@functools.cache
def _reap_once() -> None:
    reap_stale()

"""Whether a workspace's folder changed since its codebase was read, without walking it.

A warm workspace re-checks its folder before every task (:meth:`Workspace.refresh`): a walk
that stats every file, 0.56-0.60 s for the 31,911 files of a Python installation's
standard library with site-packages. A :class:`FolderWatch` asks the kernel instead
(Linux inotify, through libc: no dependency): the load that reads the folder adds a watch on
each folder *before* listing it, so any later change to an entry of a watched folder (a file
written, touched, created, deleted, renamed; a folder made, removed, renamed, its mode
changed) is queued by the kernel before the system call that made it returns. A task that
starts after the change therefore finds it in the queue; when the queue is empty and the
folder's path still leads to the folder that was watched, nothing in the codebase changed
and the walk is skipped. (Why not ``watchdog`` or ``watchfiles``: they hand events over from a
thread or after a debounce, so neither can say whether a change made just before a task has
been read yet; this queue is read in the task's own path, so it can.)

Where inotify would not see every change, no watch is kept and the workspace walks the
folder before each task, as without one: a folder on a file system that is not a known
local one (NFS, SMB, FUSE, 9p... where another machine can write), more folders than a
quarter of the user's inotify watch limit (``/proc/sys/fs/inotify/max_user_watches``), no
inotify at all (not Linux, or its instances used up). A lost event (the queue overflowed)
counts as a change. What inotify does not report on a local file system either, and so is
not seen until another change makes the workspace walk the folder: a file changed through a
hard link from outside the folder, writes through a shared memory mapping, and a file
system mounted over a folder inside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
import sys

log = logging.getLogger("rlmd.workspace")

# <sys/inotify.h>
_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000  # comes unasked, as do IN_UNMOUNT and IN_Q_OVERFLOW: changes too
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
"""Every change to an entry (reads and opens are left out: the load's own reads must not
look like changes)."""
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name

LOCAL_FILE_SYSTEMS = {
    0xEF53: "ext2/3/4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x858458F6: "ramfs",
    0x794C7630: "overlay",
    0x2FC12FC1: "zfs",
    0xF2F52010: "f2fs",
    0xCA451A4E: "bcachefs",
    0x3153464A: "jfs",
    0x52654973: "reiserfs",
}
"""``statfs`` magic numbers of the file systems whose changes all pass through this kernel
(so inotify sees them); any other (network, FUSE, 9p, unknown) gets no watch."""

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            lib.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            _libc = lib
    return _libc


def _watch_limit() -> int:
    """The most folders one watch may hold: a quarter of the user's inotify watch limit
    (shared with every other program of the user: editors watch folders too)."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as fh:
            return max(1, int(fh.read()) // 4)
    except (OSError, ValueError):
        return 8192 // 4


def _fs_magic(lib: ctypes.CDLL, path: str) -> int | None:
    """The ``f_type`` of the file system ``path`` is on, or ``None`` if ``statfs`` fails."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if lib.statfs(os.fsencode(path), buf) != 0:
        return None
    # f_type is the first field, a __fsword_t (a C long on every Linux ABI)
    return int(struct.unpack_from("l", buf.raw)[0]) & 0xFFFFFFFF


class FolderWatch:
    """Watches the folders of one codebase as its load walks them (see the module
    docstring). Not thread-safe: the workspace that owns it uses it while it holds the
    workspace, from one thread at a time.

    Use: give :meth:`add` to :func:`rlmd.context.load_codebase` as ``on_folder``; after the
    load, keep the watch unless :attr:`broken`; before the next task, :meth:`changed`
    says whether the folder must be walked again.

    Raises:
        OSError: inotify is not available here (not Linux, or the user's inotify
            instances are used up).
    """

    _fd = -1  # what close() and __del__ see of an instance whose __init__ raised

    def __init__(self) -> None:
        lib = _lib()
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available on this platform")
        fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._lib, self._fd = lib, fd
        self._limit = _watch_limit()
        self._folders: dict[int, str] = {}  # watch descriptor -> folder, relative, "" or "a/b/"
        self._devices: dict[int, bool] = {}  # st_dev -> on a local file system
        self._root: tuple[str, int, int] | None = None  # path, st_dev, st_ino
        self._pending: set[str] | None = None  # changes seen: paths to read again
        self._whole = False  # a change the names do not place: walk the whole folder
        self.broken: str | None = None
        """Why this watch cannot be trusted to see every change (``None``: it can)."""

    def add(self, path: str, rel: str, st: os.stat_result) -> None:
        """Watch the folder at ``path`` (``rel``: its relative path, ``""`` for the root,
        else ending with ``/``; ``st``: its ``lstat``), before it is listed. A folder that
        vanished or became unreadable meanwhile is passed over (its parent's watch reports
        that); anything else that keeps it from being watched marks the watch
        :attr:`broken`. Never raises."""
        if self.broken is not None:
            return
        if rel == "":
            self._root = (path, st.st_dev, st.st_ino)
        local = self._devices.get(st.st_dev)
        if local is None:
            magic = _fs_magic(self._lib, path)
            local = self._devices[st.st_dev] = magic in LOCAL_FILE_SYSTEMS
            if not local:
                self.broken = f"{path} is on a file system inotify may not see all changes of" + (
                    "" if magic is None else f" (statfs type {magic:#x})"
                )
                return
        if len(self._folders) >= self._limit:
            self.broken = f"more than {self._limit} folders (a quarter of the inotify limit)"
            return
        wd = self._lib.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                return  # gone, swapped or unreadable: an event in its parent says so
            self.broken = f"inotify_add_watch {path}: {os.strerror(err)}"
            return
        self._folders[wd] = rel

    def changed(self) -> set[str] | None:
        """Whether anything in the folder changed since the load that filled this watch
        began: ``None`` when nothing did (the load's codebase is current), else the relative
        paths the kernel named (files to read again even when their size and times look
        unchanged: an edit within the file system's time granularity), possibly empty (the
        folder's path now leads elsewhere, or events were lost: walk it all). Once a change
        is seen, every later call returns it too (with any new ones): a walk that then
        fails must be tried again. Blocking only for the kernel's queue (a read of at most
        its 16,384 events); call it from a worker thread.

        Raises:
            RuntimeError: the watch is :attr:`broken` or closed (it says nothing then).
        """
        if self.broken is not None or self._fd < 0:
            raise RuntimeError(f"the folder watch cannot be trusted: {self.broken or 'closed'}")
        pending = self._pending
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if pending is None:
                pending = set()
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
                at += _EVENT.size + size
                folder = self._folders.get(wd)
                if mask & _IN_IGNORED:  # the watch went with its folder (its parent said so)
                    self._folders.pop(wd, None)
                    self._whole = self._whole or folder == ""
                    continue
                if folder is None or mask & (_IN_Q_OVERFLOW | _IN_UNMOUNT):
                    self._whole = True  # events lost, or a file system unmounted
                elif name:
                    pending.add(folder + os.fsdecode(name))
                elif folder == "":  # the root itself (its parent names a folder below it)
                    self._whole = True
        if pending is None and not self._same_root():
            pending = set()
            self._whole = True
        self._pending = pending
        return None if pending is None else set(pending)

    @property
    def complete(self) -> bool:
        """Whether the names :meth:`changed` returned place every change (the folders
        holding them are all that must be listed again): ``False`` after lost events (the
        kernel's queue overflowed), a change to the root folder itself, or the root's path
        leading elsewhere: then the whole folder must be walked."""
        return not self._whole and self._pending is not None and self._same_root()

    def clear(self) -> None:
        """Forget the changes seen so far: a refresh that keeps this watch brought them in
        (changes made since are still in the kernel's queue)."""
        self._pending = None
        self._whole = False

    def _same_root(self) -> bool:
        """Whether the root's path still leads to the folder watched (one of its parents,
        which no watch covers, may have been renamed and another put in its place)."""
        if self._root is None:
            return False
        path, dev, ino = self._root
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (dev, ino)

    @property
    def folders(self) -> int:
        """How many folders are watched."""
        return len(self._folders)

    def close(self) -> None:
        """Drop every watch (idempotent)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
            self._folders.clear()

    def __del__(self) -> None:  # one filled by a walk whose waiter was cancelled
        self.close()


def open_watch() -> FolderWatch | None:
    """A new :class:`FolderWatch`, or ``None`` (logged at debug level) where inotify is not
    available. Never raises."""
    try:
        return FolderWatch()
    except OSError as exc:
        log.debug("no folder watch: %s", exc)
        return None

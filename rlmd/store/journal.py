"""The store's step journal: one append-only file per open :class:`~rlmd.store.Store`, so a
step's events are kept with one ``write()`` instead of a SQLite transaction.

A journal lives in the folder ``<database>-steps/`` as ``<pid>-<random>-journal`` (mode
0600; the ``-journal`` ending makes the context loader skip it as a SQLite side file). Each
line is one step's batch: an ASCII JSON array of ``[kind, run_id, depth, node_id, parent_id, ts,
data]`` records, ``data`` already JSON-safe and redacted. One line is one ``write()`` to a
file opened ``O_APPEND``: once it returns, the bytes are the kernel's and survive a SIGKILL
of the writer, exactly as a SQLite commit does at the store's ``synchronous = NORMAL``
(WAL frames written, no fsync): neither survives a power loss or an OS crash. A write cut
short by the kill leaves a torn last line, which :meth:`DeadJournal.records` drops (that
step had not started: its write had not returned).

The owner holds an exclusive ``flock`` on its file while it is open; the kernel drops it
when the process dies, however it dies. So a journal another process can lock belongs to a
process that is gone (or has closed it): :func:`dead_journals` yields those for the store
to replay. A file is created under a ``tmp-`` name, locked, then renamed into place, so a
replayer never takes a journal whose owner has not locked it yet. Which of a journal's
records are already in the database is the store's business (a count kept in SQLite, in
the transaction that applies them).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("rlmd.store")

SUFFIX = "-journal"
FOLDER_SUFFIX = "-steps"

Record = list[Any]
"""``[kind, run_id, depth, node_id, parent_id, ts, data]``: one event, as journalled."""


def folder_of(db_path: str) -> str:
    """The journal folder of the database at ``db_path``."""
    return os.path.abspath(db_path) + FOLDER_SUFFIX


class Journal:
    """This process's journal for one store, locked while open.

    Args:
        db_path: the database file; the folder is made (0700) next to it if missing.

    Raises:
        OSError: the folder or file cannot be made, or the lock taken.

    Attributes:
        name: the file's name (the key of its applied count in the database).
        written: records appended so far.
    """

    def __init__(self, db_path: str) -> None:
        folder = folder_of(db_path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.name = f"{os.getpid()}-{os.urandom(6).hex()}{SUFFIX}"
        self.path = os.path.join(folder, self.name)
        tmp = os.path.join(folder, "tmp-" + self.name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
        self._fd = os.open(tmp, flags | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(self._fd)
            os.unlink(tmp)
            raise
        self.written = 0

    def append(self, records: list[Record]) -> None:
        """Append ``records`` as one line with one ``write()`` (a short write, which a
        regular file gives only when the disk is full, is finished with more).

        Raises:
            OSError: the write failed (disk full, I/O error): the line may be torn, so the
                caller must stop using this journal.
            TypeError / ValueError: a record is not JSON-encodable (nothing written).
        """
        # ASCII JSON: a third faster to make than UTF-8 text, and lone surrogates stay valid
        view = memoryview((json.dumps(records, separators=(",", ":")) + "\n").encode("ascii"))
        while view:
            view = view[os.write(self._fd, view) :]
        self.written += len(records)

    def append_json(self, records: list[str]) -> None:
        """:meth:`append` for records already encoded, each one ASCII JSON text (the
        store's data is made JSON once, not once more here).

        Raises:
            OSError: as :meth:`append`.
            UnicodeEncodeError: a record is not ASCII (nothing written).
        """
        view = memoryview(("[" + ",".join(records) + "]\n").encode("ascii"))
        while view:
            view = view[os.write(self._fd, view) :]
        self.written += len(records)

    def close(self, *, remove: bool) -> None:
        """Release the lock; with ``remove``, delete the file first (every record applied).
        Safe twice."""
        if self._fd < 0:
            return
        if remove:
            try:
                os.unlink(self.path)
            except OSError as exc:
                log.warning("could not remove the step journal %s: %r", self.path, exc)
        os.close(self._fd)
        self._fd = -1


class DeadJournal:
    """A journal whose owner is gone, locked by this process (see :func:`dead_journals`).

    Attributes:
        name: the file's name; pid: the process that wrote it.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.name = os.path.basename(path)
        head = self.name.split("-", 1)[0]
        self.pid = int(head) if head.isdigit() else None
        self._fd = fd

    def records(self) -> list[Record]:
        """Every record, in order; a line that does not decode (a torn last write, or damage)
        is dropped with a warning. Raises OSError when the file cannot be read."""
        with os.fdopen(os.dup(self._fd), "rb") as f:
            f.seek(0)
            lines = f.read().split(b"\n")
        out: list[Record] = []
        for number, raw in enumerate(lines, 1):
            if not raw:
                continue
            try:
                batch = json.loads(raw)
                if not isinstance(batch, list) or not all(_is_record(r) for r in batch):
                    raise ValueError("not a list of records")
            except ValueError as exc:
                log.warning("step journal %s line %d dropped: %r", self.path, number, exc)
                continue
            out.extend(batch)
        return out

    def remove(self) -> None:
        """Delete the file and release it."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.release()

    def release(self) -> None:
        """Release the lock, keeping the file (for a later replay). Safe twice."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def dead_journals(db_path: str) -> Iterator[DeadJournal]:
    """The journals of ``db_path`` whose owner no longer holds them, each locked while the
    caller uses it (the caller removes or releases it). ``tmp-`` files that can be locked
    are deleted: their owner died before writing anything to them. A missing folder yields
    nothing; a file that cannot be opened is skipped with a warning."""
    folder = folder_of(db_path)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # its owner removed it meanwhile
        except OSError as exc:
            log.warning("could not open the step journal %s: %r", path, exc)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner is alive
            os.close(fd)
            continue
        if name.startswith("tmp-"):
            os.unlink(path)
            os.close(fd)
            continue
        yield DeadJournal(path, fd)


def journal_pids(db_path: str) -> set[int]:
    """The pids named by the journal files of ``db_path`` now (live writers, and dead ones
    whose journal was not replayed whole)."""
    try:
        names = os.listdir(folder_of(db_path))
    except OSError:
        return set()
    heads = (n.removeprefix("tmp-").split("-", 1)[0] for n in names if n.endswith(SUFFIX))
    return {int(h) for h in heads if h.isdigit()}


def _is_record(r: Any) -> bool:
    return (
        isinstance(r, list)
        and len(r) == 7
        and isinstance(r[0], str)
        and isinstance(r[1], str)
        and isinstance(r[6], dict)
    )

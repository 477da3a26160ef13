"""Host working folders named after the rlmd process that owns them, and reaped when it died.

A killed rlmd never removes its sandboxes' working folders (one per kill, each as large as
model code made it). Each folder's name carries its owner's pid and start time
(``rlmd-sandbox-<pid>-<start>-<random>``); the first folder a process makes sweeps the
temporary folder for those of owners that are gone, as the container backend does for
containers and the subprocess backend for cgroups.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
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


def make(kind: str) -> str:
    """A new private folder ``rlmd-<kind>-<pid>-<start>-<random>`` in the temporary folder
    (``kind``: ``"sandbox"``, ``"container"`` or ``"inprocess"``); the first call in a
    process reaps the folders of dead owners first (see :func:`reap_stale`).

    Raises:
        OSError: the temporary folder is not writable.
    """
    _reap_once()
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"rlmd-{kind}-{pid}-{start_time(pid) or 'x'}-")


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

"""Paging a stopped workspace's variables out of its checkpoint.

A workspace whose sandbox is stopped lists the variables its checkpoint describes
(``checkpoint.json``), in the order a live REPL pages them (sorted by name, code point
order; :meth:`rlmd.sandbox.base.Sandbox.list_variables_page`). Reading and sorting the
descriptions of 200,000 variables takes 1.6 s, so :class:`Listings` keeps the
sorted listing of the checkpoints paged last for a while: a client walking the pages reads
the file once. Everything heavy runs in a worker thread in small steps (the JSON member by
member, the sort in runs merged in Python), so the event loop gets the GIL back every few
milliseconds meanwhile.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmd.workspace import checkpoint as ckpt_mod

SORT_RUN = 8192
"""Names sorted by one C call in :func:`sorted_stepwise` (about 1 ms)."""


def sorted_stepwise(names: list[str]) -> list[str]:
    """``sorted(names)``, in runs of :data:`SORT_RUN` merged by :func:`heapq.merge` (Python
    code): one ``sorted`` of 200,000 names holds the GIL ~40 ms, this hands it back between
    runs and merge steps (call it in a worker thread)."""
    if len(names) <= SORT_RUN:
        return sorted(names)
    runs = [sorted(names[i : i + SORT_RUN]) for i in range(0, len(names), SORT_RUN)]
    return list(heapq.merge(*runs))


@dataclass
class Listing:
    """A checkpoint's variables, ready to page.

    Attributes:
        names: every saved variable's name, sorted (code point order).
        variables: name → ``{"type", "size", "preview", "bytes"}`` as the checkpoint says.
        skipped: name → why it was not saved.
        taken_at: when the checkpoint was taken, seconds since the epoch.
    """

    names: list[str]
    variables: dict[str, dict[str, Any]]
    skipped: dict[str, str]
    taken_at: float

    def page(self, names: list[str], offset: int, limit: int) -> list[dict[str, Any]]:
        """``{"name", "type", "size", "preview"}`` of ``names[offset:offset + limit]``."""
        out = []
        for name in names[offset : offset + limit]:
            info = self.variables[name]
            out.append(
                {
                    "name": name,
                    "type": info["type"],
                    "size": info["size"],
                    "preview": info["preview"],
                }
            )
        return out


def read_listing(path: Path) -> Listing | None:
    """The :class:`Listing` of the checkpoint at ``path``, ``None`` if there is none (or it
    was unreadable: :func:`rlmd.workspace.checkpoint.load` sets such a file aside). Blocking:
    call it in a worker thread."""
    saved = ckpt_mod.load(path)
    if saved is None:
        return None
    return Listing(
        sorted_stepwise(list(saved.variables)), saved.variables, saved.skipped, saved.taken_at
    )


def matching(names: list[str], match: str) -> list[str]:
    """The names that contain ``match`` (all for ``""``), in their order. A Python loop:
    in a worker thread it hands the GIL back as it goes."""
    return [n for n in names if match in n] if match else names


class Listings:
    """The listings of the checkpoints paged last (at most ``size``), each used while its
    file is the same (device, inode, modification time, size: a new checkpoint is a new
    file, written aside and renamed) and dropped ``keep_s`` seconds after its last use.

    Use from one event loop.
    """

    def __init__(self, *, size: int = 2, keep_s: float = 120.0) -> None:
        self.size = size
        self.keep_s = keep_s
        self._entries: dict[Path, tuple[tuple[int, ...], Listing, float]] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def get(self, path: Path) -> Listing | None:
        """The listing of the checkpoint at ``path`` (read in a worker thread unless kept),
        or ``None`` when there is none."""
        now = time.monotonic()
        self._expire(now)
        try:
            st = os.stat(path)
        except OSError:
            self._entries.pop(path, None)
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        entry = self._entries.get(path)
        if entry is not None and entry[0] == key:
            self._entries[path] = (key, entry[1], now)
            return entry[1]
        listing = await asyncio.to_thread(read_listing, path)
        if listing is None:
            self._entries.pop(path, None)
            return None
        self._entries[path] = (key, listing, time.monotonic())
        while len(self._entries) > self.size:  # the least recently used goes
            oldest = min(self._entries, key=lambda p: self._entries[p][2])
            del self._entries[oldest]
        self._arm()
        return listing

    def _expire(self, now: float) -> None:
        for path in [p for p, (_, _, used) in self._entries.items() if now - used >= self.keep_s]:
            del self._entries[path]

    def _arm(self) -> None:
        """Drop what has not been used for ``keep_s`` even when no call comes (a listing of
        200,000 variables holds ~75 MB)."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._entries:
            self._timer = None
            return
        due = min(used for _, _, used in self._entries.values()) + self.keep_s
        delay = max(0.0, due - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._expire(time.monotonic())
        self._arm()

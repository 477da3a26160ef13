"""The kernel's view of its threads before each cell (``core._thread_ids``): the last
listing of ``/proc/self/task`` is reused only while it is still right."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rlmd.kernel import core

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="needs /proc/self/task (Linux)"
)


def _listed() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _settle(expected: set[int]) -> None:
    """Wait until the thread count procfs gives is ``expected``'s (a thread that has
    returned from ``join`` may still be counted for a moment)."""
    deadline = time.monotonic() + 10
    while os.stat("/proc/self/task").st_nlink != 2 + len(expected):
        assert time.monotonic() < deadline, "the thread count did not settle"
        time.sleep(0.001)


def _blocked_thread() -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    return thread, stop


def test_a_thread_started_since_the_last_listing_is_seen() -> None:
    before = core._thread_ids()
    assert before == _listed()
    thread, stop = _blocked_thread()
    try:
        now = core._thread_ids()
        assert thread.native_id in now and now == before | {thread.native_id}
    finally:
        stop.set()
        thread.join()


def test_a_thread_that_ended_while_another_started_is_not_taken_for_it() -> None:
    """The same number of threads, not the same threads: the count alone would reuse the
    last listing."""
    first, stop_first = _blocked_thread()
    try:
        _settle(_listed())
        assert first.native_id in core._thread_ids()
        stop_first.set()
        first.join()
        second, stop_second = _blocked_thread()
        try:
            _settle(_listed())
            now = core._thread_ids()
            assert second.native_id in now and first.native_id not in now
            assert now == _listed()
        finally:
            stop_second.set()
            second.join()
    finally:
        stop_first.set()


def test_a_lasting_thread_is_not_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's channel watcher lives as long as the process: with the count
    unchanged, the listing is reused without a look-up of it."""
    thread, stop = _blocked_thread()
    try:
        _settle(_listed())
        monkeypatch.setattr(core, "_lasting", set(core._lasting))
        for native_id in _listed() - {threading.get_native_id()}:
            core.lasting_thread(native_id)
        listed = core._thread_ids()
        assert thread.native_id in listed
        looked_up: list[str] = []
        monkeypatch.setattr(os.path, "exists", lambda p: looked_up.append(p) or True)
        monkeypatch.setattr(os, "listdir", lambda p: pytest.fail("listed again"))
        assert core._thread_ids() == listed
        assert looked_up == []
    finally:
        stop.set()
        thread.join()

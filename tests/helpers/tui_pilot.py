"""Waiting in Textual pilot tests without assuming how fast a loaded machine is."""

from __future__ import annotations

import time


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Pause the pilot until ``predicate()`` is true (an exception counts as not yet).

    Raises:
        AssertionError: still false after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
    raise AssertionError(f"timed out waiting for {what}")

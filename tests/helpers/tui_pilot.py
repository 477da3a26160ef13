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


def record_notifications(app) -> list:
    """Every notification ``app`` is asked to show from now on, as Textual ``Notification``
    objects (``.message``, ``.severity``), in order.

    ``app._notifications`` is no record: a notification reaches it only once its message
    is processed, and leaves it when its timeout (5 s by default) has passed, which a
    loaded machine can outlast between the event and the test's check.
    """
    from textual.notifications import Notification

    seen: list = []
    notify = app.notify

    def recording(message, *, title="", severity="information", timeout=None, markup=True):
        seen.append(Notification(message, title, severity, timeout or 0, markup=markup))
        return notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    app.notify = recording
    return seen

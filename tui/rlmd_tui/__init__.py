"""The rlmd terminal UI (``rlmd tui``): browse, search and follow trajectories, launch tasks.

:class:`~tui.app.RlmdApp` talks to the daemon over JSON-RPC when one runs
(:class:`~tui.backend.DaemonBackend`) and otherwise browses the trajectory store read-only
(:class:`~tui.backend.StoreBackend`).
"""

from __future__ import annotations

from tui.app import RlmdApp, main

__all__ = ["RlmdApp", "main"]

"""The rlmd terminal UI (``rlmd tui``): browse, search and follow trajectories, launch tasks.

:class:`~rlmd_tui.app.RlmdApp` talks to the daemon over JSON-RPC when one runs
(:class:`~rlmd_tui.backend.DaemonBackend`) and otherwise browses the trajectory store read-only
(:class:`~rlmd_tui.backend.StoreBackend`).
"""

from __future__ import annotations

from rlmd_tui.app import RlmdApp, main

__all__ = ["RlmdApp", "main"]

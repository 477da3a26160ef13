"""The daemon's core: store, workspaces, tasks and the notification hub, with no protocol.

One :class:`DaemonCore` per daemon process. Every client connection (Unix socket or stdio)
calls :meth:`DaemonCore.execute` with a command name and its parameter object, and
subscribes to the :attr:`DaemonCore.hub`. The core is the only writer of the trajectory store
in this process (one :class:`~rlmd.store.Store` connection used from the event loop).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rlmd
from rlmd import config, paths
from rlmd.engine import Executor
from rlmd.engine.events import Event
from rlmd.models.registry import Registry
from rlmd.server.errors import SHUTTING_DOWN, CommandError
from rlmd.server.hub import Hub
from rlmd.server.tasks import TaskManager
from rlmd.store import Store
from rlmd.workspace.listing import Listings
from rlmd.workspace.manager import Workspace, WorkspaceManager, WorkspaceSettings

log = logging.getLogger("rlmd.server")


@dataclass
class DaemonOptions:
    """Daemon-wide settings (``rlmd serve`` flags).

    Attributes:
        idle_timeout_s: default seconds before an unused workspace is checkpointed and
            stopped (a project's ``[workspace] idle_timeout_s`` wins); ``None``: never.
        sweep_interval_s: how often idle workspaces are looked for, seconds.
        max_message_bytes: largest JSON-RPC message body a client may send, bytes.
        max_client_buffer_bytes: a client whose unread output passes this is watched, bytes:
            it is dropped when nothing of it drains for ``client_stall_s``.
        client_stall_s: how long a watched client may go without reading a byte, seconds.
        max_client_backlog_bytes: unread output past which even a reading client is dropped
            (bounds the daemon's memory for a reader far slower than the output), bytes.
        store_path: the trajectory database (default: ``paths.store_path()``).
        otlp_endpoint: an OTLP/HTTP traces URL: each task's run tree is sent there as
            OpenTelemetry spans when it ends (:mod:`rlmd.frontdoors.otel`; the ``otel`` extra).
        otlp_content: attach prompts, outputs and code to those spans.
        executor: where tasks' child runs and batches run (``rlmd serve --cluster``);
            ``None``: in the daemon.
    """

    idle_timeout_s: float | None = 600.0
    sweep_interval_s: float | None = None
    max_message_bytes: int = 16 * 1024 * 1024
    max_client_buffer_bytes: int = 32 * 1024 * 1024
    client_stall_s: float = 30.0
    max_client_backlog_bytes: int = 1024 * 1024 * 1024
    store_path: str | None = None
    otlp_endpoint: str | None = None
    otlp_content: bool = False
    executor: Executor | None = None

    def sweep_every(self) -> float:
        if self.sweep_interval_s is not None:
            return self.sweep_interval_s
        if self.idle_timeout_s is None:
            return 30.0
        return max(0.2, min(30.0, self.idle_timeout_s / 4))


def _import_engine() -> None:
    """Import what a run uses, in a thread: done by the first task on the event loop, it
    held every client up (a 27-35 ms callback in ``bench/daemon_load.py --big-only
    --slow-callbacks``, session 21). A thread's import lets the loop run every 5 ms (the
    GIL's switch interval)."""
    import rlmd.engine.loop  # noqa: F401


class DaemonCore:
    """Everything the commands act on (see the module docstring)."""

    def __init__(self, options: DaemonOptions | None = None, *, mode: str = "socket") -> None:
        self.options = options or DaemonOptions()
        self.mode = mode
        self.started_at = time.time()
        self.hub = Hub()
        self.store = Store(self.options.store_path or paths.store_path())
        self.interrupted_at_start = self.store.mark_interrupted()
        self._configs: dict[str, tuple[tuple, config.Settings, Registry]] = {}
        self.workspaces = WorkspaceManager(self._settings_for, self._workspace_changed)
        #: stopped workspaces' checkpoints, sorted for rlmd.workspace.variables' pages
        self.checkpoint_listings = Listings()
        self.tasks = TaskManager(
            self._record, self.hub, self.workspaces, executor=self.options.executor
        )
        self.connections: dict[str, Any] = {}
        self.socket_path: str | None = None
        #: the secret socket clients must send first (see rlmd.server.auth); None: none asked
        self.token: str | None = None
        self.stopping = False
        self._sweeper: asyncio.Task[None] | None = None
        self.record_errors = 0
        self.tracing: Any = None
        if self.options.otlp_endpoint:
            # late import: only with the option, which needs the otel extra
            from rlmd.frontdoors.otel import LiveExporter

            self.tracing = LiveExporter(
                self.store.tree, self.options.otlp_endpoint, content=self.options.otlp_content
            )
            self.hub.add(self.tracing)

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start background work (the idle sweeper, the engine's import). Call from the
        running loop."""
        self._sweeper = asyncio.get_running_loop().create_task(
            self.workspaces.run_sweeper(self.options.sweep_every()), name="idle-sweeper"
        )
        threading.Thread(target=_import_engine, name="rlmd-import-engine", daemon=True).start()

    async def shutdown(self) -> None:
        """Cancel live tasks (recorded as cancelled), checkpoint and stop every workspace,
        close the store. Safe to call twice."""
        if self.stopping:
            return
        self.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.workspaces.refuse_cells()  # a cell queued behind a task must not run meanwhile
        await self.tasks.shutdown()
        await self.workspaces.shutdown()
        if self.tracing is not None:  # send the spans of the tasks that just ended
            await asyncio.to_thread(self.tracing.close)
        for registry in {id(r): r for _, _, r in self._configs.values()}.values():
            try:
                await registry.aclose()
            except Exception:
                log.exception("closing models failed")
        self.store.close()

    def check_open(self) -> None:
        """Raise ``SHUTTING_DOWN`` if the daemon is stopping."""
        if self.stopping:
            raise CommandError(SHUTTING_DOWN, "the daemon is shutting down")

    # -- configuration --------------------------------------------------------------------

    def settings_for(self, folder: str | Path | None) -> tuple[config.Settings, Registry]:
        """A project's settings (user + project config) and its model registry, read again
        when a config file changes.

        Raises:
            ValueError: a config file is invalid (the message names it).
        """
        key = str(folder) if folder else ""
        files = [paths.user_config_path()]
        if folder:
            found = paths.project_config_path(Path(folder))
            if found:
                files.append(found)
        stamp = tuple((str(f), f.stat().st_mtime_ns if f.exists() else 0) for f in files)
        cached = self._configs.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        settings = config.load(Path(folder) if folder else None)
        registry = settings.registry()
        self._configs[key] = (stamp, settings, registry)
        return settings, registry

    def _settings_for(self, folder: Path) -> WorkspaceSettings:
        settings, _ = self.settings_for(folder)
        return config.workspace_settings(
            settings, folder, idle_timeout_s=self.options.idle_timeout_s
        )

    # -- events ---------------------------------------------------------------------------

    def _record(self, event: Event) -> None:
        try:
            self.store.record_batched(event)
        except Exception:  # Store.record never raises, but a closed store might
            self.record_errors += 1
            log.exception("recording %s failed", event.kind)

    def _workspace_changed(self, ws: Workspace, kind: str, data: dict[str, Any]) -> None:
        self.hub.publish(
            "rlmd/workspace",
            {"workspace": ws.folder, "change": kind, "state": ws.state, "data": data},
        )

    # -- health ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The daemon's state (see ``docs/protocol.md``, Health)."""
        states: dict[str, int] = {}
        for ws in self.workspaces.workspaces.values():
            states[ws.state] = states.get(ws.state, 0) + 1
        live = self.tasks.live()
        return {
            "ok": not self.stopping,
            "version": rlmd.__version__,
            "pid": os.getpid(),
            "mode": self.mode,
            "uptime_s": round(time.time() - self.started_at, 3),
            "socket": self.socket_path,
            "store": self.store.path,
            "home": str(paths.home()),
            "clients": len(self.connections),
            "workspaces": {"open": len(self.workspaces.workspaces), "by_state": states},
            "tasks": {
                "running": sum(1 for t in live if t.state == "running"),
                "queued": sum(1 for t in live if t.state == "queued"),
                "started": self.tasks.started,
                "finished": self.tasks.finished,
            },
            "notifications": {"seq": self.hub.seq, "delivered": self.hub.sent},
            "memory_rss_bytes": paths.rss_bytes(),
            "interrupted_at_start": self.interrupted_at_start,
            "store_errors": len(self.store.errors) + self.record_errors,
        }

"""Where the TUI gets its data: the daemon (JSON-RPC, live) or the store (read-only).

Every backend has the same async methods; they return the daemon protocol's shapes (run
dicts, the store's ``tree()`` shape, TaskStatus objects) so the screens do not care which
one they talk to. ``on_note`` (set by the app) receives daemon notifications
(``{"method", "params"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmd.server.client import Client, RpcError


class ReadOnlyError(RuntimeError):
    """The action needs the daemon, and the TUI is browsing the store without one."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs the daemon: start it with `rlmd serve` and reopen")


class Backend:
    """The interface (and the read-only defaults)."""

    live = False
    label = "?"
    on_note: Callable[[dict[str, Any]], None] | None = None

    async def list_runs(
        self,
        *,
        search: str | None = None,
        status: str | None = None,
        workspace: str | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def tree(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    async def workspaces(self) -> list[str]:
        runs = await self.list_runs(limit=500)
        return sorted({r["workspace"] for r in runs if r.get("workspace")})

    async def start(self, params: dict[str, Any]) -> dict[str, Any]:
        raise ReadOnlyError("starting a task")

    async def cancel(self, run_id: str) -> dict[str, Any]:
        raise ReadOnlyError("cancelling a task")

    async def variables(self, workspace: str, offset: int = 0, match: str = "") -> dict[str, Any]:
        """One page of ``rlmd.workspace.variables`` (the daemon's page size), sorted by name:
        from ``offset``, only names containing ``match``. The reply says ``total`` and
        ``next_offset`` (``None`` on the last page; a daemon from before paging sends every
        variable and neither)."""
        raise ReadOnlyError("reading a workspace's variables")

    async def exec(self, workspace: str, code: str) -> dict[str, Any]:
        raise ReadOnlyError("running a cell")

    async def close(self) -> None:
        return None


class StoreUnreadable(RuntimeError):
    """The store file is missing, damaged or not an rlmd store (the message names it)."""


class StoreBackend(Backend):
    """The trajectory store, read-only (no daemon): list, search and open runs.

    A store that does not exist is not created (``--store`` with a typo made an empty one,
    folders and all, and showed no runs); it and a damaged file raise
    :class:`StoreUnreadable` naming the file, and the app tries again at its next poll.
    """

    label = "store (read-only)"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._store = None
        self._version: int | None = None
        self._failed = False

    def _open(self):
        if self._store is None:
            from rlmd.store import Store

            if not self.path.is_file():
                raise StoreUnreadable(
                    f"no trajectory store at {self.path} (nothing recorded there yet; "
                    "rlmd run and the daemon record into the rlmd home's rlmd.db)"
                )
            self._store = Store(self.path)
        return self._store

    def _read(self, what):
        import sqlite3

        try:
            return what(self._open())
        except StoreUnreadable:
            self._failed = True
            raise
        except sqlite3.DatabaseError as exc:  # damaged, foreign, or locked for too long
            self._failed = True
            if self._store is not None and "locked" not in str(exc):
                store, self._store = self._store, None
                with contextlib.suppress(Exception):
                    store.close()
            hint = "" if "locked" in str(exc) else " (damaged, or not an rlmd store)"
            raise StoreUnreadable(f"the trajectory store {self.path}: {exc}{hint}") from exc

    async def list_runs(self, *, search=None, status=None, workspace=None, limit=200):
        def go(store):
            return store.list_runs(
                limit=limit, search=search or None, status=status or None, workspace=workspace
            )

        return await asyncio.to_thread(self._read, go)

    async def tree(self, run_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._read, lambda store: store.tree(run_id))

    async def changed(self) -> bool:
        """Whether another process wrote to the store since the last call (``PRAGMA
        data_version``: cheap, so the app polls it to stay live without a daemon); also
        ``True`` when the store can be read again after a read failed (it was created, or
        unlocked).

        Raises:
            StoreUnreadable: see the class docstring.
        """

        def go(store) -> int:
            with store._lock:
                return store.db.execute("PRAGMA data_version").fetchone()[0]

        version = await asyncio.to_thread(self._read, go)
        failed, self._failed = self._failed, False
        seen, self._version = self._version, version
        return failed or (seen is not None and version != seen)

    async def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class _NotifyingClient(Client):
    """A :class:`Client` that hands notifications to a callback instead of keeping them."""

    callback: Callable[[dict[str, Any]], None] | None = None
    on_lost: Callable[[str], None] | None = None
    closing = False

    def _fail(self, exc: Exception) -> None:
        first = not self.closed
        super()._fail(exc)
        if first and not self.closing and self.on_lost is not None:
            self.on_lost(str(exc) or type(exc).__name__)

    async def close(self) -> None:
        self.closing = True
        await super().close()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" not in msg and self.callback is not None:
            try:
                self.callback({"method": msg["method"], "params": msg.get("params")})
            except Exception:  # a UI bug must not kill the read loop
                pass
            return
        super()._dispatch(msg)


class DaemonBackend(Backend):
    """The daemon over its Unix socket: everything, live. When the connection ends (the
    daemon stopped or crashed) it posts a ``{"method": "rlmd/lost"}`` note; the app then
    reconnects with a new backend."""

    live = True

    def __init__(self, client: Client, socket: str | Path) -> None:
        self.client = client
        self.socket = Path(socket)
        self.lost: str | None = None  # why the connection ended, once it has

    @property
    def label(self) -> str:  # type: ignore[override]
        return "daemon lost: reconnecting…" if self.lost else "daemon"

    @classmethod
    async def connect(cls, socket: str | Path, timeout: float = 2.0) -> DaemonBackend:
        """Connect and subscribe to summary events.

        Raises:
            OSError / TimeoutError: no daemon answers at ``socket``.
        """
        client = await _NotifyingClient.connect(socket, timeout=timeout)
        backend = cls(client, socket)
        client.callback = backend._note
        client.on_lost = backend._lost
        await client.command("rlmd.subscribe", {"events": "summary", "progress": "none"})
        return backend

    def _note(self, note: dict[str, Any]) -> None:
        if self.on_note is not None:
            self.on_note(note)

    def _lost(self, why: str) -> None:
        """The daemon went away: tell the app with a ``rlmd/lost`` note (it reconnects)."""
        self.lost = why
        self._note({"method": "rlmd/lost", "params": {"reason": why}})

    async def list_runs(self, *, search=None, status=None, workspace=None, limit=200):
        params: dict[str, Any] = {"limit": min(limit, 500)}
        if search:
            params["search"] = search
        if status:
            params["status"] = status
        if workspace:
            params["workspace"] = workspace
        return (await self.client.command("rlmd.runs.list", params))["runs"]

    async def tree(self, run_id: str) -> dict[str, Any]:
        result = await self.client.command(
            "rlmd.runs.get", {"run_id": run_id, "tree": True}, timeout=120
        )
        if result.get("tree") is None:  # a queued task: no run in the store yet
            raise LookupError(f"run {run_id} has not started yet (queued)")
        return result["tree"]

    async def workspaces(self) -> list[str]:
        listed = await self.client.command("rlmd.workspace.list")
        found = {w["workspace"] for w in listed["workspaces"]}
        return sorted(found | set(await super().workspaces()))

    async def start(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.client.command("rlmd.task.start", params)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        return await self.client.command("rlmd.task.cancel", {"run_id": run_id})

    async def variables(self, workspace: str, offset: int = 0, match: str = "") -> dict[str, Any]:
        # only what differs from the defaults: a daemon from before paging refuses the names
        params: dict[str, Any] = {"workspace": workspace}
        if offset:
            params["offset"] = offset
        if match:
            params["match"] = match
        return await self.client.command("rlmd.workspace.variables", params)

    async def exec(self, workspace: str, code: str) -> dict[str, Any]:
        return await self.client.command(
            "rlmd.workspace.exec", {"workspace": workspace, "code": code}, timeout=3700
        )

    async def close(self) -> None:
        await self.client.close()


def describe(exc: BaseException) -> str:
    """A daemon or backend error in words: a JSON-RPC error's message without its code, a lost
    connection as such, else the exception's text (its type when it has none)."""
    if isinstance(exc, RpcError):
        return exc.message or f"the daemon refused (code {exc.code})"
    if isinstance(exc, ConnectionError):
        return f"the daemon is not reachable ({exc or 'connection closed'})"
    return str(exc) or type(exc).__name__

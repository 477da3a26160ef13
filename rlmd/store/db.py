"""The trajectory store: opening the database and recording engine events (writes only).

Reads live in :mod:`rlmd.store.queries` (mixed into :class:`Store`), the schema in
:mod:`rlmd.store.schema`.

Event handling (see :mod:`rlmd.engine.events` for the contract):

* ``run.started`` inserts the run (status ``"running"``, ``pid`` = the engine's pid if it
  sent one, else this process's).
* ``<kind>.started`` inserts node ``node_id`` (status ``"running"``); ``<kind>.finished``
  merges its payload into the node and sets status, ``finished_at``, latency and tokens.
  A new ``iteration.started`` closes the run's previous iteration.
* ``compaction`` inserts a finished node.
* ``sandbox.started`` merges into the run's ``sandbox`` JSON.
* ``run.finished`` sets status, answer, usage, error, ``finished_at`` and closes the run's
  nodes still running.

Every event is one ``BEGIN IMMEDIATE`` transaction. :meth:`Store.record` never raises:
events for unknown runs or nodes are stored anyway (a placeholder run row is created) and
counted in :attr:`Store.anomalies`; failures are logged and kept in :attr:`Store.errors`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from rlmd.engine.events import Event, new_id
from rlmd.store import schema
from rlmd.store.codec import dumps, loads, merge_text, split_text, to_jsonable
from rlmd.store.queries import Queries

log = logging.getLogger("rlmd.store")

NODE_KINDS = ("iteration", "model_call", "cell", "compaction")
NODE_STATUSES = ("running", "ok", "error", "timeout")
MAX_ERRORS_KEPT = 100
PLACEHOLDER_ERROR = "run.started was never recorded for this run"


class Store(Queries):
    """The SQLite trajectory store.

    Args:
        path: the database file (created with its folder if missing); ``None`` means
            :func:`rlmd.paths.store_path`; ``":memory:"`` works for tests.
        check_interrupted: call :meth:`mark_interrupted` once opened (do this when opening
            the store to list runs).
        busy_timeout_s: how long a write waits for another process's write lock.

    Raises:
        StoreVersionError: the file was written by a newer rlmd.
        sqlite3.DatabaseError: the file is not a SQLite database, or stayed locked.

    Attributes:
        db: the :class:`sqlite_utils.Database`.
        anomalies: counts of odd events (``"unknown_run"``, ``"unknown_node"``,
            ``"unknown_kind"``, ``"duplicate_run_started"``, ``"missing_node_id"``,
            ``"error"``).
        errors: the last failures of :meth:`record` as ``"kind: exception"`` strings.

    One instance is safe to share between threads (a lock serialises its use); several
    processes may open the same file at once (WAL, busy timeout).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        check_interrupted: bool = False,
        busy_timeout_s: float = 5.0,
    ) -> None:
        if path is None:
            from rlmd.paths import store_path

            path = store_path()
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False)
        self.db = sqlite_utils.Database(conn, execute_plugins=False)
        self._lock = threading.RLock()
        self.anomalies: Counter[str] = Counter()
        self.errors: list[str] = []
        self._redact: Callable[[Any], Any] | None = None
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000):d}")
            self._enable_wal(busy_timeout_s)
            self.db.execute("PRAGMA synchronous = NORMAL")
            schema.migrate(self.db)
        except BaseException:
            conn.close()
            raise
        if check_interrupted:
            self.mark_interrupted()

    def _enable_wal(self, timeout_s: float) -> None:
        """Switch to WAL, retrying while another process holds the file: switching the
        journal mode can fail with "database is locked" without waiting on the busy timeout
        (two processes opening a new file at once)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.db.enable_wal()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (the last one to close checkpoints the WAL). Safe twice."""
        with self._lock:
            try:
                self.db.close()
            except sqlite3.ProgrammingError:
                pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One short write transaction, taking the write lock up front so a read-then-write
        never fails with a stale snapshot."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.rollback()
            raise
        self.db.commit()

    # -- the event sink ---------------------------------------------------------------------
    def record(self, event: Event) -> None:
        """Store one engine event (an :data:`rlmd.engine.events.EventSink`).

        Input: an :class:`~rlmd.engine.events.Event`; its ``data`` is made JSON-safe and
        passed through :func:`rlmd.models.redact.redact` (when that module exists) first.
        Never raises: failures are logged, counted as ``anomalies["error"]`` and appended to
        :attr:`errors`.
        """
        kind = getattr(event, "kind", "?")
        try:
            with self._lock:
                data = event.data if isinstance(event.data, dict) else {"value": event.data}
                data = self._redactor()(to_jsonable(data))
                if not isinstance(data, dict):
                    data = {"value": data}
                with self._write():
                    self._dispatch(event, data)
        except Exception as exc:
            self.anomalies["error"] += 1
            self.errors.append(f"{kind}: {exc!r}")
            del self.errors[:-MAX_ERRORS_KEPT]
            log.warning(
                "could not record %s event for run %s: %r", kind, getattr(event, "run_id", "?"), exc
            )

    __call__ = record

    def _redactor(self) -> Callable[[Any], Any]:
        """``rlmd.models.redact.redact`` if importable, else the identity (resolved once)."""
        if self._redact is None:
            try:
                from rlmd.models.redact import redact
            except ImportError:
                log.warning("rlmd.models.redact is missing: events are stored unredacted")
                redact = _identity
            self._redact = redact
        return self._redact

    def _dispatch(self, event: Event, data: dict[str, Any]) -> None:
        kind = event.kind
        if kind == "run.started":
            self._run_started(event, data)
        elif kind == "run.finished":
            self._run_finished(event, data)
        elif kind == "sandbox.started":
            self._sandbox_started(event, data)
        elif kind == "compaction":
            self._node_point(event, data, "compaction")
        elif kind.endswith(".started") and kind.count(".") == 1:
            self._node_started(event, data, kind.split(".")[0])
        elif kind.endswith(".finished") and kind.count(".") == 1:
            self._node_finished(event, data, kind.split(".")[0])
        else:
            self._anomaly("unknown_kind", f"event kind {kind!r} is not stored")

    def _anomaly(self, name: str, message: str) -> None:
        if not self.anomalies[name]:
            log.warning("trajectory store: %s (further %s events are only counted)", message, name)
        self.anomalies[name] += 1

    # -- runs -------------------------------------------------------------------------------
    def _run_row(self, run_id: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT id, root_run_id, workspace, error, sandbox FROM runs WHERE id = ?", [run_id]
        ).fetchone()
        if row is None:
            return None
        return dict(zip(("id", "root_run_id", "workspace", "error", "sandbox"), row, strict=True))

    def _run_started(self, event: Event, data: dict[str, Any]) -> None:
        models = data.get("models") if isinstance(data.get("models"), dict) else {}
        parent_run_id = data.get("parent_run_id")
        parent = self._run_row(parent_run_id) if parent_run_id else None
        root_run_id = data.get("root_run_id") or (
            (parent or {}).get("root_run_id") or parent_run_id or event.run_id
        )
        pid = data.get("pid")
        meta = {
            "root_run_id": root_run_id,
            "parent_run_id": parent_run_id,
            "parent_node_id": data.get("parent_node_id"),
            "depth": event.depth,
            "question": _text(data.get("question")),
            "root_model": _model_name(models.get("root")),
            "sub_model": _model_name(models.get("sub")),
            "context_meta": _json_or_none(data.get("context")),
            "models": _json_or_none(data.get("models")),
            "sandbox": _json_or_none(data.get("sandbox")),
            "budget": _json_or_none(data.get("budget")),
            "workspace": data.get("workspace") or (parent or {}).get("workspace"),
            "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else os.getpid(),
        }
        existing = self._run_row(event.run_id)
        if existing is None:
            self.db.table("runs").insert(
                {"id": event.run_id, "status": "running", "started_at": event.ts, **meta}
            )
            return
        if existing["error"] == PLACEHOLDER_ERROR:
            meta["error"] = None
        else:
            self._anomaly("duplicate_run_started", f"run {event.run_id} started twice")
        self.db.table("runs").update(event.run_id, meta)

    def _ensure_run(self, event: Event) -> None:
        """Create a placeholder row for a run whose ``run.started`` never arrived."""
        if self._run_row(event.run_id) is not None:
            return
        self._anomaly("unknown_run", f"{event.kind} event for unknown run {event.run_id}")
        self.db.table("runs").insert(
            {
                "id": event.run_id,
                "root_run_id": event.run_id,
                "depth": event.depth,
                "status": "running",
                "started_at": event.ts,
                "pid": os.getpid(),
                "error": PLACEHOLDER_ERROR,
            }
        )

    def _sandbox_started(self, event: Event, data: dict[str, Any]) -> None:
        self._ensure_run(event)
        current = loads(self._run_row(event.run_id)["sandbox"])
        merged = dict(current) if isinstance(current, dict) else {}
        sandbox = data.get("sandbox")
        merged.update(sandbox if isinstance(sandbox, dict) else data)
        self.db.table("runs").update(event.run_id, {"sandbox": dumps(merged)})

    def _run_finished(self, event: Event, data: dict[str, Any]) -> None:
        self._ensure_run(event)
        status = data.get("status") or "completed"
        updates: dict[str, Any] = {
            "status": str(status),
            "answer": _text(data.get("answer")),
            "answer_source": data.get("answer_source"),
            "usage": _json_or_none(data.get("usage")),
            "error": _text(data.get("error")),
            "finished_at": event.ts,
        }
        iterations = data.get("iterations")
        if isinstance(iterations, int) and not isinstance(iterations, bool):
            updates["iterations"] = iterations
        self.db.table("runs").update(event.run_id, updates)
        node_status = "timeout" if status == "max_time" else "error"
        self._close_running(event.run_id, event.ts, node_status)

    def _close_running(
        self, run_id: str, ts: float, status: str, iteration_status: str = "ok"
    ) -> None:
        """Finish the run's nodes still running: iterations get ``iteration_status``, the
        others ``status``. (A bulk conditional update: sqlite-utils has no update-where.)"""
        self.db.execute(
            "UPDATE nodes SET status = CASE WHEN kind = 'iteration' THEN ? ELSE ? END, "
            "finished_at = ?, latency_s = COALESCE(latency_s, ? - started_at) "
            "WHERE run_id = ? AND status = 'running'",
            [iteration_status, status, ts, ts, run_id],
        )

    def mark_interrupted(self, *, force: bool = False) -> list[str]:
        """Mark runs left ``"running"`` by a process that no longer exists as ``"interrupted"``
        (``finished_at`` = now, their running nodes become ``"error"``).

        Args:
            force: interrupt every running run, whatever its pid.

        Returns:
            The ids of the runs marked.

        Raises:
            sqlite3.OperationalError: the database stayed locked past the busy timeout.
        """
        with self._lock:
            rows = self.db.execute("SELECT id, pid FROM runs WHERE status = 'running'").fetchall()
            dead = [run_id for run_id, pid in rows if force or not pid_alive(pid)]
            if not dead:
                return []
            now = time.time()
            with self._write():
                for run_id, pid in rows:
                    if run_id not in dead:
                        continue
                    self.db.execute(
                        "UPDATE runs SET status = 'interrupted', finished_at = ?, "
                        "error = COALESCE(error, ?) WHERE id = ? AND status = 'running'",
                        [
                            now,
                            f"the recording process (pid {pid}) ended before the run finished",
                            run_id,
                        ],
                    )
                    self._close_running(run_id, now, "error", "error")
            return dead

    # -- nodes ------------------------------------------------------------------------------
    def _node_row(self, node_id: str) -> dict[str, Any] | None:
        rows = list(self.db.table("nodes").rows_where("id = ?", [node_id]))
        return rows[0] if rows else None

    def _next_seq(self, run_id: str) -> int:
        row = self.db.execute("SELECT MAX(seq) FROM nodes WHERE run_id = ?", [run_id]).fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def _node_id(self, event: Event) -> str:
        if event.node_id:
            return str(event.node_id)
        self._anomaly("missing_node_id", f"{event.kind} event without node_id")
        return new_id()

    def _insert_node(
        self, event: Event, node_id: str, kind: str, data: dict[str, Any], **cols: Any
    ) -> None:
        rest, text = split_text(data)
        self.db.table("nodes").insert(
            {
                "id": node_id,
                "run_id": event.run_id,
                "parent_id": event.parent_id,
                "depth": event.depth,
                "kind": kind,
                "seq": self._next_seq(event.run_id),
                "started_at": event.ts,
                "model": _text(data.get("model")),
                "role": _text(data.get("role")),
                **text,
                "data": dumps(rest),
                **cols,
            }
        )
        if kind == "iteration":
            self._bump(event.run_id, iterations=1)
        elif kind == "model_call" and data.get("role") == "sub":
            self._bump(event.run_id, subcalls=1)

    def _bump(self, run_id: str, **deltas: float) -> None:
        """Add to run counters (an increment: sqlite-utils has no API for it)."""
        deltas = {k: v for k, v in deltas.items() if v}
        if deltas:
            sets = ", ".join(f"{k} = {k} + ?" for k in deltas)
            self.db.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*deltas.values(), run_id])

    def _node_started(self, event: Event, data: dict[str, Any], kind: str) -> None:
        self._ensure_run(event)
        node_id = self._node_id(event)
        if self._node_row(node_id) is not None:
            self._anomaly("duplicate_node", f"{kind} node {node_id} started twice")
            self._merge_node(node_id, data, {})
            return
        if kind == "iteration":  # the previous iteration ends where this one starts
            self.db.execute(
                "UPDATE nodes SET status = 'ok', finished_at = ?, latency_s = ? - started_at "
                "WHERE run_id = ? AND kind = 'iteration' AND status = 'running'",
                [event.ts, event.ts, event.run_id],
            )
        self._insert_node(event, node_id, kind, data, status="running")

    def _node_finished(self, event: Event, data: dict[str, Any], kind: str) -> None:
        self._ensure_run(event)
        node_id = self._node_id(event)
        row = self._node_row(node_id)
        if row is None:
            self._anomaly("unknown_node", f"{kind}.finished for unknown node {node_id}")
            self._insert_node(event, node_id, kind, data, status="running")
            row = self._node_row(node_id)
        started = row["started_at"] if row["started_at"] is not None else event.ts
        latency = _number(data.get("latency_s"))
        if latency is None:
            latency = _number(data.get("duration_s"))
        tokens_in = _number(data.get("input_tokens"))
        tokens_out = _number(data.get("output_tokens"))
        cost = _number(data.get("cost_usd"))
        cols: dict[str, Any] = {
            "status": _finish_status(data),
            "finished_at": event.ts,
            "latency_s": latency if latency is not None else max(0.0, event.ts - started),
        }
        if tokens_in is not None:
            cols["input_tokens"] = int(tokens_in)
        if tokens_out is not None:
            cols["output_tokens"] = int(tokens_out)
        if cost is not None:
            cols["cost_usd"] = float(cost)
        self._merge_node(node_id, data, cols, row=row)
        self._bump(
            event.run_id,
            input_tokens=int(tokens_in or 0) - int(row["input_tokens"] or 0)
            if tokens_in is not None
            else 0,
            output_tokens=int(tokens_out or 0) - int(row["output_tokens"] or 0)
            if tokens_out is not None
            else 0,
            cost_usd=float(cost or 0) - float(row["cost_usd"] or 0) if cost is not None else 0,
        )

    def _merge_node(
        self,
        node_id: str,
        data: dict[str, Any],
        cols: dict[str, Any],
        *,
        row: dict[str, Any] | None = None,
    ) -> None:
        """Merge ``data`` into the node's payload (new keys win) and set ``cols``."""
        row = row if row is not None else self._node_row(node_id)
        merged = merge_text(loads(row["data"]), row)
        merged.update(data)
        rest, text = split_text(merged)
        updates = {**text, "data": dumps(rest), **cols}
        if data.get("model") is not None:
            updates["model"] = _text(data["model"])
        if data.get("role") is not None:
            updates["role"] = _text(data["role"])
        self.db.table("nodes").update(node_id, updates)

    def _node_point(self, event: Event, data: dict[str, Any], kind: str) -> None:
        """A one-shot event (``compaction``): a node that is finished when stored."""
        self._ensure_run(event)
        node_id = self._node_id(event)
        if self._node_row(node_id) is not None:
            self._merge_node(node_id, data, {"status": "ok", "finished_at": event.ts})
            return
        self._insert_node(
            event, node_id, kind, data, status="ok", finished_at=event.ts, latency_s=0.0
        )


def pid_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this machine (``None`` or non-positive: no).

    A pid reused by an unrelated process counts as alive; pids from another machine or
    container sharing the file cannot be checked.
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process on Windows
        return _win_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _win_pid_alive(pid: int) -> bool:  # pragma: no cover - Windows only
    import ctypes

    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    try:
        code = ctypes.c_ulong()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return False
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def _finish_status(data: dict[str, Any]) -> str:
    status = data.get("status")
    if status in NODE_STATUSES and status != "running":
        return str(status)
    if data.get("timed_out"):
        return "timeout"
    if data.get("error"):
        return "error"
    return "ok"


def _identity(obj: Any) -> Any:
    return obj


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return dumps(value)


def _json_or_none(value: Any) -> str | None:
    return None if value is None else dumps(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _model_name(spec: Any) -> str | None:
    if isinstance(spec, dict):
        return _text(spec.get("name") or spec.get("model"))
    return _text(spec)

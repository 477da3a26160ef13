"""The trajectory store: opening the database and recording engine events (writes only).

Reads live in :mod:`rlmd.store.queries` (mixed into :class:`Store`), the schema in
:mod:`rlmd.store.schema`.

Event handling, by event class (see :mod:`rlmd.engine.events` for the contract):

* :class:`RunStarted` inserts the run (status ``"running"``, ``pid`` = the engine's pid if it
  sent one, else this process's).
* :class:`IterationStarted`, :class:`ModelCallStarted`, :class:`CellStarted` insert node
  ``node_id`` (status ``"running"``); the matching ``*Finished`` merges its payload into the
  node and sets status, ``finished_at``, latency and tokens. A new iteration closes the
  run's previous one.
* :class:`Compaction` inserts a finished node.
* :class:`SandboxStarted` merges into the run's ``sandbox`` JSON.
* :class:`RunFinished` sets status, answer, usage, error, ``finished_at`` and closes the
  run's nodes still running. An answer of :data:`LONG_ANSWER_CHARS` or more is not also
  kept in the payload of the cell whose ``FINAL`` proposed it (a mark instead; reads put
  it back).

Every event is one ``BEGIN IMMEDIATE`` transaction. :meth:`Store.record` never raises:
events for unknown runs or nodes are stored anyway (a placeholder run row is created) and
counted in :attr:`Store.anomalies`; failures are logged and kept in :attr:`Store.errors`.

The write path is hot (a run records a few hundred events): it uses plain parameterised
``INSERT`` / ``UPDATE`` statements (:meth:`Store._insert`, :meth:`Store._update`; their SQL is
built once per column set and sqlite3 keeps them prepared), four or five statements per
event with ``BEGIN`` and ``COMMIT``, instead of sqlite-utils' table methods, which read the
schema again at every call. Updates set a full-text indexed column only when its value
changes, so the index is rewritten only for new text. An event's payload is made JSON-safe
and stripped of secrets in one walk; a started model call or cell keeps its row in memory
until its finish (which then need not read it back; a rollback forgets them all), and run
counters are added once per transaction. sqlite-utils still creates and
migrates the schema and serves the reads. WAL checkpoints (copying the log back into the
database, with two fsyncs) run in a background thread every :data:`CHECKPOINT_EVERY`
events, not inside an event's commit; closing the store does the last one.

:meth:`Store.record_batched` (the sink ``rlmd run`` and the daemon give the engine) writes
the events of one step at once instead: called on a thread that runs an asyncio loop, it
keeps an event and, when the event starts a step the engine then waits on
(:data:`STEP_STARTS`: a run's start, a cell, a model call other than a sub-call, whose cell
is the step), appends the kept ones to the store's **step journal** with one ``write()``
(:mod:`rlmd.store.journal`), else :data:`FLUSH_DELAY_S` later or once :data:`MAX_KEPT` are
kept. The journalled events reach the database in one transaction :data:`FLUSH_DELAY_S`
after the first of them at the latest, at the run's end (:class:`RunFinished` is written to
the database before later sinks see it), at :data:`MAX_UNAPPLIED` events, before any read
through the same :class:`Store`, and at :meth:`Store.close`. That transaction also records
how many of the journal's records the database holds (``journal_applied``).

So sinks after the store never see a step start before it is journalled, and a SIGKILL loses
at most the step in flight: a journal line survives the kill as a commit does (the store
runs SQLite at ``synchronous = NORMAL``, where a WAL commit is a ``write()`` without fsync;
neither survives a power loss). The next :class:`Store` opened on the file (the daemon's
restart, ``rlmd runs``, ``rlmd run``) writes what a dead process's journal holds beyond its
count, then deletes the journal (``_replay_dead``; :meth:`mark_interrupted` does it first).
What changes for readers: reads through the same :class:`Store` (the daemon's commands) see
every event recorded before them, as before; another process reading the file sees a step
up to :data:`FLUSH_DELAY_S` (plus the write) later than before, and a run's end at once.
Inside a batch, a model call's or cell's start followed by its finish is written as one
insert of the finished row (:func:`_pair_finishes`). Stored rows are the same as with
:meth:`Store.record`. Without a journal (an in-memory store, a folder it cannot write, a
failed write) steps are written to the database at once, as before the journal.

Node text reaches the full-text index in batches (``nodes_fts_pending`` in
:mod:`rlmd.store.schema`): :meth:`Store.index_text` runs before every search, when the
store is closed or checks for interrupted runs, and in the background thread with each
checkpoint. A killed process leaves its nodes pending; the next of those catches up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    Compaction,
    Event,
    IterationStarted,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunStarted,
    SandboxStarted,
    new_id,
    type_of,
)
from rlmd.redact import may_redact_json, text_redactor
from rlmd.store import schema
from rlmd.store.codec import (
    FINAL_IS_ANSWER,
    NODE_TEXT_COLUMNS,
    ascii_json,
    dumps,
    loads,
    merge_text,
    plain_json,
    split_text,
    to_jsonable,
)
from rlmd.store.journal import Journal, Record, dead_journals, journal_pids
from rlmd.store.queries import Queries
from rlmd.store.rollouts import Rollouts

if TYPE_CHECKING:
    from rlmd.store.sqlite import sqlite_utils

log = logging.getLogger("rlmd.store")

NODE_KINDS = ("iteration", "model_call", "cell", "compaction")
NODE_STARTS: dict[type[Event], str] = {
    IterationStarted: "iteration",
    ModelCallStarted: "model_call",
    CellStarted: "cell",
}
"""Events that insert a node, and the node's kind."""
NODE_ENDS: dict[type[Event], str] = {ModelCallFinished: "model_call", CellFinished: "cell"}
"""Events that finish a node, and the node's kind."""
NODE_STATUSES = ("running", "ok", "error", "timeout")
STEP_STARTS: tuple[type[Event], ...] = (RunStarted, RunFinished, CellStarted, ModelCallStarted)
"""Events :meth:`Store.record_batched` commits at once (with those kept before them); a
``ModelCallStarted`` of a sub-call is kept (its cell is the step in flight)."""
FLUSH_DELAY_S = 0.05
"""Longest time :meth:`Store.record_batched` keeps an event that does not start a step (a
cell's sub-calls: written together, with the next step start at the latest)."""
MAX_KEPT = 256
"""Events :meth:`Store.record_batched` keeps at most before writing them."""
MAX_UNAPPLIED = 1024
"""Journalled events :meth:`Store.record_batched` keeps at most before writing them to the
database (they are written :data:`FLUSH_DELAY_S` after the first at the latest)."""
ROTATE_AFTER = 10_000
"""Records after which a store starts a new journal file (once all are in the database),
so that a long-lived daemon's journal does not grow without end."""
MAX_ERRORS_KEPT = 100
CHECKPOINT_EVERY = 250
"""Events recorded between two background WAL checkpoints (an event writes about 6 pages of
4 KiB to the WAL: ~1,500 pages, 6 MB)."""
WAL_AUTOCHECKPOINT_PAGES = 4000
"""WAL size, in pages, at which SQLite checkpoints from inside the commit that reaches it:
a backstop for when the log cannot start over (the background checkpoints leave it few
pages to copy; SQLite's default is 1000)."""
MAX_KNOWN_RUNS = 10_000
"""Run ids remembered as existing, so that most events need not look their run up."""
MAX_OPEN_NODES = 10_000
"""Started nodes whose row is remembered until they finish (see ``Store._open_nodes``)."""
_FINISHED_KINDS = frozenset(NODE_ENDS.values())
_NO_USAGE = {"input_tokens": None, "output_tokens": None, "cost_usd": None}
"""A new node row's usage columns."""
PLACEHOLDER_ERROR = "run.started was never recorded for this run"
RUN_TEXT_COLUMNS = ("question", "answer")
"""Run columns covered by the full-text index (``runs_fts``)."""
LONG_ANSWER_CHARS = 4096
"""A run's answer at least this long (characters) is stored once: the cells whose
``FINAL`` proposed it keep a mark instead of a copy (see :meth:`Store._answer_once`).
Shorter answers are left in both places: looking for the cells costs a query per run."""


def _journal_mode(conn: sqlite3.Connection) -> str:
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


class Store(Queries, Rollouts):
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
        db: the :class:`sqlite_utils.Database` (made on first use: importing sqlite-utils
            costs ~0.3 s, and recording a run into a current store does not need it).
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
            from rlmd.paths import create_private_file, make_private, protect_store

            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            # Private (0600): SQLite creates -wal and -shm with the database file's mode.
            try:
                create_private_file(self.path)
            except OSError:
                pass  # a folder it cannot write to: sqlite3.connect says so below
            for leftover in ("-wal", "-shm"):  # from a crash of an older, looser version
                make_private(self.path + leftover)
            protect_store(self.path)
        conn = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False)
        self._conn = conn
        self._lock = threading.RLock()
        self.anomalies: Counter[str] = Counter()
        self.errors: list[str] = []
        self._known_runs: set[str] = set()  # run rows seen committed (rows are never deleted)
        # Model-call and cell nodes inserted by this store and not merged into since: their
        # row as inserted (payload parsed), so that the finish need not read and decode it.
        # Emptied when a transaction rolls back.
        self._open_nodes: dict[str, dict[str, Any]] = {}
        # Run counter increments of the transaction in progress, written once before COMMIT.
        self._bumps: dict[str, dict[str, float]] = {}
        # Run id -> the iteration node this store inserted last for it (the run's only one
        # still running): the next iteration closes it by id instead of searching the run's
        # nodes. Emptied when a transaction rolls back.
        self._open_iterations: dict[str, str] = {}
        # Started at the first checkpoint asked for (:meth:`_count`), not at the open:
        # starting a thread costs ~0.7 ms of hand-overs, and a one-shot run of a few hundred
        # events may never ask for one.
        self._checkpointer: _Checkpointer | None = None
        self._wal = False
        self._events = 0
        # Kept by record_batched: (event, data, None), or (event, None, its data's ASCII
        # JSON) while the data needs no conversion (see _prepare_kept)
        self._pending: list[_Kept] = []
        # The step journal (made at the first step kept): its events not yet in the database,
        # and how many of its records are (the count the database keeps for it).
        self._journal: Journal | None = None
        self._journal_off = self.path == ":memory:"  # also set when the journal failed
        self._unapplied: list[_Kept] = []
        self._applied = 0
        self._pid = os.getpid()  # the recording process; a replay's while it writes
        self._flush_loop: asyncio.AbstractEventLoop | None = None  # a flush is scheduled there
        self._closed = False
        try:
            conn.execute("PRAGMA recursive_triggers = on")  # as sqlite_utils.Database sets it
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000):d}")
            # A store already in WAL mode at the current schema (every open but the first)
            # needs nothing from sqlite-utils: it is imported when a file is set up.
            current = _journal_mode(conn) == "wal"
            version = schema.user_version(conn)
            schema.check_version(version)  # a newer rlmd's file: refused before any change
            if not current:
                self._enable_wal(busy_timeout_s)
            conn.execute("PRAGMA synchronous = NORMAL")
            if not (current and version == schema.SCHEMA_VERSION):
                schema.migrate(self.db)
            # (a file in WAL mode at the open stays so: asking again costs a lock round trip)
            if current or _journal_mode(conn) == "wal":
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES:d}")
                self._wal = True  # background checkpoints, from the first one asked for
        except BaseException:
            conn.close()
            raise
        if check_interrupted:
            self.mark_interrupted()  # replays first
        elif not self._journal_off:
            self._replay_dead()

    @cached_property
    def db(self) -> sqlite_utils.Database:
        """The :class:`sqlite_utils.Database` over this store's connection."""
        from rlmd.store.sqlite import sqlite_utils

        return sqlite_utils.Database(self._conn, execute_plugins=False)

    def index_text(self, *, quiet: bool = False) -> int:
        """Add the text of the nodes still pending to the full-text index (see the module
        docstring), in one transaction.

        Args:
            quiet: log a failure instead of raising it.

        Returns:
            The number of nodes indexed (0 when none was pending, or on a quiet failure).

        Raises:
            sqlite3.OperationalError: (not ``quiet``) the database stayed locked past the busy
                timeout, or cannot be written.
        """
        try:
            with self._lock:
                return schema.index_pending(self._conn)
        except sqlite3.Error as exc:
            if not quiet:
                raise
            log.warning("could not update the full-text index of %s: %r", self.path, exc)
            return 0

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
        """Write the kept events, stop the background thread, index the pending node text
        and close the connection (the last one to close checkpoints the WAL). Safe twice."""
        self.flush()
        with self._lock:
            self._close_journal()
            self._wal = False  # no checkpointer starts after this
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
            if not self._closed:
                self.index_text(quiet=True)
            self._closed = True
            try:
                self._conn.close()
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
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._write_bumps()
            self._conn.execute("COMMIT")
        except BaseException:
            self._bumps.clear()
            self._open_nodes.clear()  # may hold rows the rollback undoes
            self._open_iterations.clear()
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """One statement inside :meth:`_write`'s transaction, on the connection itself
        (``Database.execute`` adds checks for statements run outside a transaction)."""
        return self._conn.execute(sql, params)

    def _insert(self, table: str, row: dict[str, Any]) -> None:
        """``INSERT`` one row (a plain insert: an existing id raises ``IntegrityError``)."""
        self._exec(_insert_sql(table, tuple(row)), list(row.values()))

    def _update(self, table: str, row_id: str, updates: dict[str, Any]) -> None:
        """``UPDATE`` the columns in ``updates`` of the row with primary key ``row_id``."""
        if updates:
            self._exec(_update_sql(table, tuple(updates)), [*updates.values(), row_id])

    # -- the event sink ---------------------------------------------------------------------
    def record_batched(self, event: Event) -> None:
        """:meth:`record`, one step's events at a time (see the module docstring): an event
        is kept until the next step start, for at most :data:`FLUSH_DELAY_S`, or until
        :data:`MAX_KEPT` are kept; a step start journals what is kept (one ``write()``), a
        run's end writes it all to the database. On a thread without a running asyncio loop
        the event is written to the database at once. Never raises."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.record(event)
            return
        try:
            prepared = self._prepare_kept(event)
        except Exception as exc:
            self._failed(event, exc)
            return
        with self._lock:
            self._pending.append(prepared)
            kept = len(self._pending)
        if isinstance(event, RunFinished):
            self.flush()  # a run's end is in the database when its sinks see it
        elif kept >= MAX_KEPT or (
            isinstance(event, STEP_STARTS)
            and not (isinstance(event, ModelCallStarted) and event.role == "sub")
        ):
            self._persist()
        if (self._pending or self._unapplied) and self._flush_loop is not loop:
            self._flush_loop = loop  # none scheduled, or on a loop that has ended
            loop.call_later(FLUSH_DELAY_S, self._flush_due)

    def _flush_due(self) -> None:
        """:meth:`record_batched`'s timer: write what is kept or journalled to the database.
        One timer per delay, not one per step (two per iteration)."""
        self._flush_loop = None
        self.flush()

    def flush(self) -> None:
        """Write every event :meth:`record_batched` kept or journalled to the database (an
        event that fails rolls the batch back; the events are then written one transaction
        each, so only the failing one is lost, as with :meth:`record`). Never raises."""
        with self._lock:
            self._persist()
            batch, self._unapplied = _decoded(self._unapplied), []
            journal = self._journal
            if journal is None or not batch:
                self._write_batch(batch)
                return
            self._applied = self._write_batch(batch, journal.name, journal.written - len(batch))
            if journal.written >= ROTATE_AFTER:
                self._close_journal()

    def _persist(self) -> None:
        """Journal the kept events with one ``write()`` (the crash promise: they survive a
        SIGKILL from then on), or, without a journal, write them to the database."""
        with self._lock:
            kept, self._pending = self._pending, []
            if not kept:
                return
            pending = _redacted(kept)
            if self._journal is None and not self._journal_off:
                try:
                    self._journal = Journal(self.path)
                except OSError as exc:
                    log.warning("no step journal for %s; steps written at once: %r", self.path, exc)
                    self._journal_off = True
            journal = self._journal
            if journal is None:
                self._write_batch(_decoded(pending))
                return
            try:
                journal.append_json([_record_json(*kept) for kept in pending])
            except Exception as exc:  # stop journalling (its last line may be torn)
                log.warning("step journal %s failed; steps written at once: %r", journal.path, exc)
                self.flush()
                self._journal_off = True
                self._close_journal()
                self._write_batch(_decoded(pending))
                return
            self._unapplied += pending
            if len(self._unapplied) >= MAX_UNAPPLIED:
                self.flush()

    def _close_journal(self) -> None:
        """Close the journal (after :meth:`flush`): removed, and its applied count with it,
        when the database holds every record; else kept for the next open's replay."""
        journal, self._journal = self._journal, None
        if journal is None:
            return
        done = self._applied >= journal.written
        journal.close(remove=done)
        self._applied = 0
        if done:
            self._forget_journal(journal.name)

    def _forget_journal(self, name: str) -> None:
        """Delete a removed journal's applied count (after the file: while the file exists,
        its count says which records are in the database)."""
        try:
            with self._lock, self._write():
                self._exec("DELETE FROM journal_applied WHERE journal = ?", [name])
        except sqlite3.Error as exc:  # a row left behind is never read again
            log.debug("could not forget step journal %s: %r", name, exc)

    def _write_batch(
        self, batch: list[tuple[Event, dict[str, Any]]], journal: str | None = None, first: int = 0
    ) -> int:
        """Write ``batch`` in one transaction (an event that fails rolls it back; the events
        are then written one transaction each). With ``journal``, the batch is that journal's
        records from index ``first`` on, and each transaction records how many of its records
        the database holds. Never raises.

        Returns:
            That count after the last transaction that committed (``first`` if none did).
        """
        if not batch:
            return first
        done = first
        try:
            with self._lock:
                anomalies = self.anomalies.copy()
                try:
                    with self._write():
                        for event, data, finish in _pair_finishes(batch):
                            self._dispatch(event, data, finish)
                        if journal is not None:
                            self._mark_applied(journal, first + len(batch))
                except Exception:
                    # the rolled-back rows may be in the known-runs cache, and anomalies
                    # counted: start over one event at a time
                    self._known_runs.clear()
                    self.anomalies = anomalies
                    for i, (event, data) in enumerate(batch, first + 1):
                        if self._write_one(event, data, journal, i):
                            done = i
                    return done
                self._count(len(batch))
                return first + len(batch)
        except Exception as exc:  # the lock or the connection itself failed
            for event, _ in batch:
                self._failed(event, exc)
        return done

    def _mark_applied(self, journal: str, count: int) -> None:
        self._exec(
            "INSERT INTO journal_applied (journal, events) VALUES (?, ?) "
            "ON CONFLICT (journal) DO UPDATE SET events = excluded.events",
            [journal, count],
        )

    def _replay_dead(self) -> None:
        """Write to the database what the journals of processes that are gone hold and it
        does not (see :mod:`rlmd.store.journal`), then remove them; a journal that could not
        be written whole is kept for the next open. Never raises."""
        try:
            for dead in dead_journals(self.path):
                try:
                    records = dead.records()
                    with self._lock:
                        first = self._applied_of(dead.name)
                        self._pid = dead.pid or self._pid  # placeholder runs are the dead's
                        try:
                            done = self._write_batch(_events(records[first:]), dead.name, first)
                        finally:
                            self._pid = os.getpid()
                except Exception as exc:
                    log.warning("could not replay step journal %s: %r", dead.path, exc)
                    dead.release()
                    continue
                if done >= len(records):
                    dead.remove()
                    self._forget_journal(dead.name)
                else:
                    dead.release()
        except OSError as exc:
            log.warning("could not list the step journals of %s: %r", self.path, exc)

    def _applied_of(self, journal: str) -> int:
        """How many of ``journal``'s records the database holds."""
        row = self._conn.execute(
            "SELECT events FROM journal_applied WHERE journal = ?", [journal]
        ).fetchone()
        return int(row[0]) if row else 0

    def _prepare(self, event: Event) -> dict[str, Any]:
        """The event's ``data``, JSON-safe and without secrets (one walk does both)."""
        raw = event.data
        data = to_jsonable(raw if isinstance(raw, dict) else {"value": raw}, text_redactor())
        return data if isinstance(data, dict) else {"value": data}

    def _prepare_kept(self, event: Event) -> _Kept:
        """The event as :meth:`record_batched` keeps it: when its data needs no conversion
        (most events), ``(event, None, text)``, ``text`` its ASCII JSON from one C call
        (:func:`~rlmd.store.codec.plain_json`), not yet looked at for secrets (the step is,
        in one scan: see :func:`_redacted`); else ``(event, data, None)``, :meth:`_prepare`'s
        walk. What is kept is a copy either way: the engine may change the event's objects
        later (a message's content, when a turn is folded)."""
        raw = event.data
        text = plain_json(raw if isinstance(raw, dict) else {"value": raw})
        if text is None:
            return event, self._prepare(event), None
        return event, None, text

    def _write_one(
        self, event: Event, data: dict[str, Any], journal: str | None = None, count: int = 0
    ) -> bool:
        """One event in one transaction (with ``journal``: which records ``count`` of it the
        database then holds); whether it committed."""
        try:
            with self._write():
                self._dispatch(event, data)
                if journal is not None:
                    self._mark_applied(journal, count)
            self._count(1)
            return True
        except Exception as exc:
            self._failed(event, exc)
            return False

    def _count(self, n: int) -> None:
        before, self._events = self._events, self._events + n
        if self._wal and before // CHECKPOINT_EVERY != self._events // CHECKPOINT_EVERY:
            if self._checkpointer is None:
                self._checkpointer = _Checkpointer(os.path.abspath(self.path))
            self._checkpointer.request()

    def _failed(self, event: Event, exc: Exception) -> None:
        kind = getattr(event, "kind", "?")
        self.anomalies["error"] += 1
        self.errors.append(f"{kind}: {exc!r}")
        del self.errors[:-MAX_ERRORS_KEPT]
        log.warning(
            "could not record %s event for run %s: %r", kind, getattr(event, "run_id", "?"), exc
        )

    def record(self, event: Event) -> None:
        """Store one engine event (an :data:`rlmd.engine.events.EventSink`).

        Input: an :class:`~rlmd.engine.events.Event`; its ``data`` is made JSON-safe and
        passed through :func:`rlmd.redact.redact` first.
        Never raises: failures are logged, counted as ``anomalies["error"]`` and appended to
        :attr:`errors`.
        """
        if self._pending or self._unapplied:  # keep the order of events kept before
            self.flush()
        try:
            with self._lock:
                data = self._prepare(event)
                with self._write():
                    self._dispatch(event, data)
                self._count(1)
        except Exception as exc:
            self._failed(event, exc)

    __call__ = record

    def _dispatch(self, event: Event, data: dict[str, Any], finish: _Finish | None = None) -> None:
        """Write one event; ``finish``: the finish of the node ``event`` starts, from the
        same batch (see :func:`_pair_finishes`), written with it as one finished row."""
        match event:
            case RunStarted():
                self._run_started(event, data)
            case RunFinished():
                self._run_finished(event, data)
            case SandboxStarted():
                self._sandbox_started(event, data)
            case Compaction():
                self._node_point(event, data, "compaction")
            case _ if type(event) in NODE_STARTS:
                self._node_started(event, data, NODE_STARTS[type(event)], finish)
            case _ if type(event) in NODE_ENDS:
                self._node_finished(event, data, NODE_ENDS[type(event)])
            case _:
                kind = getattr(event, "kind", type(event).__name__)
                self._anomaly("unknown_kind", f"event kind {kind!r} is not stored")

    def _anomaly(self, name: str, message: str) -> None:
        if not self.anomalies[name]:
            log.warning("trajectory store: %s (further %s events are only counted)", message, name)
        self.anomalies[name] += 1

    # -- runs -------------------------------------------------------------------------------
    def _run_row(self, run_id: str) -> dict[str, Any] | None:
        return self._row(
            "SELECT id, root_run_id, workspace, error, sandbox, question, answer "
            "FROM runs WHERE id = ?",
            run_id,
        )

    def _row(self, sql: str, *params: Any) -> dict[str, Any] | None:
        """The first row of a query as a dict, or ``None``."""
        cursor = self._exec(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        return {d[0]: value for d, value in zip(cursor.description, row, strict=True)}

    def _run_started(self, event: Event, data: dict[str, Any]) -> None:
        raw_models = data.get("models")
        models = raw_models if isinstance(raw_models, dict) else {}
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
            "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else self._pid,
        }
        existing = self._run_row(event.run_id)
        if existing is None:
            self._insert(
                "runs", {"id": event.run_id, "status": "running", "started_at": event.ts, **meta}
            )
            return
        if existing["error"] == PLACEHOLDER_ERROR:
            meta["error"] = None
        else:
            self._anomaly("duplicate_run_started", f"run {event.run_id} started twice")
        self._update("runs", event.run_id, _changed_text(meta, existing, RUN_TEXT_COLUMNS))

    def _ensure_run(self, event: Event) -> None:
        """Create a placeholder row for a run whose ``run.started`` never arrived."""
        if event.run_id in self._known_runs:
            return
        if self._run_row(event.run_id) is not None:
            # It existed before this event's transaction (this is its first statement), so
            # a rollback cannot undo it.
            if len(self._known_runs) >= MAX_KNOWN_RUNS:
                self._known_runs.clear()
            self._known_runs.add(event.run_id)
            return
        self._anomaly("unknown_run", f"{event.kind} event for unknown run {event.run_id}")
        self._insert(
            "runs",
            {
                "id": event.run_id,
                "root_run_id": event.run_id,
                "depth": event.depth,
                "status": "running",
                "started_at": event.ts,
                "pid": self._pid,
                "error": PLACEHOLDER_ERROR,
            },
        )

    def _sandbox_started(self, event: Event, data: dict[str, Any]) -> None:
        self._ensure_run(event)
        row = self._run_row(event.run_id)
        current = loads(row["sandbox"]) if row is not None else None
        merged = dict(current) if isinstance(current, dict) else {}
        sandbox = data.get("sandbox")
        merged.update(sandbox if isinstance(sandbox, dict) else data)
        self._update("runs", event.run_id, {"sandbox": dumps(merged)})

    def _run_finished(self, event: Event, data: dict[str, Any]) -> None:
        self._ensure_run(event)
        self._write_bumps(event.run_id)  # before ``iterations`` is set, not added to after
        existing = self._run_row(event.run_id)
        status = data.get("status") or "completed"
        answer = _text(data.get("answer"))
        if answer is not None and len(answer) >= LONG_ANSWER_CHARS:
            self._answer_once(event.run_id, answer)  # first: its pages serve the answer
        updates: dict[str, Any] = {
            "status": str(status),
            "answer": answer,
            "answer_source": data.get("answer_source"),
            "usage": _json_or_none(data.get("usage")),
            "error": _text(data.get("error")),
            "finished_at": event.ts,
        }
        iterations = data.get("iterations")
        if isinstance(iterations, int) and not isinstance(iterations, bool):
            updates["iterations"] = iterations
        self._update("runs", event.run_id, _changed_text(updates, existing, RUN_TEXT_COLUMNS))
        node_status = "timeout" if status == "max_time" else "error"
        self._close_running(event.run_id, event.ts, node_status)
        self._open_iterations.pop(event.run_id, None)

    def _answer_once(self, run_id: str, answer: str) -> None:
        """Drop ``answer`` from the payload of the run's cells whose ``FINAL`` proposed it,
        marking them :data:`~rlmd.store.codec.FINAL_IS_ANSWER` instead: the run's ``answer``
        column is then its one copy (reads put it back, :mod:`rlmd.store.queries`). A 50 MB
        ``FINAL`` was stored twice. Only cells whose payload is at least as long as the
        answer are read (a JSON string is never shorter than its text)."""
        rows = self._exec(
            "SELECT id, data FROM nodes WHERE run_id = ? AND kind = 'cell' AND length(data) >= ?",
            [run_id, len(answer)],
        ).fetchall()
        for node_id, raw in rows:
            rest = loads(raw)
            if isinstance(rest, dict) and rest.get("final") == answer:
                del rest["final"]
                rest[FINAL_IS_ANSWER] = True
                self._open_nodes.pop(node_id, None)
                self._exec("UPDATE nodes SET data = ? WHERE id = ?", [dumps(rest), node_id])

    def _close_running(
        self, run_id: str, ts: float, status: str, iteration_status: str = "ok"
    ) -> None:
        """Finish the run's nodes still running: iterations get ``iteration_status``, the
        others ``status``. (A bulk conditional update: sqlite-utils has no update-where.)"""
        self._exec(
            "UPDATE nodes SET status = CASE WHEN kind = 'iteration' THEN ? ELSE ? END, "
            "finished_at = ?, latency_s = COALESCE(latency_s, ? - started_at) "
            "WHERE run_id = ? AND status = 'running'",
            [iteration_status, status, ts, ts, run_id],
        )

    def mark_interrupted(self, *, force: bool = False) -> list[str]:
        """Mark runs left ``"running"`` by a process that no longer exists as ``"interrupted"``
        (``finished_at`` = now, their running nodes become ``"error"``), after writing what
        the step journals of dead processes hold. A run whose process left a journal this
        could not write (it died after the replay, or the database refused) is left for the
        next call, so that its steps never land after the mark.

        Args:
            force: interrupt every running run, whatever its pid.

        Returns:
            The ids of the runs marked.

        Raises:
            sqlite3.OperationalError: the database stayed locked past the busy timeout.
        """
        if not self._journal_off:
            self._replay_dead()  # what a killed process journalled
        with self._lock:
            self.index_text(quiet=True)  # what a killed process left pending
            rows = self._conn.execute(
                "SELECT id, pid FROM runs WHERE status = 'running'"
            ).fetchall()
            journalled = set() if force or self._journal_off else journal_pids(self.path)
            dead = [
                run_id
                for run_id, pid in rows
                if force or (not pid_alive(pid) and pid not in journalled)
            ]
            if not dead:
                return []
            now = time.time()
            with self._write():
                for run_id, pid in rows:
                    if run_id not in dead:
                        continue
                    self._exec(
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
        return self._row("SELECT * FROM nodes WHERE id = ?", node_id)

    def _node_id(self, event: Event) -> str:
        if event.node_id:
            return str(event.node_id)
        self._anomaly("missing_node_id", f"{event.kind} event without node_id")
        return new_id()

    def _insert_node(
        self,
        event: Event,
        node_id: str,
        kind: str,
        data: dict[str, Any],
        finish: _Finish | None = None,
        **cols: Any,
    ) -> bool:
        """Insert node ``node_id`` as the run's next ``seq``; ``False`` (and nothing done)
        if a node with that id exists already. With ``finish``, the row inserted is the one
        the start then the finish would leave (one statement instead of two)."""
        rest, text = split_text(data)
        row = {
            "id": node_id,
            "run_id": event.run_id,
            "parent_id": event.parent_id,
            "depth": event.depth,
            "kind": kind,
            "started_at": event.ts,
            "model": _text(data.get("model")),
            "role": _text(data.get("role")),
            **text,
            "data": None if finish is not None else dumps(rest),  # a finish rewrites it
            **cols,
        }
        deltas: dict[str, float] = {}
        if finish is not None:
            opened = {**_NO_USAGE, **row, "data": rest}  # as _open_nodes would keep it
            finished_cols, deltas = _finish_cols(finish[0], finish[1], opened)
            row.update(_merged(opened, finish[1], finished_cols))
        cursor = self._exec(_insert_node_sql(tuple(row)), [*row.values(), event.run_id])
        if cursor.rowcount == 0:
            return False
        if finish is not None:  # finished already: its usage goes to the run's counters
            self._bump(event.run_id, **deltas)
        elif kind in _FINISHED_KINDS:
            if len(self._open_nodes) >= MAX_OPEN_NODES:  # nodes of runs that never finished
                self._open_nodes.clear()
            self._open_nodes[node_id] = {**_NO_USAGE, **row, "data": rest}
        if kind == "iteration":
            self._bump(event.run_id, iterations=1)
        elif kind == "model_call" and data.get("role") == "sub":
            self._bump(event.run_id, subcalls=1)
        return True

    def _bump(self, run_id: str, **deltas: float) -> None:
        """Add to run counters, at the end of the transaction (:meth:`_write_bumps`)."""
        pending = self._bumps.setdefault(run_id, {})
        for name, value in deltas.items():
            if value:
                pending[name] = pending.get(name, 0) + value

    def _write_bumps(self, run_id: str | None = None) -> None:
        """Write the transaction's run counter increments (``run_id``: that run's only), one
        statement per run (an increment: sqlite-utils has no API for it)."""
        if run_id is not None:
            bumps = {run_id: self._bumps.pop(run_id)} if run_id in self._bumps else {}
        else:
            bumps, self._bumps = self._bumps, {}
        for run_id, pending in bumps.items():
            deltas = {k: v for k, v in pending.items() if v}
            if deltas:
                self._exec(_bump_sql(tuple(deltas)), [*deltas.values(), run_id])

    def _node_started(
        self, event: Event, data: dict[str, Any], kind: str, finish: _Finish | None = None
    ) -> None:
        self._ensure_run(event)
        node_id = self._node_id(event)
        if not self._insert_node(event, node_id, kind, data, finish, status="running"):
            self._anomaly("duplicate_node", f"{kind} node {node_id} started twice")
            self._merge_node(node_id, data, {})
            if finish is not None:
                self._node_finished(finish[0], finish[1], kind)
            return
        if kind == "iteration":  # the previous iteration ends where this one starts
            self._close_iterations(event, node_id)

    def _close_iterations(self, event: Event, node_id: str) -> None:
        """Finish the run's running iterations other than ``node_id`` (just inserted): the
        one this store inserted last for the run, by id, when it knows it (every iteration
        it inserted since closed the one before, so no other is running); else all of them,
        searched among the run's nodes."""
        known = self._open_iterations
        last = known.get(event.run_id)
        if last is not None:
            self._exec(
                "UPDATE nodes SET status = 'ok', finished_at = ?, latency_s = ? - started_at "
                "WHERE id = ? AND status = 'running'",
                [event.ts, event.ts, last],
            )
        else:
            self._exec(
                "UPDATE nodes SET status = 'ok', finished_at = ?, latency_s = ? - started_at "
                "WHERE run_id = ? AND kind = 'iteration' AND status = 'running' AND id != ?",
                [event.ts, event.ts, event.run_id, node_id],
            )
            if len(known) >= MAX_KNOWN_RUNS:
                known.clear()
        known[event.run_id] = node_id

    def _node_finished(self, event: Event, data: dict[str, Any], kind: str) -> None:
        self._ensure_run(event)
        node_id = self._node_id(event)
        row = self._open_nodes.get(node_id) or self._node_row(node_id)
        if row is None:
            self._anomaly("unknown_node", f"{kind}.finished for unknown node {node_id}")
            self._insert_node(event, node_id, kind, data, status="running")
            row = self._node_row(node_id)
            assert row is not None  # inserted just now, in this transaction
        cols, deltas = _finish_cols(event, data, row)
        self._merge_node(node_id, data, cols, row=row)
        self._bump(event.run_id, **deltas)

    def _merge_node(
        self,
        node_id: str,
        data: dict[str, Any],
        cols: dict[str, Any],
        *,
        row: dict[str, Any] | None = None,
    ) -> None:
        """Merge ``data`` into the node's payload (new keys win) and set ``cols``. Text
        columns are set only when they change (each one set re-indexes the row's text)."""
        row = row or self._open_nodes.get(node_id) or self._node_row(node_id)
        assert row is not None
        self._open_nodes.pop(node_id, None)  # its row changes now; the next merge reads it
        self._update("nodes", node_id, _merged(row, data, cols))

    def _node_point(self, event: Event, data: dict[str, Any], kind: str) -> None:
        """A one-shot event (``compaction``): a node that is finished when stored."""
        self._ensure_run(event)
        node_id = self._node_id(event)
        inserted = self._insert_node(
            event, node_id, kind, data, status="ok", finished_at=event.ts, latency_s=0.0
        )
        if not inserted:
            self._merge_node(node_id, data, {"status": "ok", "finished_at": event.ts})


class _Checkpointer:
    """Indexes pending node text (:func:`rlmd.store.schema.index_pending`) and copies the WAL
    back into the database file from a background thread, so that events do not pay for
    either: SQLite's automatic checkpoint runs inside the commit that fills the WAL and costs
    milliseconds (two fsyncs). It uses a second connection; its ``PASSIVE`` checkpoints never
    wait for locks and let the writer go on. A write transaction that
    begins after a complete one starts the WAL over; under writes without a pause, SQLite's
    own checkpoint (:data:`WAL_AUTOCHECKPOINT_PAGES`) does that, with little left to copy."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._wake = threading.Event()
        self._stop = False
        self.done = 0  # checkpoints run
        self._thread = threading.Thread(
            target=self._loop, name="rlmd-store-checkpoint", daemon=True
        )
        self._thread.start()

    def request(self) -> None:
        """Ask for a checkpoint (returns at once)."""
        self._wake.set()

    def close(self) -> None:
        """Stop the thread, after the checkpoint in progress if any."""
        self._stop = True
        self._wake.set()
        self._thread.join()

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(self._path, isolation_level=None)
                    schema.index_pending(conn)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    self.done += 1
                except sqlite3.Error as exc:  # the next search, close or start catches up;
                    # the writer's backstop checkpoint remains
                    log.debug("background index/checkpoint of %s failed: %r", self._path, exc)
        finally:
            if conn is not None:
                conn.close()


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


_Finish = tuple[Event, dict[str, Any]]
"""A node's finish event and its prepared data."""


def _pair_finishes(
    pending: list[tuple[Event, dict[str, Any]]],
) -> list[tuple[Event, dict[str, Any], _Finish | None]]:
    """A batch's events in order, each model-call or cell start carrying its finish when
    that comes later in the same batch (the finish is then left out of the list): a cell's
    sub-calls start and finish in one batch, and one ``INSERT`` of the finished row costs
    less than an insert and an update. Writing a finish at its start's place leaves the same
    rows as long as no event between them touches that node: a start and finish are not
    paired across a run's start or end (which closes the run's running nodes), a finish of
    another run, or a second event with the same node id."""
    out: list[tuple[Event, dict[str, Any], _Finish | None]] = []
    open_starts: dict[str, int] = {}  # node id -> index in ``out`` of its unpaired start
    for event, data in pending:
        node_id = event.node_id
        index = open_starts.pop(node_id, None) if node_id else None
        if index is not None:
            start = out[index][0]
            if (
                NODE_ENDS.get(type(event)) == NODE_STARTS[type(start)]
                and event.run_id == start.run_id
            ):
                out[index] = (start, out[index][1], (event, data))
                continue
        if isinstance(event, (RunStarted, RunFinished)):
            open_starts.clear()
        out.append((event, data, None))
        if node_id and NODE_STARTS.get(type(event)) in _FINISHED_KINDS and index is None:
            open_starts[node_id] = len(out) - 1
    return out


def _finish_cols(
    event: Event, data: dict[str, Any], row: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, float]]:
    """The columns a finish ``event`` (prepared ``data``) sets on node ``row``, and the run
    counter increments it makes (tokens and cost beyond what the row had)."""
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
    deltas: dict[str, float] = {}
    if tokens_in is not None:
        cols["input_tokens"] = int(tokens_in)
        deltas["input_tokens"] = int(tokens_in) - int(row["input_tokens"] or 0)
    if tokens_out is not None:
        cols["output_tokens"] = int(tokens_out)
        deltas["output_tokens"] = int(tokens_out) - int(row["output_tokens"] or 0)
    if cost is not None:
        cols["cost_usd"] = float(cost)
        deltas["cost_usd"] = float(cost) - float(row["cost_usd"] or 0)
    return cols, deltas


def _merged(row: dict[str, Any], data: dict[str, Any], cols: dict[str, Any]) -> dict[str, Any]:
    """The columns to set on node ``row`` to merge ``data`` into its payload (new keys
    win) and set ``cols``; text columns only when they change (each one set re-indexes
    the row's text)."""
    data_col = row["data"]
    merged = merge_text(data_col if isinstance(data_col, dict) else loads(data_col), row)
    merged.update(data)
    rest, text = split_text(merged)
    updates = {**_changed_text(text, row, NODE_TEXT_COLUMNS), "data": dumps(rest), **cols}
    if data.get("model") is not None:
        updates["model"] = _text(data["model"])
    if data.get("role") is not None:
        updates["role"] = _text(data["role"])
    return updates


def _finish_status(data: dict[str, Any]) -> str:
    status = data.get("status")
    if status in NODE_STATUSES and status != "running":
        return str(status)
    if data.get("timed_out"):
        return "timeout"
    if data.get("error"):
        return "error"
    return "ok"


@lru_cache(maxsize=64)
def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    names = ", ".join(f"[{c}]" for c in columns)
    return f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(columns))})"


@lru_cache(maxsize=64)
def _insert_node_sql(columns: tuple[str, ...]) -> str:
    """Insert a node (parameters: ``columns``' values, then the run id for ``seq``): ``seq``
    is the run's next, and an existing id makes it a no-op (rowcount 0)."""
    names = ", ".join(f"[{c}]" for c in columns)
    return (
        f"INSERT INTO [nodes] ({names}, [seq]) VALUES ({', '.join('?' * len(columns))}, "
        "(SELECT COALESCE(MAX(seq) + 1, 0) FROM nodes WHERE run_id = ?)) "
        "ON CONFLICT (id) DO NOTHING"
    )


@lru_cache(maxsize=64)
def _bump_sql(columns: tuple[str, ...]) -> str:
    sets = ", ".join(f"[{c}] = [{c}] + ?" for c in columns)
    return f"UPDATE [runs] SET {sets} WHERE [id] = ?"


@lru_cache(maxsize=64)
def _update_sql(table: str, columns: tuple[str, ...]) -> str:
    sets = ", ".join(f"[{c}] = ?" for c in columns)
    return f"UPDATE [{table}] SET {sets} WHERE [id] = ?"


def _changed_text(
    updates: dict[str, Any], row: dict[str, Any] | None, indexed: tuple[str, ...]
) -> dict[str, Any]:
    """``updates`` without the full-text indexed columns whose value ``row`` already has:
    setting one fires the index's update trigger, which re-indexes the row."""
    if row is None:
        return updates
    return {k: v for k, v in updates.items() if k not in indexed or k not in row or row[k] != v}


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


_Kept = tuple[Event, "dict[str, Any] | None", "str | None"]
"""An event as :meth:`Store.record_batched` keeps it: ``(event, data, None)``, or ``(event,
None, text)``, ``text`` the ASCII JSON of data that needs no conversion (see
:meth:`Store._prepare_kept`)."""


def _record_json(event: Event, data: dict[str, Any] | None, text: str | None) -> str:
    """The event as journalled (:data:`rlmd.store.journal.Record`), as ASCII JSON: its
    data's ``text`` put in as it is (made from ``data`` without one)."""
    header = [event.kind, event.run_id, event.depth, event.node_id, event.parent_id, event.ts]
    try:
        head = ascii_json(header)
    except ValueError:  # a time that is not finite: written as json.dumps writes it
        head = json.dumps(header)
    return f"{head[:-1]},{ascii_json(data) if text is None else text}]"


def _redacted(kept: list[_Kept]) -> list[_Kept]:
    """``kept`` (a step's events) with their secrets removed. The data kept as JSON text
    is looked at together, in the text of it all (one scan for each key shape and secret,
    :func:`~rlmd.redact.may_redact_json`); only if one might be there is it walked with the
    redaction, as :meth:`Store._prepare` walks every event."""
    texts = [text for _, _, text in kept if text is not None]
    if not texts or not may_redact_json(",".join(texts)):
        return kept
    redact = text_redactor()
    return [
        (event, data, None) if text is None else (event, _walked(loads(text), redact), None)
        for event, data, text in kept
    ]


def _walked(data: Any, redact: Any) -> dict[str, Any]:
    """Data (as :func:`~rlmd.store.codec.plain_json` passed it) made as
    :meth:`Store._prepare` makes an event's."""
    out = to_jsonable(data, redact)
    return out if isinstance(out, dict) else {"value": out}


def _decoded(kept: list[_Kept]) -> list[tuple[Event, dict[str, Any]]]:
    """Kept events with their data as dicts, to write to the database."""
    return [(event, loads(text) if data is None else data) for event, data, text in kept]


def _events(records: list[Record]) -> list[tuple[Event, dict[str, Any]]]:
    """Journalled records as (event, prepared data): the event carries the header only
    (writing uses the data as journalled); an unknown kind becomes a plain ``Event``,
    which the store counts as unknown."""
    out: list[tuple[Event, dict[str, Any]]] = []
    for kind, run_id, depth, node_id, parent_id, ts, data in records:
        cls = type_of(kind) or Event
        header = {"run_id": run_id, "depth": depth, "node_id": node_id, "parent_id": parent_id}
        out.append((cls(**header, ts=ts), data))
    return out

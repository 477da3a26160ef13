"""The store's schema and its migrations.

The schema version lives in ``PRAGMA user_version``. :data:`MIGRATIONS` is an ordered list:
migration ``n`` (1-based) moves a database from version ``n - 1`` to ``n``. Add new
migrations at the end; never edit one that has shipped.

Tables (JSON columns hold compact JSON text, times are seconds since the epoch):

``runs``
    ``id`` (pk), ``root_run_id``, ``parent_run_id``, ``parent_node_id`` (the cell that
    started a child run), ``depth``, ``question``, ``status`` (``"running"`` until
    ``run.finished``; ``"interrupted"`` once its process died), ``answer``,
    ``answer_source``, ``root_model``, ``sub_model``, ``context_meta`` / ``models`` /
    ``sandbox`` / ``budget`` / ``usage`` (JSON), ``error``, ``iterations``, ``subcalls``
    (model calls with role ``"sub"``), ``input_tokens``, ``output_tokens``, ``cost_usd``
    (these counters cover this run's own model calls only; ``usage`` is the engine's
    tree total), ``started_at``, ``finished_at``, ``pid`` (recording process),
    ``workspace``.
``nodes``
    ``id`` (pk), ``run_id``, ``parent_id``, ``depth``, ``kind`` (``"iteration" |
    "model_call" | "cell" | "compaction"``), ``seq`` (order within the run), ``status``
    (``"running" | "ok" | "error" | "timeout"``), ``started_at``, ``finished_at``,
    ``latency_s``, ``input_tokens``, ``output_tokens``, ``cost_usd``, ``model``, ``role``,
    ``code`` / ``stdout`` / ``stderr`` / ``error`` (string fields of the payload, kept out of
    ``data`` so the full-text index covers them without a second copy), ``data`` (JSON:
    the rest of the merged event payloads; a cell whose long ``final`` became the run's
    ``answer`` holds ``"final_is_answer": true`` instead of a second copy of it).
``rollouts`` (version 2)
    one row per training rollout (:mod:`rlmd.train.rollout`): ``run_id`` (pk, the root
    run), ``rollout_set``, ``task_id``, ``family``, ``split``, ``sample_index``, ``model``,
    ``temperature``, ``reward``, ``correctness``, ``gated``, ``iterations``, ``subcalls``,
    ``cell_errors``, ``created_at``, ``details`` (JSON: the reward terms and the gold
    answer); unique on ``(rollout_set, task_id, sample_index)``, which is what a resumed
    rollout skips.
``runs_fts`` / ``nodes_fts``
    FTS5 indexes (external content) over ``runs.question``, ``runs.answer`` and the node
    text columns. ``runs_fts`` is kept in sync by triggers. ``nodes_fts`` is filled in
    batches (version 3): see below.
``nodes_fts_pending`` (version 3)
    ``rowid`` of the ``nodes`` rows whose text is not in ``nodes_fts`` yet. Triggers keep
    the rule "a node is in ``nodes_fts``, with its current text, exactly when it is not
    pending": an insert makes the node pending; a text update of a node already indexed
    takes its old text out of the index and makes it pending. :func:`index_pending` indexes
    the pending nodes and empties the table, in one transaction. So an insert pays for one
    small row instead of the full-text index (per transaction, FTS5 writes a new segment),
    and a crash leaves the pending rows for the next catch-up: nothing is missed for good.

``journal_applied`` (version 5)
    ``journal`` (pk, a step journal's file name), ``events``: how many of its records
    (:mod:`rlmd.store.journal`) are in the database; written in the transaction that
    writes them, deleted once the file is.

Indexes: ``runs`` on ``root_run_id``, ``parent_run_id``, ``started_at``, ``status`` and
``workspace``; ``nodes`` on ``(run_id, seq)`` (unique). Version 1 also indexed ``nodes`` on
``status`` and ``parent_id``; version 4 drops both (no query used them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from rlmd.store.codec import NODE_TEXT_COLUMNS

if TYPE_CHECKING:
    from rlmd.store.sqlite import sqlite_utils


class StoreError(Exception):
    """The trajectory database cannot be used."""


class StoreVersionError(StoreError):
    """The database was written by a newer rlmd (its schema version is unknown here)."""


def _m001_initial(db: sqlite_utils.Database) -> None:
    """Version 1: ``runs``, ``nodes``, their indexes and full-text indexes."""
    db.table("runs").create(
        {
            "id": str,
            "root_run_id": str,
            "parent_run_id": str,
            "parent_node_id": str,
            "depth": int,
            "question": str,
            "status": str,
            "answer": str,
            "answer_source": str,
            "root_model": str,
            "sub_model": str,
            "context_meta": str,
            "models": str,
            "sandbox": str,
            "budget": str,
            "usage": str,
            "error": str,
            "iterations": int,
            "subcalls": int,
            "input_tokens": int,
            "output_tokens": int,
            "cost_usd": float,
            "started_at": float,
            "finished_at": float,
            "pid": int,
            "workspace": str,
        },
        pk="id",
        not_null={
            "status",
            "depth",
            "iterations",
            "subcalls",
            "input_tokens",
            "output_tokens",
            "cost_usd",
        },
        defaults={
            "status": "running",
            "depth": 0,
            "iterations": 0,
            "subcalls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
        },
    )
    db.table("nodes").create(
        {
            "id": str,
            "run_id": str,
            "parent_id": str,
            "depth": int,
            "kind": str,
            "seq": int,
            "status": str,
            "started_at": float,
            "finished_at": float,
            "latency_s": float,
            "input_tokens": int,
            "output_tokens": int,
            "cost_usd": float,
            "model": str,
            "role": str,
            **{name: str for name in NODE_TEXT_COLUMNS},
            "data": str,
        },
        pk="id",
        not_null={"run_id", "kind", "seq", "status"},
        defaults={"status": "running"},
    )
    runs, nodes = db.table("runs"), db.table("nodes")
    for column in ("root_run_id", "parent_run_id", "started_at", "status", "workspace"):
        runs.create_index([column], if_not_exists=True)
    nodes.create_index(["run_id", "seq"], unique=True, if_not_exists=True)
    nodes.create_index(["parent_id"], if_not_exists=True)
    nodes.create_index(["status"], if_not_exists=True)
    _enable_fts(db, "runs", ("question", "answer"))
    _enable_fts(db, "nodes", NODE_TEXT_COLUMNS)


def _enable_fts(db: sqlite_utils.Database, table: str, columns: tuple[str, ...]) -> None:
    """FTS5 over ``columns`` with sqlite-utils' sync triggers, except that the update trigger
    fires only when an indexed column changes (``runs`` rows are updated at every event for
    their counters; re-indexing the question each time would be wasted work). sqlite-utils
    has no option for that, hence the one hand-written trigger."""
    db.table(table).enable_fts(list(columns), create_triggers=True)
    fts = f"[{table}_fts]"
    cols = ", ".join(f"[{c}]" for c in columns)
    old = ", ".join(f"old.[{c}]" for c in columns)
    new = ", ".join(f"new.[{c}]" for c in columns)
    db.executescript(
        f"""
        DROP TRIGGER IF EXISTS [{table}_au];
        CREATE TRIGGER [{table}_au] AFTER UPDATE OF {cols} ON [{table}] BEGIN
          INSERT INTO {fts} ({fts}, rowid, {cols}) VALUES('delete', old.rowid, {old});
          INSERT INTO {fts} (rowid, {cols}) VALUES (new.rowid, {new});
        END;
        """
    )


def _m002_rollouts(db: sqlite_utils.Database) -> None:
    """Version 2: ``rollouts`` (training rollouts: task id, sample index, reward)."""
    db.table("rollouts").create(
        {
            "run_id": str,
            "rollout_set": str,
            "task_id": str,
            "family": str,
            "split": str,
            "sample_index": int,
            "model": str,
            "temperature": float,
            "reward": float,
            "correctness": float,
            "gated": str,
            "iterations": int,
            "subcalls": int,
            "cell_errors": int,
            "created_at": float,
            "details": str,
        },
        pk="run_id",
        not_null={"rollout_set", "task_id", "sample_index"},
    )
    db.table("rollouts").create_index(
        ["rollout_set", "task_id", "sample_index"], unique=True, if_not_exists=True
    )


NODE_FTS_COLUMNS = ", ".join(f"[{c}]" for c in NODE_TEXT_COLUMNS)


def _m003_deferred_node_index(db: sqlite_utils.Database) -> None:
    """Version 3: node text is indexed in batches (``nodes_fts_pending``), not by the insert
    and update triggers. Every existing node is indexed already, so none starts pending."""
    old = ", ".join(f"old.[{c}]" for c in NODE_TEXT_COLUMNS)
    pending = "SELECT 1 FROM nodes_fts_pending WHERE rowid = old.rowid"
    statements = [
        "CREATE TABLE IF NOT EXISTS nodes_fts_pending (rowid INTEGER PRIMARY KEY)",
        "DROP TRIGGER IF EXISTS [nodes_ai]",
        "DROP TRIGGER IF EXISTS [nodes_au]",
        "DROP TRIGGER IF EXISTS [nodes_ad]",
        "CREATE TRIGGER [nodes_ai] AFTER INSERT ON [nodes] BEGIN "
        "INSERT OR IGNORE INTO nodes_fts_pending (rowid) VALUES (new.rowid); END",
        f"CREATE TRIGGER [nodes_au] AFTER UPDATE OF {NODE_FTS_COLUMNS} ON [nodes] "
        f"WHEN NOT EXISTS ({pending}) BEGIN "
        f"INSERT INTO [nodes_fts] ([nodes_fts], rowid, {NODE_FTS_COLUMNS}) "
        f"VALUES ('delete', old.rowid, {old}); "
        "INSERT INTO nodes_fts_pending (rowid) VALUES (old.rowid); END",
        "CREATE TRIGGER [nodes_ad] AFTER DELETE ON [nodes] BEGIN "
        f"INSERT INTO [nodes_fts] ([nodes_fts], rowid, {NODE_FTS_COLUMNS}) "
        f"SELECT 'delete', old.rowid, {old} WHERE NOT EXISTS ({pending}); "
        "DELETE FROM nodes_fts_pending WHERE rowid = old.rowid; END",
    ]
    for sql in statements:  # not executescript: it would commit the migration's transaction
        db.execute(sql)


def index_pending(conn: sqlite3.Connection) -> int:
    """Index the text of the pending nodes (see ``nodes_fts_pending`` in the module
    docstring) in one ``BEGIN IMMEDIATE`` transaction on ``conn`` (which must not be in a
    transaction).

    Returns:
        The number of nodes indexed (0 without a write when none is pending).

    Raises:
        sqlite3.OperationalError: the database stayed locked past the busy timeout, or is
            read-only.
    """
    if conn.execute("SELECT 1 FROM nodes_fts_pending LIMIT 1").fetchone() is None:
        return 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        cursor = conn.execute(
            f"INSERT INTO [nodes_fts] (rowid, {NODE_FTS_COLUMNS}) "
            f"SELECT nodes.rowid, {NODE_FTS_COLUMNS} FROM nodes "
            "JOIN nodes_fts_pending AS p ON p.rowid = nodes.rowid"
        )
        count = cursor.rowcount
        conn.execute("DELETE FROM nodes_fts_pending")
        conn.execute("COMMIT")  # inside: a failed commit must not leave the transaction open
    except BaseException:
        conn.rollback()
        raise
    return count


def _m004_fewer_node_indexes(db: sqlite_utils.Database) -> None:
    """Version 4: ``nodes`` loses its indexes on ``status`` and ``parent_id``. No read uses
    them (runs are read by ``run_id`` and ``seq``, trees are built in Python, and the writes
    that filter on ``status`` also filter on ``run_id``), while every node insert and status
    change wrote their pages: about 2.7 of the ~11 pages a step's commit adds to the WAL."""
    db.execute("DROP INDEX IF EXISTS [idx_nodes_status]")
    db.execute("DROP INDEX IF EXISTS [idx_nodes_parent_id]")


def _m005_journal_counts(db: sqlite_utils.Database) -> None:
    """Version 5: ``journal_applied``, how many records of each step journal
    (:mod:`rlmd.store.journal`) the database holds, written in the transaction that applies
    them, so that a replay after a crash writes each record once."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS [journal_applied] "
        "([journal] TEXT PRIMARY KEY, [events] INTEGER NOT NULL)"
    )


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _m001_initial,
    _m002_rollouts,
    _m003_deferred_node_index,
    _m004_fewer_node_indexes,
    _m005_journal_counts,
]
"""Migration ``i`` (0-based) brings the schema from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)


def user_version(db: sqlite_utils.Database | sqlite3.Connection) -> int:
    """The schema version recorded in the file (0 for a new file)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite_utils.Database) -> int:
    """Bring ``db`` to :data:`SCHEMA_VERSION`; safe to call on every open and from several
    processes at once (the check and the migrations run under one ``BEGIN IMMEDIATE``
    write lock, and a failed migration rolls back completely).

    Returns:
        The version the file had before (``SCHEMA_VERSION`` when nothing was done).

    Raises:
        StoreVersionError: the file's version is newer than this code knows.
        sqlite3.OperationalError: the database stayed locked past the busy timeout.
    """
    before = user_version(db)
    check_version(before)
    if before == SCHEMA_VERSION:
        return before
    db.execute("BEGIN IMMEDIATE")
    try:
        before = user_version(db)  # another process may have migrated meanwhile
        check_version(before)
        for number in range(before + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[number - 1](db)
            db.execute(f"PRAGMA user_version = {number:d}")
    except BaseException:
        db.rollback()
        raise
    db.commit()
    return before


def check_version(version: int) -> None:
    """Raises :class:`StoreVersionError` when ``version`` is newer than this code knows."""
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the trajectory database has schema version {version}, but this rlmd only knows "
            f"versions up to {SCHEMA_VERSION}: upgrade rlmd, or point RLMD_HOME at another folder"
        )

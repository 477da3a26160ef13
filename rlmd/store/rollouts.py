"""Training rollouts in the store: the ``rollouts`` table (schema version 2) and copying
recorded runs between stores (a rollout set exported on one machine, imported on another).

:class:`Rollouts` is mixed into :class:`rlmd.store.Store`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rlmd.store.codec import RUN_JSON_COLUMNS, dumps, split_text

IMPORT_TYPES = {"rollout": "rollouts", "run": "runs", "node": "nodes"}
"""The record types of an export-rollouts file and the table each goes to (an ``export``
header line, as ``rlmd export --format jsonl`` writes, is ignored)."""

_REQUIRED = {
    "rollouts": ("run_id", "rollout_set", "task_id", "sample_index", "family", "reward",
                 "correctness", "iterations", "subcalls", "cell_errors"),
    "runs": ("id",),
    "nodes": ("id", "run_id", "kind", "seq"),
}  # fmt: skip
"""Fields a record must hold: the key and NOT NULL columns, and what the summary and the
dataset export read of a rollout."""

_NOT_NULL = {
    "runs": {"status", "depth", "iterations", "subcalls", "input_tokens", "output_tokens",
             "cost_usd"},
    "nodes": {"status"},
    "rollouts": set(),
}  # fmt: skip


class ImportProblem(ValueError):
    """A record of an import file cannot be imported: ``line`` (1-based) and ``why``."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line, self.why = line, why


def _value_problem(name: str, value: Any, kind: type) -> str | None:
    """Why ``value`` cannot go into a column of SQLite type ``kind``, or ``None``."""
    if value is None:
        return None
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"{name} must be an integer, got {value!r}"
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and math.isfinite(value):
            return None
        return f"{name} must be a finite number, got {value!r}"
    return None if isinstance(value, str) else f"{name} must be a string, got {value!r}"


class Rollouts:
    """Rollout rows and run import; needs the store's ``db``, ``_lock`` and ``_write``."""

    db: Any
    _lock: Any

    def _write(self) -> Any:  # provided by Store
        raise NotImplementedError

    def _insert(self, table: str, row: dict[str, Any]) -> None:  # provided by Store
        raise NotImplementedError

    def record_rollout(self, row: dict[str, Any]) -> None:
        """Insert one rollout row (the columns of the ``rollouts`` table; ``details`` a dict).

        Raises:
            sqlite3.IntegrityError: this ``(rollout_set, task_id, sample_index)`` or run id is
                already recorded.
        """
        row = {**row, "details": json.dumps(row.get("details") or {}, ensure_ascii=False)}
        with self._lock, self._write():
            self._insert("rollouts", row)

    def rollouts(self, rollout_set: str | None = None) -> list[dict[str, Any]]:
        """Rollout rows (``details`` decoded), of one set or all, ordered by set, task and
        sample."""
        where, args = ("rollout_set = ?", [rollout_set]) if rollout_set else (None, [])
        with self._lock:
            rows = self.db.table("rollouts").rows_where(
                where, args, order_by="rollout_set, task_id, sample_index"
            )
            return [{**r, "details": json.loads(r["details"] or "{}")} for r in rows]

    def rollout_sets(self) -> dict[str, int]:
        """Every rollout set in the store and how many rollouts it holds, by name."""
        with self._lock:
            rows = self.db.execute(
                "SELECT rollout_set, count(*) FROM rollouts GROUP BY rollout_set"
                " ORDER BY rollout_set"
            ).fetchall()
        return {name: n for name, n in rows}

    def check_import(self, numbered: list[tuple[int, Any]]) -> None:
        """Check ``(line, record)`` pairs of an export-rollouts file before any is written.

        Each record must be an object of a known ``type`` holding only its table's columns
        (the keys become column names in the SQL) with values of their types, and the
        fields :data:`_REQUIRED` names; a rollout's ``details`` an object, its
        ``sample_index`` >= 0, its run in the file or the store, and no run under two
        rollouts; a node's run in the file.

        Raises:
            ImportProblem: the first record that fails, with its line and why.
        """
        columns = {t: self.db.table(t).columns_dict for t in IMPORT_TYPES.values()}
        runs_in_file: set[Any] = set()
        seen: dict[tuple[str, Any], int] = {}  # (what, key): its line
        for n, rec in numbered:
            if not isinstance(rec, dict):
                raise ImportProblem(n, f"a record must be a JSON object, got {type(rec).__name__}")
            kind = rec.get("type")
            if kind == "export":
                continue
            if kind not in IMPORT_TYPES:
                raise ImportProblem(
                    n, f"type must be one of {', '.join(IMPORT_TYPES)}, got {kind!r}"
                )
            table = IMPORT_TYPES[kind]
            for key, value in rec.items():
                if key == "type":
                    continue
                if key not in columns[table]:
                    raise ImportProblem(n, f"unknown field {key!r} in a {kind}")
                why = _import_value_problem(table, key, value, columns[table][key])
                if why:
                    raise ImportProblem(n, f"{kind} {why}")
            missing = [k for k in _REQUIRED[table] if rec.get(k) is None]
            if missing:
                raise ImportProblem(n, f"a {kind} needs {', '.join(missing)}")
            keys: list[tuple[str, Any]] = []
            if kind == "run":
                keys = [("run id", rec["id"])]
            elif kind == "node":
                keys = [("node id", rec["id"]), ("node seq", (rec["run_id"], rec["seq"]))]
            for what, key in keys:  # the store's unique keys: one record each
                if (what, key) in seen:
                    raise ImportProblem(n, f"{what} {key!r} is already on line {seen[what, key]}")
                seen[what, key] = n
            if kind == "run":
                runs_in_file.add(rec["id"])
        with_rollout: dict[str, tuple[int, Any]] = {}  # run id: line, rollout key
        for n, rec in numbered:
            kind = rec.get("type")
            if kind == "node" and rec["run_id"] not in runs_in_file:
                raise ImportProblem(
                    n,
                    f"node {rec['id']!r} belongs to run {rec['run_id']!r}, which is not in "
                    "the file",
                )
            if kind != "rollout":
                continue
            run_id = rec["run_id"]
            if rec["sample_index"] < 0:
                raise ImportProblem(n, "rollout sample_index must be an integer >= 0")
            if run_id not in runs_in_file and not self._has("runs", "id", run_id):
                raise ImportProblem(
                    n,
                    f"the run {run_id!r} of this rollout is neither in the file nor in the store",
                )
            key = (rec["rollout_set"], rec["task_id"], rec["sample_index"])
            line, first = with_rollout.get(run_id, (n, key))
            if first != key:  # the same rollout twice is imported once; two are refused
                raise ImportProblem(n, f"run {run_id!r} already has a rollout (line {line})")
            with_rollout.setdefault(run_id, (n, key))
            with self._lock:
                stored = list(
                    self.db.table("rollouts").rows_where(
                        "run_id = ?", [run_id], select="rollout_set, task_id, sample_index"
                    )
                )
            if stored and tuple(stored[0].values()) != key:
                raise ImportProblem(
                    n, f"run {run_id!r} already has another rollout in the store: {stored[0]}"
                )

    def _has(self, table: str, column: str, value: Any) -> bool:
        with self._lock:
            return bool(self.db.table(table).count_where(f"[{column}] = ?", [value]))

    def import_records(self, records: list[dict[str, Any]]) -> int:
        """Insert runs and nodes given as :func:`rlmd.store.export.flatten_tree` records
        (``{"type": "run" | "node", ...}``, JSON fields decoded). Runs already in the store
        are skipped with their nodes. Returns the number of runs inserted."""
        runs = [r for r in records if r.get("type") == "run"]
        nodes = [r for r in records if r.get("type") == "node"]
        with self._lock:
            have = {r["id"] for r in runs if self.db.table("runs").count_where("id = ?", [r["id"]])}
            new = [r for r in runs if r["id"] not in have]
            keep = {r["id"] for r in new}
            with self._write():
                for run in new:
                    row = {k: v for k, v in run.items() if k != "type"}
                    for name in RUN_JSON_COLUMNS:
                        if name in row and row[name] is not None:
                            row[name] = dumps(row[name])
                    self._insert("runs", row)
                for node in nodes:
                    if node["run_id"] not in keep:
                        continue
                    row = {k: v for k, v in node.items() if k not in ("type", "data")}
                    rest, text = split_text(dict(node.get("data") or {}))
                    row.update(text, data=dumps(rest))
                    self._insert("nodes", row)
            return len(new)


def _import_value_problem(table: str, key: str, value: Any, kind: type) -> str | None:
    """Why a record's ``key: value`` cannot be imported into ``table``, or ``None``."""
    if value is None:
        return f"{key} must not be null" if key in _NOT_NULL[table] else None
    if table == "runs" and key in RUN_JSON_COLUMNS:
        return None  # any JSON: written as text
    if key in ("details", "data"):
        return None if isinstance(value, dict) else f"{key} must be an object"
    return _value_problem(key, value, kind)

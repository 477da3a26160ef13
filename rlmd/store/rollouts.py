"""Training rollouts in the store: the ``rollouts`` table (schema version 2) and copying
recorded runs between stores (a rollout set exported on one machine, imported on another).

:class:`Rollouts` is mixed into :class:`rlmd.store.Store`.
"""

from __future__ import annotations

import json
from typing import Any

from rlmd.store.codec import RUN_JSON_COLUMNS, dumps, split_text


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

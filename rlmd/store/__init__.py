"""The trajectory store: every run, iteration, model call and cell, in SQLite.

``Store(path)`` opens (and migrates) the database; ``store.record`` is the engine's event
sink; ``list_runs`` / ``get_run`` / ``nodes`` / ``tree`` / ``search`` read it back;
:func:`export_run` serialises a run tree; :mod:`rlmd.cli.render` draws them with rich.
"""

from __future__ import annotations

from rlmd.store.db import Store, pid_alive
from rlmd.store.export import export_run, tree_from_jsonl
from rlmd.store.schema import SCHEMA_VERSION, StoreError, StoreVersionError

__all__ = [
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "StoreVersionError",
    "export_run",
    "pid_alive",
    "tree_from_jsonl",
]

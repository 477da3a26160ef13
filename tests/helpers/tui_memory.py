"""An in-memory TUI backend for the TUI tests and the scroll benchmark."""

from __future__ import annotations

import json
from typing import Any

from rlmd_tui.backend import Backend


class MemoryBackend(Backend):
    """Runs and trees held in memory (tests, benchmarks, demos): read-only."""

    label = "memory"

    def __init__(self, trees: list[dict[str, Any]]) -> None:
        self.trees = {t["id"]: t for t in trees}

    async def list_runs(self, *, search=None, status=None, workspace=None, limit=200):
        out = []
        for t in self.trees.values():
            run = {k: v for k, v in t.items() if k not in ("nodes", "runs")}
            if status and run.get("status") != status:
                continue
            if workspace and run.get("workspace") != workspace:
                continue
            if search and search.lower() not in json.dumps(t).lower():
                continue
            out.append(run)
        out.sort(key=lambda r: (r.get("started_at") or 0, r["id"]), reverse=True)
        return out[:limit]

    async def tree(self, run_id: str) -> dict[str, Any]:
        if run_id in self.trees:
            return self.trees[run_id]
        found = [t for k, t in self.trees.items() if k.startswith(run_id)]
        if len(found) != 1:
            raise KeyError(run_id)
        return found[0]

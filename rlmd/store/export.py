"""Exporting a run (and everything below it) as JSON or JSON Lines.

``fmt="json"``: one object::

    {"format": "rlmd-trajectory", "version": 1, "run": TREE}

where ``TREE`` is :meth:`rlmd.store.Store.tree`: the run's columns (JSON columns decoded),
``"nodes"`` (nested through ``"children"``; each node's payload in ``"data"``) and child
runs nested under the cell that started them (a node's ``"runs"``), or under the run's own
``"runs"`` when that cell is unknown.

``fmt="jsonl"``: one JSON object per line, flat, in tree order (each run followed by its
nodes in ``seq`` order, then its child runs):

* line 1: ``{"type": "export", "format": "rlmd-trajectory", "version": 1, "run_id": ROOT}``
* a run: ``{"type": "run", <run columns>}`` (``parent_run_id``, ``parent_node_id`` and
  ``root_run_id`` link it to the tree)
* a node: ``{"type": "node", <node columns>}`` (``run_id`` and ``parent_id`` link it)

:func:`tree_from_jsonl` rebuilds the same tree as the JSON export from the lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rlmd.store.queries import build_tree

if TYPE_CHECKING:
    from rlmd.store.db import Store

FORMAT = "rlmd-trajectory"
VERSION = 1


def export_run(store: Store, run_id: str, fmt: str = "json", *, indent: int | None = None) -> str:
    """Serialise run ``run_id`` (id or unique prefix) with its whole subtree.

    Args:
        store: the store to read.
        run_id: the run to export (any depth: a child run exports its own subtree).
        fmt: ``"json"`` or ``"jsonl"`` (see the module docstring).
        indent: indentation for ``"json"`` (``None``: compact).

    Returns:
        The text (JSON Lines end with a newline).

    Raises:
        KeyError: no such run.
        ValueError: unknown ``fmt``, or an ambiguous prefix.
    """
    if fmt not in ("json", "jsonl"):
        raise ValueError(f"unknown export format {fmt!r}: use 'json' or 'jsonl'")
    tree = store.tree(run_id)
    if fmt == "json":
        return json.dumps(
            {"format": FORMAT, "version": VERSION, "run": tree}, ensure_ascii=False, indent=indent
        )
    header = {"type": "export", "format": FORMAT, "version": VERSION, "run_id": tree["id"]}
    lines = [header, *flatten_tree(tree)]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def flatten_tree(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The JSONL records of a tree: ``{"type": "run", ...}`` / ``{"type": "node", ...}``
    without the nesting keys, runs before their nodes, nodes in ``seq`` order, then the child
    runs."""
    pending = [tree]
    while pending:
        run = pending.pop(0)
        yield {"type": "run", **{k: v for k, v in run.items() if k not in ("nodes", "runs")}}
        nodes: list[dict[str, Any]] = []
        child_runs: list[dict[str, Any]] = list(run["runs"])
        stack = list(run["nodes"])
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node["children"])
            child_runs.extend(node["runs"])
        for node in sorted(nodes, key=lambda n: n["seq"]):
            yield {
                "type": "node",
                **{k: v for k, v in node.items() if k not in ("children", "runs")},
            }
        pending[0:0] = sorted(child_runs, key=lambda r: (r.get("started_at") or 0, r["id"]))


def tree_from_jsonl(text: str) -> dict[str, Any]:
    """Rebuild the tree (as in the JSON export's ``"run"``) from :func:`export_run` JSONL.

    Raises:
        ValueError: no header line, or a line that is not JSON.
        KeyError: the root run is missing.
    """
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not records or records[0].get("type") != "export":
        raise ValueError("not an rlmd JSONL export: the first line must be the export header")
    strip = lambda r: {k: v for k, v in r.items() if k != "type"}  # noqa: E731
    runs = [strip(r) for r in records if r.get("type") == "run"]
    nodes = [strip(r) for r in records if r.get("type") == "node"]
    return build_tree(records[0]["run_id"], runs, nodes)

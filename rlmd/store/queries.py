"""Reading the trajectory store: listing, lookup, trees and full-text search.

:class:`Queries` is mixed into :class:`rlmd.store.Store`; every method returns plain dicts
(JSON columns decoded) so results can be rendered, exported or sent over a socket as is.
Every read first writes the events the store keeps in memory (:meth:`Store.flush`), and a
search first indexes the node text still pending (:meth:`Store.index_text`), so reads see
everything recorded before them.

Shapes:

run dict
    the ``runs`` columns (see :mod:`rlmd.store.schema`) with ``context_meta``, ``models``,
    ``sandbox``, ``budget`` and ``usage`` decoded from JSON.
node dict
    the ``nodes`` columns with ``data`` decoded and the text columns (``code``, ``stdout``,
    ``stderr``, ``error``) put back inside ``data`` (they are not top-level keys), and so is
    a cell's long ``final`` that is stored once, as the run's answer
    (:func:`rlmd.store.codec.put_answer_back`).
tree (:meth:`Queries.tree`, :func:`build_tree`)
    a run dict plus ``"nodes"`` (its top-level nodes, in ``seq`` order) and ``"runs"`` (child
    runs not attached to one of its nodes); every node has ``"children"`` (nodes whose
    ``parent_id`` is this node) and ``"runs"`` (child-run trees whose ``parent_node_id`` is
    this node: the cell that called ``rlm_query``), recursively.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rlmd.engine.budget import RUN_STATUSES
from rlmd.store.codec import (
    FINAL_IS_ANSWER,
    NODE_TEXT_COLUMNS,
    RUN_JSON_COLUMNS,
    loads,
    merge_text,
    put_answer_back,
)
from rlmd.store.codec import text as stored

if TYPE_CHECKING:
    from rlmd.store.sqlite import sqlite_utils

TREE_TOTAL_KEYS = (
    "runs",
    "max_depth",
    "iterations",
    "subcalls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)
_MAX_AMBIGUOUS_SHOWN = 10
MAX_SEARCH_WORDS = 100
"""The most words a run search takes: each adds a term to one SQL expression, and about
500 made it deeper than SQLite allows, which the CLI reported as a broken store."""


_PARENT_GONE = "NOT EXISTS (SELECT 1 FROM runs AS up WHERE up.id = runs.parent_run_id)"
"""SQL: the run's parent row is not in the store (an edited store, or one moved aside while a
run went on): :meth:`Queries.list_runs` lists such a run among the top runs."""


class RunQueryError(ValueError):
    """A :meth:`Queries.list_runs` argument no query can take. ``param`` names the argument
    (``"status"`` or ``"search"``), so a caller can name it as its user knows it (the CLI's
    ``--status``, the daemon's ``status`` field); ``str()`` is the whole message."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _as_text(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each bytes value (a BLOB another tool wrote into a text column) as text:
    UTF-8, an undecodable byte as its escape (``\\xff``). rlmd writes none, but they ended
    ``rlmd export`` in a traceback (bytes are not JSON) and ``rlmd show`` drew ``b'...'``."""
    if not any(isinstance(v, bytes) for v in row.values()):
        return row
    return {
        k: v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v
        for k, v in row.items()
    }


def decode_run(row: dict[str, Any]) -> dict[str, Any]:
    """A ``runs`` row as a run dict (JSON columns decoded, bytes as text)."""
    run = dict(_as_text(row))
    for name in RUN_JSON_COLUMNS:
        if name in run:
            run[name] = loads(run[name])
    return run


def decode_node(row: dict[str, Any]) -> dict[str, Any]:
    """A ``nodes`` row as a node dict (``data`` decoded, text columns moved into it, bytes
    as text)."""
    row = _as_text(row)
    node = {k: v for k, v in row.items() if k not in NODE_TEXT_COLUMNS}
    node["data"] = merge_text(loads(row.get("data")), row)
    return node


def build_tree(
    root_id: str, runs: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """Nest decoded runs and nodes into the tree of ``root_id`` (see the module docstring).

    Pure: inputs are not modified. A node is nested under its ``parent_id`` only when that
    parent is in the same run and came earlier (lower ``seq``), so bad data cannot make a
    cycle; other nodes are top level. Runs unreachable from ``root_id`` are ignored.

    Raises:
        KeyError: ``root_id`` is not among ``runs``.
    """
    run_map = {r["id"]: {**r, "nodes": [], "runs": []} for r in runs}
    if root_id not in run_map:
        raise KeyError(root_id)
    node_map: dict[str, dict[str, Any]] = {}
    per_run: dict[str | None, list[dict[str, Any]]] = {}
    for node in sorted(nodes, key=lambda n: (n.get("run_id") or "", n.get("seq") or 0)):
        copy = {**node, "children": [], "runs": []}
        node_map[node["id"]] = copy
        per_run.setdefault(node.get("run_id"), []).append(copy)
    for run_id, run_nodes in per_run.items():
        run = run_map.get(run_id)
        for node in run_nodes:
            parent_id = node.get("parent_id")
            parent = node_map.get(parent_id) if parent_id is not None else None
            if parent is not None and parent["run_id"] == run_id and parent["seq"] < node["seq"]:
                parent["children"].append(node)
            elif run is not None:
                run["nodes"].append(node)
    children: dict[str, list[dict[str, Any]]] = {}
    for run in run_map.values():
        if run.get("parent_run_id"):
            children.setdefault(run["parent_run_id"], []).append(run)
    seen = {root_id}
    stack = [run_map[root_id]]
    while stack:
        run = stack.pop()
        kids = sorted(
            children.get(run["id"], []), key=lambda r: (r.get("started_at") or 0, r["id"])
        )
        for child in kids:
            if child["id"] in seen:
                continue
            seen.add(child["id"])
            cell_id = child.get("parent_node_id")
            cell = node_map.get(cell_id) if cell_id is not None else None
            if cell is not None and cell["run_id"] == run["id"]:
                cell["runs"].append(child)
            else:
                run["runs"].append(child)
            stack.append(child)
    return run_map[root_id]


class Queries:
    """Read methods of :class:`rlmd.store.Store` (needs ``self.db`` and ``self._lock``)."""

    _lock: threading.RLock

    @property
    def db(self) -> sqlite_utils.Database:  # provided by Store
        raise NotImplementedError

    def flush(self) -> None:
        """Write events kept in memory (implemented by :class:`rlmd.store.Store`)."""

    def index_text(self, *, quiet: bool = False) -> int:
        """Index pending node text (implemented by :class:`rlmd.store.Store`)."""
        return 0

    def list_runs(
        self,
        limit: int = 50,
        offset: int = 0,
        status: str | Iterable[str] | None = None,
        root_only: bool = True,
        search: str | None = None,
        workspace: str | None = None,
    ) -> list[dict[str, Any]]:
        """Runs, newest first.

        Args:
            limit / offset: paging.
            status: keep runs with this status (or any of these statuses).
            root_only: only top-level runs: no ``parent_run_id``, or one whose row is gone.
            search: full-text query (words, quoted as literal terms) matched against the
                question, the answer and every cell's code and output; with ``root_only`` a
                root run matches when anything in its tree matches.
            workspace: only runs recorded for this project folder.

        Raises:
            RunQueryError: (a ``ValueError``) ``status`` is not one of
                :data:`~rlmd.engine.budget.RUN_STATUSES` (``param`` ``"status"``), or
                ``search`` has more than :data:`MAX_SEARCH_WORDS` words, or only double
                quotes (``param`` ``"search"``).

        Returns:
            Run dicts, each with ``"tree"``: totals over the run and all its descendants
            (``runs``, ``max_depth``, ``iterations``, ``subcalls``, ``input_tokens``,
            ``output_tokens``, ``cost_usd``).
        """
        where: list[str] = []
        params: dict[str, Any] = {"limit": int(limit), "offset": int(offset)}
        if root_only:  # a child whose parent row is gone is a top run too (review17)
            where.append(f"(parent_run_id IS NULL OR {_PARENT_GONE})")
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            for name in statuses:  # `complete` (a typo) matched nothing: "no runs match"
                if name not in RUN_STATUSES:
                    raise RunQueryError(
                        "status",
                        f"status {name!r} is no run status; one of: {', '.join(RUN_STATUSES)}",
                    )
            names = [f":status{i}" for i in range(len(statuses))]
            params.update({f"status{i}": stored(s) for i, s in enumerate(statuses)})
            where.append(f"status IN ({', '.join(names) or 'NULL'})")
        if workspace is not None:
            where.append("workspace = :workspace")
            params["workspace"] = stored(str(workspace))
        # Double quotes cannot be escaped inside an FTS5 term: search for the words around them.
        # A lone surrogate is looked for as it is stored (its escape): SQLite takes no other.
        words = stored(search.replace('"', " ")).split() if search is not None else []
        if search is not None and search.strip() and not words:
            # only quotes: nothing was left to look for and every run was listed (review17)
            raise RunQueryError(
                "search", "the search holds no word to look for (double quotes are left out)"
            )
        if len(words) > MAX_SEARCH_WORDS:  # SQLite: "Expression tree is too large"
            raise RunQueryError(
                "search", f"the search has {len(words)} words; it takes at most {MAX_SEARCH_WORDS}"
            )
        self.flush()
        if words:
            self.index_text(quiet=True)
            matched = self._search_matches(words, params)
            if root_only:  # a top run matches when anything in its tree does
                matched = f"SELECT root_run_id FROM runs WHERE id IN ({matched})"
                where.append(f"(id IN ({matched}) OR root_run_id IN ({matched}))")
            else:
                where.append(f"id IN ({matched})")
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, id DESC LIMIT :limit OFFSET :offset"
        with self._lock:
            runs = [decode_run(row) for row in self.db.query(sql, params)]
            totals = self._tree_totals([r["id"] for r in runs])
        for run in runs:
            run["tree"] = totals.get(run["id"], dict.fromkeys(TREE_TOTAL_KEYS, 0))
        return runs

    @staticmethod
    def _search_matches(words: list[str], params: dict[str, Any]) -> str:
        """SQL selecting the ids of runs where every word of ``words`` starts a word (full-text
        prefix, e.g. ``Stream`` finds ``StreamReader``) or occurs anywhere (substring, e.g.
        ``Reader``) in the question, answer or one node's code/output; fills ``params``."""
        params["query"] = " ".join(f'"{w}"*' for w in words)  # '"' is gone already
        for i, w in enumerate(words):
            params[f"like{i}"] = (
                "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            )

        def contains(columns: tuple[str, ...]) -> str:
            return " AND ".join(
                "(" + " OR ".join(f"{c} LIKE :like{i} ESCAPE '\\'" for c in columns) + ")"
                for i in range(len(words))
            )

        return (
            "SELECT runs.id FROM runs JOIN runs_fts ON runs_fts.rowid = runs.rowid "
            "WHERE runs_fts MATCH :query "
            "UNION SELECT nodes.run_id FROM nodes JOIN nodes_fts ON nodes_fts.rowid = nodes.rowid "
            "WHERE nodes_fts MATCH :query "
            f"UNION SELECT id FROM runs WHERE {contains(('question', 'answer'))} "
            f"UNION SELECT run_id FROM nodes WHERE {contains(NODE_TEXT_COLUMNS)}"
        )

    def _tree_totals(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Totals over each run's subtree (the run and its descendants), by run id."""
        totals: dict[str, dict[str, Any]] = {}
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            sql = (
                "WITH RECURSIVE sub(id, top) AS ("
                f" SELECT id, id FROM runs WHERE id IN ({marks})"
                " UNION SELECT runs.id, sub.top FROM runs JOIN sub ON runs.parent_run_id = sub.id)"
                " SELECT sub.top AS top, COUNT(*) AS runs, MAX(runs.depth) AS max_depth,"
                " SUM(iterations) AS iterations, SUM(subcalls) AS subcalls,"
                " SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
                " SUM(cost_usd) AS cost_usd FROM sub JOIN runs ON runs.id = sub.id GROUP BY sub.top"
            )
            for row in self.db.query(sql, chunk):
                top = row.pop("top")
                totals[top] = row
        return totals

    def get_run(self, run_id_or_prefix: str) -> dict[str, Any] | None:
        """The run with this id, else the one run whose id starts with it.

        Returns:
            The run dict, or ``None`` when nothing matches.

        Raises:
            ValueError: the prefix is empty, or matches several runs (the message lists them).
        """
        key = str(run_id_or_prefix or "").strip()
        if not key:
            raise ValueError("empty run id")
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON, a bad byte in argv)
            return None  # no run id holds one; SQLite would refuse the query with a codec error
        self.flush()
        with self._lock:
            rows = list(self.db.table("runs").rows_where("id = ?", [key]))
            if not rows:
                rows = list(
                    self.db.table("runs").rows_where(
                        "id >= ? AND id < ?",
                        [key, key + "\U0010ffff"],
                        order_by="id",
                        limit=_MAX_AMBIGUOUS_SHOWN + 1,
                    )
                )
        if not rows:
            return None
        if len(rows) > 1:
            shown = [
                f"{r['id']} ({(r['question'] or '')[:40]!r})" for r in rows[:_MAX_AMBIGUOUS_SHOWN]
            ]
            more = ", ..." if len(rows) > _MAX_AMBIGUOUS_SHOWN else ""
            raise ValueError(f"run id prefix {key!r} is ambiguous: {', '.join(shown)}{more}")
        return decode_run(rows[0])

    def nodes(self, run_id: str) -> list[dict[str, Any]]:
        """The nodes of run ``run_id`` (exact id), in ``seq`` order, as node dicts."""
        self.flush()
        with self._lock:
            nodes = [
                decode_node(r)
                for r in self.db.table("nodes").rows_where("run_id = ?", [run_id], order_by="seq")
            ]
            marked = [n for n in nodes if FINAL_IS_ANSWER in n["data"]]
            if marked:
                row = self.db.execute("SELECT answer FROM runs WHERE id = ?", [run_id]).fetchone()
                for node in marked:
                    put_answer_back(node["data"], row[0] if row else None)
            return nodes

    def child_runs(self, run_id: str) -> list[dict[str, Any]]:
        """Runs started directly by run ``run_id``, oldest first."""
        self.flush()
        with self._lock:
            rows = self.db.table("runs").rows_where(
                "parent_run_id = ?", [run_id], order_by="started_at, id"
            )
            return [decode_run(r) for r in rows]

    def tree(self, run_id: str) -> dict[str, Any]:
        """The run (id or unique prefix) with its nodes and all descendant runs nested (see
        the module docstring for the shape).

        Raises:
            KeyError: no such run.
            ValueError: the prefix is ambiguous.
        """
        run = self.get_run(run_id)
        if run is None:
            raise KeyError(run_id)
        sub = (
            "WITH RECURSIVE sub(id) AS (SELECT ? UNION "
            "SELECT runs.id FROM runs JOIN sub ON runs.parent_run_id = sub.id) "
        )
        with self._lock:
            runs = [
                decode_run(r)
                for r in self.db.query(
                    sub + "SELECT runs.* FROM runs JOIN sub USING (id)", [run["id"]]
                )
            ]
            nodes = [
                decode_node(r)
                for r in self.db.query(
                    sub
                    + "SELECT nodes.* FROM nodes WHERE run_id IN (SELECT id FROM sub) ORDER BY run_id, seq",
                    [run["id"]],
                )
            ]
        answers = {r["id"]: r.get("answer") for r in runs}
        for node in nodes:
            if FINAL_IS_ANSWER in node["data"]:
                put_answer_back(node["data"], answers.get(node["run_id"]))
        return build_tree(run["id"], runs, nodes)

    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """Full-text search over run questions/answers and node code/stdout/stderr/error.

        ``text`` is taken literally (each word a term, all required; FTS operators are
        quoted away).

        Returns:
            Hits, best first, runs before nodes: ``{"type": "run" | "node", "run_id",
            "root_run_id", "node_id" (None for runs), "kind" (node kind or None), "field"
            (the matching column), "snippet" (about 120 characters around the match)}``.
        """
        if not text or not text.strip():
            return []
        text = stored(text)  # a lone surrogate as it is stored
        self.flush()
        self.index_text(quiet=True)
        terms = [t.strip('"').lower() for t in self.db.quote_fts(text).split('" "')]
        hits: list[dict[str, Any]] = []
        with self._lock:
            for row in self.db.table("runs").search(
                text, quote=True, limit=limit, columns=["id", "root_run_id", "question", "answer"]
            ):
                field, snippet = _snippet(row, ("question", "answer"), terms)
                hits.append(
                    {
                        "type": "run",
                        "run_id": row["id"],
                        "root_run_id": row["root_run_id"],
                        "node_id": None,
                        "kind": None,
                        "field": field,
                        "snippet": snippet,
                    }
                )
            node_rows = list(
                self.db.table("nodes").search(
                    text,
                    quote=True,
                    limit=limit,
                    columns=["id", "run_id", "kind", *NODE_TEXT_COLUMNS],
                )
            )
            roots: dict[str, str | None] = {}
            for row in node_rows:
                if row["run_id"] not in roots:
                    found = self.db.execute(
                        "SELECT root_run_id FROM runs WHERE id = ?", [row["run_id"]]
                    ).fetchone()
                    roots[row["run_id"]] = found[0] if found else None
                field, snippet = _snippet(row, NODE_TEXT_COLUMNS, terms)
                hits.append(
                    {
                        "type": "node",
                        "run_id": row["run_id"],
                        "root_run_id": roots[row["run_id"]],
                        "node_id": row["id"],
                        "kind": row["kind"],
                        "field": field,
                        "snippet": snippet,
                    }
                )
        return hits[:limit]


def _snippet(
    row: dict[str, Any], fields: Iterable[str], terms: list[str], width: int = 120
) -> tuple[str | None, str]:
    """The first field containing a term, and the text around the first match."""
    first: tuple[str | None, str] = (None, "")
    for field in fields:
        value = row.get(field)
        if not value:
            continue
        lower = value.lower()
        positions = [p for p in (lower.find(t) for t in terms if t) if p >= 0]
        if positions:
            start = max(0, min(positions) - width // 3)
            piece = value[start : start + width]
            prefix = "…" if start > 0 else ""
            suffix = "…" if start + width < len(value) else ""
            return field, " ".join(f"{prefix}{piece}{suffix}".split())
        if first[0] is None:
            first = (field, " ".join(value[:width].split()))
    return first

"""Tests for the trajectory store (rlmd/store): recording, queries, export, crash recovery."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import stat
import subprocess
import sys
import time
import types
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from helpers.cli import rlmd
from helpers.server import Daemon
from helpers.store_events import USAGE, Emitter, record_three_depths

from rlmd import paths
from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    Event,
    IterationStarted,
    ModelCallFinished,
    RunFinished,
    RunStarted,
    SandboxStarted,
    new_id,
)
from rlmd.store import SCHEMA_VERSION, Store, StoreVersionError, export_run, tree_from_jsonl

# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "rlmd.db")
    yield s
    s.close()


def walk(node: dict) -> list[dict]:
    out = [node]
    for child in node.get("children", []):
        out.extend(walk(child))
    return out


# -- recording and the tree ------------------------------------------------------------------


def test_three_depth_tree_shape_counters_statuses(store: Store) -> None:
    ids = record_three_depths(store)
    assert store.errors == [] and not store.anomalies

    tree = store.tree(ids["root"])
    assert tree["depth"] == 0 and tree["status"] == "completed" and tree["answer"] == "42"
    assert [n["id"] for n in tree["nodes"]] == [ids["it1"], ids["it2"]]
    it1, it2 = tree["nodes"]
    assert [n["kind"] for n in it1["children"]] == ["model_call", "cell", "cell"]
    assert [n["kind"] for n in it2["children"]] == ["model_call", "cell", "compaction"]
    cell1 = it1["children"][1]
    assert [n["id"] for n in cell1["children"]] == [ids["sub1"]]
    assert cell1["children"][0]["role"] == "sub"
    assert cell1["data"]["stdout"] == "the answer is three zebras\n"
    assert cell1["data"]["variables"][0]["name"] == "x"

    # child run nested under the cell that started it, grandchild under the child's cell
    cell3 = it2["children"][1]
    assert cell3["id"] == ids["cell3"]
    assert [r["id"] for r in cell3["runs"]] == [ids["child"]]
    child = cell3["runs"][0]
    assert (
        child["depth"] == 1
        and child["answer"] == "42 from child"
        and child["root_run_id"] == ids["root"]
    )
    child_cell = child["nodes"][0]["children"][1]
    assert child_cell["id"] == ids["child_cell"]
    grand = child_cell["runs"][0]
    assert grand["id"] == ids["grand"] and grand["depth"] == 2 and grand["answer"] == "42"
    assert grand["workspace"] == "/proj"  # inherited from the parent run
    assert tree["runs"] == [] and child["runs"] == []

    # statuses
    assert it1["status"] == "ok" and it2["status"] == "ok"  # closed by the next iteration / run end
    assert it2["finished_at"] is not None
    assert it1["children"][2]["status"] == "error"
    assert "NameError" in it1["children"][2]["data"]["error"]
    assert (
        it2["children"][2]["status"] == "ok"
        and it2["children"][2]["data"]["summary"] == "short summary"
    )
    assert all(n["status"] != "running" for n in walk({"children": tree["nodes"]})[1:])

    # counters: own model calls only; usage is the engine's tree total
    run = store.get_run(ids["root"])
    assert run["iterations"] == 2 and run["subcalls"] == 1
    assert run["input_tokens"] == 100 + 50 + 150 and run["output_tokens"] == 20 + 10 + 30
    assert run["cost_usd"] == pytest.approx(300e-6 + 60 * 2e-6)
    assert run["usage"] == USAGE
    assert run["root_model"] == "root-m" and run["sub_model"] == "sub-m"
    assert run["context_meta"] == {"type": "str", "chars": 1000}
    assert run["pid"] == os.getpid() and run["workspace"] == "/proj"
    assert store.get_run(ids["child"])["iterations"] == 1

    # node fields
    call1 = it1["children"][0]
    assert (
        call1["input_tokens"] == 100 and call1["output_tokens"] == 20 and call1["latency_s"] == 0.5
    )
    assert call1["model"] == "root-m" and call1["data"]["response"].startswith("```repl")
    nodes = store.nodes(ids["root"])
    assert [n["seq"] for n in nodes] == list(range(len(nodes)))

    # listing: only the root, with tree totals
    runs = store.list_runs()
    assert [r["id"] for r in runs] == [ids["root"]]
    totals = runs[0]["tree"]
    assert totals["runs"] == 3 and totals["max_depth"] == 2 and totals["iterations"] == 4
    assert totals["input_tokens"] == 300 + 100 + 80
    all_runs = store.list_runs(root_only=False)
    assert {r["id"] for r in all_runs} == {ids["root"], ids["child"], ids["grand"]}
    assert store.list_runs(status="running") == []
    assert len(store.list_runs(status=["completed", "failed"])) == 1
    assert store.list_runs(workspace="/elsewhere") == []
    assert [r["id"] for r in store.list_runs(workspace="/proj")] == [ids["root"]]
    assert [r["id"] for r in store.child_runs(ids["root"])] == [ids["child"]]


def test_tree_of_a_child_run_is_its_subtree(store: Store) -> None:
    ids = record_three_depths(store)
    sub = store.tree(ids["child"])
    assert sub["id"] == ids["child"]
    assert sub["nodes"][0]["children"][1]["runs"][0]["id"] == ids["grand"]
    with pytest.raises(KeyError):
        store.tree("ffffffffffffffff")


def test_list_runs_newest_first_and_paging(store: Store) -> None:
    ids = []
    for i in range(5):
        e = Emitter(store.record)
        e.t += i * 10
        e.start(f"question {i}")
        e.finish(answer=str(i))
        ids.append(e.run_id)
    assert [r["id"] for r in store.list_runs()] == ids[::-1]
    assert [r["id"] for r in store.list_runs(limit=2, offset=1)] == ids[::-1][1:3]


def test_sandbox_started_merges_into_run(store: Store) -> None:
    e = Emitter(store.record)
    e.start("q")
    e.emit(SandboxStarted, sandbox={"kind": "subprocess", "isolation": {"process": True}})
    run = store.get_run(e.run_id)
    assert run["sandbox"] == {"kind": "subprocess", "isolation": {"process": True}}
    assert not store.anomalies


# -- crash recovery --------------------------------------------------------------------------


def _crashing_writer(path: str, run_id: str, cell_id: str) -> None:
    """Records a run that never finishes, then the process exits."""
    s = Store(path)
    e = Emitter(s.record, run_id=run_id)
    e.start("will crash")
    it = e.iteration(0)
    e.call(
        it, "root", [{"role": "user", "content": "hello"}], "```repl\nwhile True: pass\n```", 10, 5
    )
    e.emit(CellStarted, cell_id, it, index=0, code="while True: pass")
    os._exit(0)  # no run.finished, no close


def test_crash_mid_run_becomes_interrupted(tmp_path: Path) -> None:
    path = str(tmp_path / "rlmd.db")
    run_id, cell_id = new_id(), new_id()
    proc = multiprocessing.get_context("spawn").Process(
        target=_crashing_writer, args=(path, run_id, cell_id)
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0

    live = Store(path)
    alive = Emitter(live.record)
    alive.start("still running here")  # recorded by this (living) process

    s = Store(path, check_interrupted=True)
    run = s.get_run(run_id)
    assert run["status"] == "interrupted" and run["finished_at"] is not None
    assert "ended before the run finished" in run["error"]
    nodes = s.nodes(run_id)
    assert [n["kind"] for n in nodes] == ["iteration", "model_call", "cell"]
    assert (
        nodes[1]["data"]["response"] == "```repl\nwhile True: pass\n```"
        and nodes[1]["status"] == "ok"
    )
    assert nodes[2]["id"] == cell_id and nodes[2]["status"] == "error"
    assert nodes[2]["data"]["code"] == "while True: pass"
    assert s.get_run(alive.run_id)["status"] == "running"  # its pid is alive
    assert s.mark_interrupted() == []
    assert s.mark_interrupted(force=True) == [alive.run_id]
    assert s.get_run(alive.run_id)["status"] == "interrupted"
    s.close()
    live.close()


def _pending(path: Any) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM nodes_fts_pending").fetchone()[0])


def _indexed(path: Any, word: str) -> bool:
    """Whether ``word`` is in the node full-text index itself (no catch-up first)."""
    with sqlite3.connect(path) as conn:
        sql = "SELECT 1 FROM nodes_fts WHERE nodes_fts MATCH ?"
        return conn.execute(sql, [word]).fetchone() is not None


def test_a_killed_writers_node_text_is_indexed_by_the_next_start_or_search(
    tmp_path: Path,
) -> None:
    """Node text is indexed in batches, not at insert: what a killed process left pending is
    indexed by the next store that checks for interrupted runs (the daemon's start) or
    searches; nothing stays out of the index."""
    for catch_up in ("start", "search"):
        path = str(tmp_path / f"{catch_up}.db")
        proc = multiprocessing.get_context("spawn").Process(
            target=_crashing_writer, args=(path, new_id(), new_id())
        )
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        assert _pending(path) > 0 and not _indexed(path, "while")
        s = Store(path, check_interrupted=catch_up == "start")
        if catch_up == "start":
            assert _pending(path) == 0 and _indexed(path, "while")
        assert [h["field"] for h in s.search("while")] == ["code"]
        assert _pending(path) == 0 and _indexed(path, "while")
        s.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')")
        s.close()


def test_node_text_is_indexed_at_close_and_found_right_after_a_run(tmp_path: Path) -> None:
    path = tmp_path / "rlmd.db"
    with Store(path) as s:
        e = Emitter(s.record)
        e.start("question")
        it = e.iteration(0)
        c = e.cell_start(it, 0, "print('okapi')")
        assert not _indexed(path, "okapi")  # the insert did not index it
        e.cell_finish(c, it, 0, "print('okapi')", stdout="quokka\n")
        e.finish(answer="done")
        assert [h["node_id"] for h in s.search("quokka")] == [c]  # right after the run
        c2 = e.cell_start(it, 1, "print('tapir')")
    assert _pending(path) == 0 and _indexed(path, "tapir")  # close indexed the rest
    with Store(path) as s:
        assert [h["node_id"] for h in s.search("tapir")] == [c2]
        s.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')")


def test_a_version_2_database_is_migrated_and_its_index_kept(tmp_path: Path) -> None:
    """A file written before node text was indexed in batches (schema version 2, every node
    indexed by triggers) keeps its search, and its old nodes can change text."""
    from rlmd.store import schema
    from rlmd.store.sqlite import sqlite_utils

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    db = sqlite_utils.Database(conn)
    for number, migration in enumerate(schema.MIGRATIONS[:2], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number:d}")
    conn.commit()
    conn.execute(
        "INSERT INTO runs (id, root_run_id, question, status) VALUES ('r', 'r', 'q', 'running')"
    )
    conn.execute(
        "INSERT INTO nodes (id, run_id, kind, seq, status, code, data) "
        "VALUES ('c', 'r', 'cell', 0, 'running', 'print(''gazelle'')', '{}')"
    )
    conn.execute(
        "INSERT INTO nodes (id, run_id, kind, seq, data) VALUES ('i', 'r', 'iteration', 1, '{}')"
    )
    conn.commit()
    assert _indexed(path, "gazelle")  # the old insert trigger indexed it
    conn.close()

    with Store(path) as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert _pending(path) == 0
        assert [h["node_id"] for h in s.search("gazelle")] == ["c"]
        s.record(CellFinished(run_id="r", depth=0, node_id="c", stdout="ibex\n", code="x = 1"))
        assert [h["field"] for h in s.search("ibex")] == ["stdout"]
        assert s.search("gazelle") == []  # the old text left the index with the update
        s.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')")
        e = Emitter(s.record)
        e.start("new run")
        e.cell_start(e.iteration(0), 0, "print('springbok')")
        assert len(s.search("springbok")) == 1
        s.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')")


def _node_indexes(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'nodes'"
            )
        }
    finally:
        conn.close()


def test_a_version_3_database_loses_the_unused_node_indexes_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    from rlmd.store import schema
    from rlmd.store.sqlite import sqlite_utils

    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    db = sqlite_utils.Database(conn)
    for number, migration in enumerate(schema.MIGRATIONS[:3], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {number:d}")
    conn.commit()
    conn.close()
    assert {"idx_nodes_status", "idx_nodes_parent_id"} <= _node_indexes(path)
    with Store(path) as s:
        ids = record_three_depths(s)
    with Store(path) as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s.get_run(ids["root"])["iterations"] == 2
    assert not {"idx_nodes_status", "idx_nodes_parent_id"} & _node_indexes(path)
    assert "idx_nodes_run_id_seq" in _node_indexes(path)
    Store(tmp_path / "new.db").close()  # a new file: created by version 1, dropped by 4
    assert not {"idx_nodes_status", "idx_nodes_parent_id"} & _node_indexes(tmp_path / "new.db")


def _iteration_rows(s: Store, run_id: str) -> list[tuple[Any, ...]]:
    return s.db.execute(
        "SELECT started_at, status, finished_at, latency_s FROM nodes "
        "WHERE run_id = ? AND kind = 'iteration' ORDER BY seq",
        [run_id],
    ).fetchall()


def test_each_iteration_closes_the_one_before_also_across_stores(tmp_path: Path) -> None:
    """An iteration ends where the next one starts, whether the store inserted the one before
    (closed by id) or another store did (a second Store on the file mid-run: searched)."""
    path = tmp_path / "it.db"
    s = Store(path)
    e = Emitter(s.record)
    e.start("iterations")
    e.iteration(0)
    e.iteration(1)
    s.close()
    s = Store(path)  # knows no iteration of this run: the next one searches for it
    e.sink = s.record
    e.iteration(2)
    e.iteration(3)
    rows = _iteration_rows(s, e.run_id)
    assert [r[1] for r in rows] == ["ok", "ok", "ok", "running"]
    assert [r[2] for r in rows[:3]] == [r[0] for r in rows[1:]]  # the next one's start
    assert all(r[3] == 1.0 for r in rows[:3]) and rows[3][2] is None
    e.iteration(4)
    e.finish(answer="done")
    rows = _iteration_rows(s, e.run_id)
    assert [r[1] for r in rows] == ["ok"] * 5
    assert e.run_id not in s._open_iterations
    s.close()


def test_a_rolled_back_batch_forgets_the_iteration_it_opened(tmp_path: Path) -> None:
    s = Store(tmp_path / "rb.db")
    e = Emitter(s.record)
    e.start("rollback")
    e.iteration(0)
    assert e.run_id in s._open_iterations
    with pytest.raises(sqlite3.OperationalError), s._lock, s._write():
        s._exec("INSERT INTO no_such_table VALUES (1)")
    assert s._open_iterations == {}  # it may hold an iteration the rollback undid
    e.iteration(1)
    e.finish(answer="x")
    assert [r[1] for r in _iteration_rows(s, e.run_id)] == ["ok", "ok"]
    s.close()


# -- growth, redaction -----------------------------------------------------------------------


def _record_iterations(path: Path, n: int) -> Store:
    s = Store(path)
    e = Emitter(s.record)
    e.start("grow")
    for i in range(n):
        it = e.iteration(i)
        # only the messages new since the previous call, as the engine sends them
        new = [{"role": "user", "content": f"output of iteration {i:03d}: " + "x" * 400}]
        e.call(it, "root", new, f"```repl\nprint({i:03d})\n```" + "y" * 400, 1000 + i * 500, 100)
        c = e.cell_start(it, 0, f"print({i:03d})" + "#" * 200)
        e.cell_finish(c, it, 0, f"print({i:03d})" + "#" * 200, stdout=f"{i:03d} " * 1000)
    e.finish(answer="done")
    return s


def _row_bytes(s: Store) -> int:
    total = 0
    for table in ("runs", "nodes"):
        for row in s.db.execute(f"SELECT * FROM {table}").fetchall():
            total += sum(len(str(v)) for v in row if v is not None)
    return total


def test_store_grows_linearly(tmp_path: Path) -> None:
    base, one, many = (_record_iterations(tmp_path / f"{n}.db", n) for n in (0, 1, 30))
    per_iteration = _row_bytes(one) - _row_bytes(base)
    growth = _row_bytes(many) - _row_bytes(base)
    assert 25 * per_iteration < growth < 32 * per_iteration  # quadratic would be ~15x more

    for s in (base, one, many):
        s.close()  # checkpoints the WAL into the file
    size = {n: (tmp_path / f"{n}.db").stat().st_size for n in (0, 30)}
    # file bytes (FTS index and page slack included) stay within a small factor of the payload
    assert size[30] - size[0] < 3 * 30 * per_iteration


def test_secrets_never_reach_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-" + os.urandom(12).hex()
    monkeypatch.setenv("FOO_API_KEY", secret)
    path = tmp_path / "rlmd.db"
    s = Store(path)
    e = Emitter(s.record)
    # not only strings: a path, bytes and an object's repr inside a tuple are stored as text
    odd = (PurePosixPath(f"/k/{secret}"), secret.encode(), types.SimpleNamespace(key=secret))
    e.start(f"use key {secret} please", budget={"key": secret, "odd": odd})
    it = e.iteration(0)
    e.call(
        it, "root", [{"role": "user", "content": f"the key is {secret}"}], f"I saw {secret}", 10, 5
    )
    c = e.cell_start(it, 0, f"print('{secret}')")
    e.cell_finish(
        c, it, 0, f"print('{secret}')", stdout=secret + "\n", error=f"ValueError: {secret}"
    )
    e.finish(answer=secret, error=f"failed with {secret}")
    assert s.errors == []
    assert "[REDACTED]" in s.get_run(e.run_id)["question"]
    assert s.get_run(e.run_id)["budget"]["odd"][0] == "/k/[REDACTED]"
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())  # db, -wal, -shm
    s.close()
    blobs += b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in blobs
    assert b"[REDACTED]" in blobs


# -- concurrency -----------------------------------------------------------------------------


def _concurrent_writer(path: str, run_id: str, iterations: int, barrier: Any) -> None:
    barrier.wait(30)
    s = Store(path)  # both processes may create and migrate the file at the same moment
    e = Emitter(s.record, run_id=run_id)
    e.start(f"writer {run_id}")
    for i in range(iterations):
        it = e.iteration(i)
        e.call(it, "root", [{"role": "user", "content": str(i)}], "r", 10, 1)
        c = e.cell_start(it, 0, "pass")
        e.cell_finish(c, it, 0, "pass", stdout=str(i))
    e.finish(answer=run_id)
    assert not s.errors, s.errors
    s.close()


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    run_ids = [new_id(), new_id()]
    procs = [ctx.Process(target=_concurrent_writer, args=(path, r, 40, barrier)) for r in run_ids]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with Store(path) as s:
        for run_id in run_ids:
            run = s.get_run(run_id)
            assert run["status"] == "completed" and run["answer"] == run_id
            assert run["iterations"] == 40 and run["input_tokens"] == 400
            assert len(s.nodes(run_id)) == 40 * 3


# -- lookup, search, export ------------------------------------------------------------------


def test_prefix_lookup_and_ambiguity(store: Store) -> None:
    for run_id in ("abc123000001", "abc123000002", "abd999000000"):
        Emitter(store.record, run_id=run_id).start(f"question {run_id}")
    assert store.get_run("abd")["id"] == "abd999000000"
    assert store.get_run("abc123000002")["id"] == "abc123000002"
    assert store.get_run("zzz") is None
    with pytest.raises(ValueError) as err:
        store.get_run("abc1")
    assert "abc123000001" in str(err.value) and "abc123000002" in str(err.value)
    with pytest.raises(ValueError):
        store.get_run("")
    assert store.get_run("a%") is None and store.get_run("ab_") is None  # no LIKE wildcards


def test_full_text_search(store: Store) -> None:
    ids = record_three_depths(store)
    hits = store.search("zebras")
    assert {(h["type"], h["field"]) for h in hits} == {("run", "question"), ("node", "code")}
    assert hits[0]["run_id"] == ids["root"] and hits[0]["node_id"] is None
    (stdout_hit,) = store.search("three")  # a word only in a cell's output
    assert stdout_hit["field"] == "stdout" and stdout_hit["kind"] == "cell"
    assert stdout_hit["node_id"] == ids["cell1"] and stdout_hit["root_run_id"] == ids["root"]
    assert "three zebras" in stdout_hit["snippet"]
    # a word only in a grandchild cell's code finds the grandchild and, via its tree, the root
    assert any(h["run_id"] == ids["child"] for h in store.search("deeper"))
    assert store.search("undefined_name")[0]["field"] in ("code", "error")
    assert store.search("nonexistentword") == [] and store.search("  ") == []
    assert store.search('NOT "unbalanced OR (') == []  # FTS syntax is quoted away, no error
    assert [r["id"] for r in store.list_runs(search="undefined_name")] == [ids["root"]]
    assert [r["id"] for r in store.list_runs(search="deeper", root_only=False)] != []
    assert store.list_runs(search="nonexistentword") == []


def test_a_child_run_whose_parent_row_is_gone_is_listed_as_a_top_run(
    tmp_path: Path, store: Store
) -> None:
    """Review17 left: a child run whose parent row is gone (an edited store, or a store moved
    aside while a run went on: the child's start lands in the new store, the root's never
    did) was listed by no ``rlmd runs``: only runs without a parent were. Such a run is now
    listed, with its own subtree's totals, and found by a search of anything in it."""
    ids = record_three_depths(store)
    store.flush()
    store.db.execute("DELETE FROM runs WHERE id = ?", [ids["root"]])
    listed = store.list_runs()
    assert [r["id"] for r in listed] == [ids["child"]]
    assert listed[0]["tree"]["runs"] == 2 and listed[0]["tree"]["max_depth"] == 2
    assert [r["id"] for r in store.list_runs(search="deeper")] == [ids["child"]]
    assert store.list_runs(search="zebras") == []  # the root's own text went with it
    assert [r["id"] for r in store.list_runs(status="completed")] == [ids["child"]]
    store.close()
    shown = rlmd("runs", "--json", home=tmp_path)
    assert [r["id"] for r in json.loads(shown.stdout)] == [ids["child"]], shown.stderr


def test_fts_follows_updates(store: Store) -> None:
    e = Emitter(store.record)
    e.start("first")
    it = e.iteration(0)
    c = e.cell_start(it, 0, "print('aardvark')")
    assert store.search("aardvark")[0]["node_id"] == c
    e.cell_finish(c, it, 0, "print('aardvark')", stdout="pangolin\n")
    assert {h["field"] for h in store.search("pangolin")} == {"stdout"}
    assert (
        store.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')") is not None
    )
    assert store.db.execute("INSERT INTO runs_fts(runs_fts) VALUES('integrity-check')") is not None


def test_export_round_trip(store: Store) -> None:
    ids = record_three_depths(store)
    tree = json.loads(json.dumps(store.tree(ids["root"])))

    doc = json.loads(export_run(store, ids["root"], "json"))
    assert doc["format"] == "rlmd-trajectory" and doc["version"] == 1
    assert doc["run"] == tree

    text = export_run(store, ids["root"][:14], fmt="jsonl")
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["type"] == "export" and lines[0]["run_id"] == ids["root"]
    assert sum(1 for r in lines if r["type"] == "run") == 3
    node_count = sum(len(store.nodes(r)) for r in (ids["root"], ids["child"], ids["grand"]))
    assert sum(1 for r in lines if r["type"] == "node") == node_count
    assert all("children" not in r and "nodes" not in r for r in lines)
    assert tree_from_jsonl(text) == tree

    with pytest.raises(ValueError):
        export_run(store, ids["root"], "xml")
    with pytest.raises(KeyError):
        export_run(store, "ffffffff", "json")


def top_level_statements(trace: list[str]) -> list[str]:
    """The statements Python ran, from a ``set_trace_callback`` log: SQLite also reports the
    statements run inside FTS5 (prefixed ``--``) and the outer statement again at the start of
    each trigger it fires (collapsed here)."""
    out: list[str] = []
    for sql in trace:
        if sql.startswith("--") or (out and out[-1] == sql):
            continue
        out.append(sql)
    return out


def test_recording_costs_few_statements(store: Store) -> None:
    """The write path must not read the schema again (sqlite-utils' table methods did, ~22
    statements per event): a handful of prepared statements per event."""
    trace: list[str] = []
    events = 0

    def count(event: Event) -> None:
        nonlocal events
        events += 1
        store.record(event)

    store.db.conn.set_trace_callback(trace.append)
    try:
        record_three_depths_with(count)
    finally:
        store.db.conn.set_trace_callback(None)
    assert store.errors == [] and events > 20
    statements = top_level_statements(trace)
    assert not [s for s in statements if "sqlite_master" in s or "table_info" in s.lower()]
    assert statements.count("BEGIN IMMEDIATE") == events  # still one transaction per event
    assert len(statements) / events <= 6, statements


def record_three_depths_with(sink: Any) -> dict[str, str]:
    """:func:`record_three_depths` into any sink (it only calls ``store.record``)."""
    return record_three_depths(types.SimpleNamespace(record=sink))  # type: ignore[arg-type]


def test_fts_reindexes_only_changed_text(store: Store) -> None:
    e = Emitter(store.record)
    e.start("question")
    it = e.iteration(0)
    trace: list[str] = []
    store.db.conn.set_trace_callback(trace.append)
    e.call(it, "sub", [{"role": "user", "content": "hello"}], "hi", 3, 1)
    c = e.cell_start(it, 0, "print('walrus')")
    del trace[:]
    e.cell_finish(c, it, 0, "print('walrus')", stdout="narwhal\n")
    store.db.conn.set_trace_callback(None)
    updates = [s for s in top_level_statements(trace) if s.startswith("UPDATE [nodes]")]
    assert len(updates) == 1 and "[code]" not in updates[0]  # unchanged text is not set again
    assert store.search("walrus")[0]["node_id"] == c
    assert store.search("narwhal")[0]["node_id"] == c
    store.db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES('integrity-check')")


def test_background_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlmd.store.db as store_db

    monkeypatch.setattr(store_db, "CHECKPOINT_EVERY", 5)
    store = Store(tmp_path / "rlmd.db")
    assert store._checkpointer is None  # started when the first checkpoint is due
    ids = record_three_depths(store)
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer._thread.is_alive()
    deadline = time.monotonic() + 10
    while checkpointer.done == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpointer.done >= 1
    store.close()
    assert not checkpointer._thread.is_alive()
    with Store(tmp_path / "rlmd.db") as again:
        assert again.get_run(ids["root"])["status"] == "completed"
    assert Store(":memory:")._checkpointer is None  # no WAL, no thread


# -- robustness ------------------------------------------------------------------------------


def test_unknown_runs_and_odd_events_do_not_raise(store: Store) -> None:
    store.record(IterationStarted(run_id="ghost", depth=1, node_id="n1", index=0))
    store.record(
        CellFinished(run_id="ghost", depth=1, node_id="n2", parent_id="n1", code="x", stdout="boo")
    )
    store.record(
        ModelCallFinished(run_id="ghost", depth=1, parent_id="n1", role="sub", input_tokens=3)
    )
    store.record(Event(run_id="ghost", depth=1))  # not a kind the store knows
    store.record(CellStarted(run_id="ghost", depth=1, node_id="n3", parent_id="n1"))
    answer: Any = {"x": 1}  # not the str the type says: stored as JSON
    store.record(RunFinished(run_id="ghost2", depth=0, status="failed", answer=answer))
    store.record(CellStarted(run_id="ghost", depth=1, node_id="n4", parent_id="n1", code=object()))  # type: ignore[arg-type]
    assert store.errors == []
    assert store.anomalies["unknown_run"] == 2
    assert store.anomalies["unknown_node"] == 2 and store.anomalies["missing_node_id"] == 1
    assert store.anomalies["unknown_kind"] == 1
    ghost = store.get_run("ghost")
    assert ghost["status"] == "running" and ghost["iterations"] == 1 and ghost["subcalls"] == 1
    assert ghost["input_tokens"] == 3
    assert [n["kind"] for n in store.nodes("ghost")] == [
        "iteration",
        "cell",
        "model_call",
        "cell",
        "cell",
    ]
    assert store.nodes("ghost")[1]["data"]["stdout"] == "boo"
    assert store.get_run("ghost2")["answer"] == '{"x":1}'
    # the late run.started fills in the placeholder
    Emitter(store.record, run_id="ghost", depth=1).start("late start")
    ghost = store.get_run("ghost")
    assert ghost["question"] == "late start" and ghost["error"] is None and ghost["iterations"] == 1

    store.close()
    store.record(RunStarted(run_id="after-close", depth=0))  # closed store: counted, not raised
    assert store.anomalies["error"] == 1 and store.errors


def test_migrations_idempotent_and_newer_version_rejected(tmp_path: Path) -> None:
    path = tmp_path / "rlmd.db"
    with Store(path) as s:
        e = Emitter(s.record)
        e.start("persisted")
        schema_sql = s.db.schema
    for _ in range(2):
        with Store(path) as s:
            assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert s.db.schema == schema_sql
            assert s.db.journal_mode == "wal"
            assert s.get_run(e.run_id)["question"] == "persisted"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreVersionError, match="newer|upgrade"):
        Store(path)


def test_memory_store_and_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(":memory:") as s:
        Emitter(s.record).start("in memory")
        assert len(s.list_runs()) == 1
    monkeypatch.setenv("RLMD_HOME", str(tmp_path / "home"))
    with Store() as s:
        assert Path(s.path) == tmp_path / "home" / "rlmd.db"


# -- who may read the store -------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_another_user_cannot_read_a_fresh_home_or_its_store(tmp_path: Path) -> None:
    """With the usual umask 022 the home was 0755 and rlmd.db 0644: any local user could
    read every question, answer and code context. A run creates them private; the daemon's
    open store (-wal, -shm) and its socket folder are private too."""
    home = tmp_path / "nested" / "rlmd"  # does not exist yet
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('ok')\n```"}))
    old_umask = os.umask(0o022)
    try:
        run = rlmd(
            "run", "q", "--context", "-", "--model", f"scripted:{script}", home=home, input="x"
        )
        assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stderr
        daemon = Daemon(home).start()  # holds the store open: -wal and -shm exist
        try:
            names = ("", "rlmd.db", "rlmd.db-wal", "rlmd.db-shm", "run")
            modes = {name: mode(home / name) for name in names}
        finally:
            daemon.stop()
    finally:
        os.umask(old_umask)
    assert modes == {
        "": 0o700,
        "rlmd.db": 0o600,
        "rlmd.db-wal": 0o600,
        "rlmd.db-shm": 0o600,
        "run": 0o700,
    }


def test_an_older_world_readable_home_and_store_are_made_private(rlmd_home: Path) -> None:
    """A home and store left readable by an older rlmd (and a -wal a crash left behind)."""
    db = paths.store_path()
    with Store(db) as store:
        store.record(RunStarted(run_id=new_id(), depth=0, question="secret"))
    for path in (rlmd_home, db, Path(f"{db}-wal")):
        path.touch()
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    with Store(paths.store_path()):
        assert [mode(p) for p in (rlmd_home, db, Path(f"{db}-wal"))] == [0o700, 0o600, 0o600]


def test_the_store_imports_sqlite_utils_without_pandas_and_leaves_it_importable():
    # sqlite_utils imports pandas and numpy when installed (~1.2 s per rlmd process); the
    # store hides them for that import only. A fresh interpreter shows both halves.
    code = (
        "import importlib.util, sys\n"
        "import rlmd.store\n"
        "print('pandas' in sys.modules, 'numpy' in sys.modules)\n"
        "print(all(sys.modules.get(n, 1) is not None for n in ('pandas', 'numpy')))\n"
        "has = importlib.util.find_spec('numpy') is not None\n"
        "print(not has or __import__('numpy').__name__ == 'numpy')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False", "True", "True"]


def test_a_key_after_an_undecodable_byte_is_still_redacted(tmp_path: Path) -> None:
    """A lone surrogate (an undecodable byte) right before a key-shaped string: the key is
    removed before the surrogate becomes its six-character escape (``\\udcff``), whose last
    letter would otherwise hide the key's start from the redactor."""
    key = "sk-proj-" + os.urandom(24).hex()
    s = Store(tmp_path / "rlmd.db")
    e = Emitter(s.record)
    e.start("q")
    it = e.iteration(0)
    c = e.cell_start(it, 0, "print(open('f', errors='surrogateescape').read())")
    e.cell_finish(c, it, 0, "print(1)", stdout=f"\udcff{key}\n", error=f"E: \udc80{key}")
    e.finish(answer="a")
    assert s.errors == []
    s.close()
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert key.encode() not in blobs and b"\\udcff[REDACTED]" in blobs


# -- review15: a long FINAL is stored once ---------------------------------------------------


def _node_payload_chars(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COALESCE(SUM(length(data)), 0) FROM nodes").fetchone()[0])


def test_a_long_final_is_stored_once_and_every_reader_still_sees_it(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review14 left: a 50 MB ``FINAL`` was stored twice (the cell's payload and the run's
    answer: +100 MB of store). The answer is now the one copy; the cell keeps a mark and
    every read (tree, nodes, export, ``rlmd show``) gets its ``final`` back."""
    script = tmp_path / "s.json"
    code = "```repl\nx = 'ab cd ' * 400000\nFINAL(x)\n```"
    script.write_text(json.dumps({"default": code}))
    done = rlmd(
        "run", "q", "--context", str(script), "--model", f"scripted:{script}",
        "--sandbox", "inprocess", "--quiet", home=rlmd_home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = "ab cd " * 400000
    db = paths.store_path()
    assert _node_payload_chars(db) < 100_000  # was 2.4 M: the answer again
    with Store(db) as store:
        (run,) = store.list_runs()
        assert run["answer"] == answer and run["answer_source"] == "final"
        tree = store.tree(run["id"])
        cells = [n for n in walk(tree["nodes"][0]) if n["kind"] == "cell"]
        assert [c["data"]["final"] == answer for c in cells] == [True]
        assert "final_is_answer" not in cells[0]["data"]
        (cell,) = [n for n in store.nodes(run["id"]) if n["kind"] == "cell"]
        assert cell["data"]["final"] == answer and "final_is_answer" not in cell["data"]
        lines = [json.loads(x) for x in export_run(store, run["id"], "jsonl").splitlines()]
        assert [r["data"]["final"] for r in lines if r.get("kind") == "cell"] == [answer]
    shown = rlmd("show", run["id"], home=rlmd_home)
    assert shown.returncode == 0 and "FINAL: ab cd ab cd" in shown.stdout, shown.stderr


def test_only_the_final_that_became_the_answer_loses_its_copy(store: Store) -> None:
    """One transaction per event (:meth:`Store.record`): a refused long ``FINAL`` keeps its
    value (it is not the answer), the accepted one is stored once; a short answer is left
    in both places."""
    refused, accepted = "no " * 3000, "yes " * 3000
    e = Emitter(store.record)
    e.start("question")
    it = e.iteration(0)
    cells = [new_id(), new_id()]
    for cell, final in zip(cells, (refused, accepted), strict=True):
        e.emit(CellStarted, cell, it, index=0, code="FINAL(x)")
        e.emit(CellFinished, cell, it, stdout="", error=None, final=final, duration_s=0.1)
    e.emit(RunFinished, status="completed", answer=accepted, answer_source="final")
    short = Emitter(store.record)
    short.start("another")
    it2, cell2 = short.iteration(0), new_id()
    short.emit(CellStarted, cell2, it2, index=0, code="FINAL('42')")
    short.emit(CellFinished, cell2, it2, stdout="", error=None, final="42", duration_s=0.1)
    short.emit(RunFinished, status="completed", answer="42", answer_source="final")
    assert store.errors == [] and not store.anomalies
    raw = {
        r["id"]: json.loads(r["data"])
        for r in store.db.query("SELECT id, data FROM nodes WHERE kind = 'cell'")
    }
    assert raw[cells[0]]["final"] == refused
    assert raw[cells[1]]["final_is_answer"] is True and "final" not in raw[cells[1]]
    assert raw[cell2]["final"] == "42"
    got = {n["id"]: n["data"] for n in store.nodes(e.run_id)}
    assert got[cells[0]]["final"] == refused and got[cells[1]]["final"] == accepted
    assert [n["data"]["final"] for n in store.nodes(short.run_id) if n["kind"] == "cell"] == ["42"]

"""Hostile checks of the store's batched full-text index through a real daemon: a search
while a run is in flight finds its node text so far, and so does one after a SIGKILL and a
restart (the pending rows are indexed then)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.server import CELLS, Daemon, event, make_project, question


def _search(home, word: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "rlmd", "runs", "--search", word, "--json"],
        env={**os.environ, "RLMD_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.timeout(180)
async def test_search_in_flight_and_after_a_sigkill(tmp_path):
    proj = make_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    daemon = Daemon(home)
    daemon.start()
    try:
        c = await daemon.client()
        try:
            ask = question("print('zebrafinch' * 2)", "x = 1", sleep_s=20)
            started = await c.command(
                "rlmd.task.start",
                {"workspace": str(proj), "question": ask, "models": {"root": CELLS}},
            )
            await c.wait_for(event(started["run_id"], "cell.finished"), timeout=90)
            in_flight = _search(home, "zebrafinchzebrafinch")
        finally:
            await c.close()
    finally:
        daemon.kill()
    after_kill = _search(home, "zebrafinchzebrafinch")  # a new process over the crashed one's file
    daemon.start()
    try:
        restarted = _search(home, "zebrafinchzebrafinch")
    finally:
        daemon.stop()
    run_id = started["run_id"]
    assert [r["id"] for r in in_flight] == [run_id]
    assert [r["id"] for r in after_kill] == [run_id]
    assert [r["id"] for r in restarted] == [run_id]


def test_a_failed_commit_of_the_index_catch_up_leaves_no_transaction_open(tmp_path):
    """A COMMIT of :func:`index_pending` that fails (disk full, I/O error) is rolled back:
    left open, the transaction would swallow every later write of the same connection, and
    each later catch-up would fail on "cannot start a transaction within a transaction"."""
    import sqlite3

    from helpers.store_events import Emitter

    from rlmd.store import Store, schema

    path = tmp_path / "rlmd.db"
    s = Store(path)
    e = Emitter(s.record)
    e.start("question")
    it = e.iteration(0)
    e.cell_start(it, 0, "print('okapi')")
    s.flush()
    conn = sqlite3.connect(path)

    class FailingCommit:
        def execute(self, sql, *args):
            if sql == "COMMIT":
                raise sqlite3.OperationalError("disk I/O error")
            return conn.execute(sql, *args)

        def rollback(self):
            conn.rollback()

    try:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
            schema.index_pending(FailingCommit())  # type: ignore[arg-type]
        assert not conn.in_transaction
        assert schema.index_pending(conn) > 0  # nothing was lost: indexed on the next try
        assert conn.execute("SELECT COUNT(*) FROM nodes_fts_pending").fetchone()[0] == 0
    finally:
        conn.close()
        s.close()

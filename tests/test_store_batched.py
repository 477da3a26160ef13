"""Store.record_batched: one journal line per step, the database soon after, the same rows as
Store.record, and a crash loses at most the step in flight (step starts are journalled before
later sinks see them; tests/test_store_journal.py kills a writer)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from helpers.store_events import Emitter, record_three_depths

from rlmd.engine.events import (
    CellStarted,
    Event,
    IterationStarted,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunStarted,
)
from rlmd.store import Store
from rlmd.store.db import FLUSH_DELAY_S
from rlmd.store.journal import folder_of


def _recorded() -> list[Event]:
    events: list[Event] = []
    record_three_depths(SimpleNamespace(record=events.append))  # type: ignore[arg-type]
    return events


def _dump(path: Any) -> list[list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as conn:
        return [
            sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for t in ("runs", "nodes")
        ]


def _committed(path: Any, node_id: str) -> bool:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT 1 FROM nodes WHERE id = ?", (node_id,)).fetchone() is not None


def test_batched_rows_equal_one_transaction_per_event(tmp_path):
    events = _recorded()
    with Store(tmp_path / "plain.db") as plain:
        for ev in events:
            plain.record(ev)

    async def batched() -> Store:
        store = Store(tmp_path / "batched.db")
        for i, ev in enumerate(events):
            store.record_batched(ev)
            if i % 3 == 0:
                await asyncio.sleep(0)
        return store

    store = asyncio.run(batched())
    store.close()  # writes what is still kept
    assert not store.errors and not plain.errors
    assert _dump(tmp_path / "batched.db") == _dump(tmp_path / "plain.db")


def _journalled(path: Any) -> list[str]:
    """Node ids in the store's step journals, read as a replay would (the raw lines)."""
    folder = Path(folder_of(str(path)))
    lines = [ln for f in sorted(folder.glob("*-journal")) for ln in f.read_text().splitlines()]
    return [r[3] for ln in lines for r in json.loads(ln) if r[3]]


def test_step_starts_are_journalled_at_once_and_in_the_database_soon_after(tmp_path):
    path = tmp_path / "s.db"

    async def main() -> None:
        store = Store(path)
        run = "r1"
        store.record_batched(RunStarted(run_id=run, depth=0, question="q"))
        store.record_batched(IterationStarted(run_id=run, depth=0, node_id="it1", index=1))
        assert "it1" not in _journalled(path) and not _committed(path, "it1")  # kept
        call = ModelCallStarted(run_id=run, depth=0, node_id="m1", parent_id="it1", role="root")
        store.record_batched(call)  # a step start: journalled with what was kept
        assert _journalled(path) == ["it1", "m1"]
        assert not _committed(path, "m1")  # the database gets it with the timer
        store.record_batched(ModelCallFinished(run_id=run, depth=0, node_id="m1"))
        store.record_batched(CellStarted(run_id=run, depth=0, node_id="c1", parent_id="it1"))
        assert _journalled(path)[-2:] == ["m1", "c1"]
        sub = ModelCallStarted(run_id=run, depth=1, node_id="s1", parent_id="c1", role="sub")
        store.record_batched(sub)  # inside the cell in flight: kept
        assert "s1" not in _journalled(path)
        assert [n["id"] for n in store.nodes(run)][-1] == "s1"  # a read writes everything
        assert all(_committed(path, n) for n in ("it1", "m1", "c1", "s1"))
        sub2 = ModelCallStarted(run_id=run, depth=1, node_id="s2", parent_id="c1", role="sub")
        store.record_batched(sub2)
        cell2 = CellStarted(run_id=run, depth=0, node_id="c2", parent_id="it1")
        store.record_batched(cell2)
        assert not _committed(path, "c2")
        # the flush timer was set before this sleep's, and asyncio runs timers in order
        await asyncio.sleep(FLUSH_DELAY_S * 2)
        assert _committed(path, "s2") and _committed(path, "c2")
        store.record_batched(CellStarted(run_id=run, depth=0, node_id="c3", parent_id="it1"))
        store.record_batched(RunFinished(run_id=run, depth=0, answer="a"))
        assert _committed(path, "c3")  # a run's end is written to the database at once
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT status FROM runs").fetchall() == [("completed",)]
        store.close()

    asyncio.run(main())
    assert list(Path(folder_of(str(path))).iterdir()) == []  # every record written: removed
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM journal_applied").fetchall() == []


def test_outside_a_loop_batched_writes_at_once(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.record_batched(RunStarted(run_id="r", depth=0, question="q"))
        store.record_batched(IterationStarted(run_id="r", depth=0, node_id="it", index=1))
        assert _committed(path, "it")


def test_a_failing_event_in_a_batch_loses_only_itself(tmp_path, monkeypatch):
    path = tmp_path / "s.db"

    async def main() -> Store:
        store = Store(path)
        real = store._node_started

        def flaky(event: Event, data: dict[str, Any], kind: str, *finish: Any) -> None:
            if event.node_id == "bad":
                raise RuntimeError("boom")
            real(event, data, kind, *finish)

        monkeypatch.setattr(store, "_node_started", flaky)
        store.record_batched(RunStarted(run_id="r", depth=0, question="q"))
        for node in ("it1", "bad", "it2"):
            store.record_batched(IterationStarted(run_id="r", depth=0, node_id=node, index=1))
        await asyncio.sleep(0)
        return store

    store = asyncio.run(main())
    store.close()
    assert _committed(path, "it1") and _committed(path, "it2") and not _committed(path, "bad")
    assert store.anomalies["error"] == 1 and "boom" in store.errors[0]


def test_a_rolled_back_start_is_not_finished_from_memory(tmp_path, monkeypatch):
    """A node whose insert was rolled back (and failed again on its own) is not merged into
    from the rows the store remembers between a start and its finish: the finish stores it
    as an unknown node, with its payload."""
    path = tmp_path / "s.db"

    async def main() -> Store:
        store = Store(path)
        real = store._node_started
        seen: list[str] = []

        def flaky(event: Event, data: dict[str, Any], kind: str, *finish: Any) -> None:
            seen.append(str(event.node_id))
            if event.node_id == "bad" or seen.count("m1") == 2:  # m1: fails when retried
                raise RuntimeError("boom")
            real(event, data, kind, *finish)

        monkeypatch.setattr(store, "_node_started", flaky)
        store.record_batched(RunStarted(run_id="r", depth=0, question="q"))
        store.record_batched(IterationStarted(run_id="r", depth=0, node_id="it", index=0))
        sub = dict(run_id="r", depth=0, parent_id="it", role="sub", model="m")
        store.record_batched(ModelCallStarted(node_id="m1", **sub))
        store.record_batched(IterationStarted(run_id="r", depth=0, node_id="bad", index=1))
        store.flush()  # the batch rolls back; then one event at a time: m1 and bad fail
        finish = ModelCallFinished(node_id="m1", response="ok", input_tokens=7, **sub)
        store.record_batched(finish)
        store.flush()
        return store

    store = asyncio.run(main())
    node = next(n for n in store.nodes("r") if n["id"] == "m1")
    run = store.get_run("r")
    store.close()
    assert store.anomalies["unknown_node"] == 1 and store.anomalies["error"] == 2
    assert node["status"] == "ok" and node["data"]["response"] == "ok"
    assert (run["subcalls"], run["input_tokens"]) == (1, 7)


def test_a_start_and_finish_in_one_batch_leave_the_rows_of_two_writes(tmp_path):
    """A sub-call's start and finish kept in one batch are written as one finished row: the
    same rows as writing them one event at a time, also when a node id is started twice or
    a finish comes for a node written by an earlier batch."""
    run = "r"
    sub = dict(run_id=run, depth=1, parent_id="c1", role="sub", model="m")
    done = dict(response="ok", input_tokens=7, output_tokens=3, cost_usd=0.5, latency_s=0.25)
    events: list[Event] = [
        RunStarted(run_id=run, depth=0, question="q"),
        IterationStarted(run_id=run, depth=0, node_id="it1", index=1),
        CellStarted(run_id=run, depth=0, node_id="c1", parent_id="it1", code="x = 1"),
        ModelCallStarted(node_id="s1", messages=[{"role": "user", "content": "a"}], **sub),
        ModelCallStarted(node_id="s2", **sub),
        ModelCallFinished(node_id="s1", **sub, **done),
        ModelCallStarted(node_id="s2", messages=[{"role": "user", "content": "b"}], **sub),
        ModelCallFinished(node_id="s2", **sub, error="sub-call failed: boom"),
        CellStarted(run_id=run, depth=0, node_id="c2", parent_id="it1", code="y = 2"),
        ModelCallStarted(node_id="s3", **sub),
        ModelCallFinished(node_id="c1", run_id=run, depth=0, response="late"),  # not a cell end
        ModelCallFinished(node_id="s3", **sub, **done),
    ]
    with Store(tmp_path / "plain.db") as plain:
        for ev in events:
            plain.record(ev)

    async def batched() -> Store:
        store = Store(tmp_path / "batched.db")
        for ev in events:
            store.record_batched(ev)
        return store

    store = asyncio.run(batched())
    store.close()
    assert not store.errors and not plain.errors
    assert store.anomalies == plain.anomalies
    assert _dump(tmp_path / "batched.db") == _dump(tmp_path / "plain.db")
    with sqlite3.connect(tmp_path / "batched.db") as conn:
        status = dict(conn.execute("SELECT id, status FROM nodes WHERE role = 'sub'").fetchall())
    assert status == {"s1": "ok", "s2": "error", "s3": "ok"}


def test_a_start_and_finish_are_not_paired_across_the_end_of_the_run():
    from rlmd.engine.events import RunFinished
    from rlmd.store.db import _pair_finishes

    sub = dict(run_id="r", depth=1, parent_id="c", role="sub")
    start, end = ModelCallStarted(node_id="s", **sub), ModelCallFinished(node_id="s", **sub)
    other = ModelCallFinished(node_id="s", **{**sub, "run_id": "other"})
    stop = RunFinished(run_id="r", depth=0, status="cancelled")
    paired = _pair_finishes([(start, {}), (end, {})])
    assert [(e, f) for e, _, f in paired] == [(start, (end, {}))]
    for middle in ([(stop, {})], [(other, {})]):
        kept = _pair_finishes([(start, {}), *middle, (end, {})])
        assert [(e, f) for e, _, f in kept] == [
            (start, None),
            *[(e, None) for e, _ in middle],
            (end, None),
        ]


def _files(path: Path) -> bytes:
    """The bytes of the database's files and its journals."""
    folder = Path(folder_of(str(path)))
    files = [*path.parent.iterdir(), *(folder.iterdir() if folder.exists() else [])]
    return b"".join(f.read_bytes() for f in files if f.is_file())


def test_batched_secrets_never_reach_the_journal_or_the_file(tmp_path, monkeypatch):
    """Steps whose data is kept as JSON text (no walk at the event) still lose their
    secrets: a step with an environment secret, one with a key-shaped string, one with a
    secret in only one of its events; each looked at in the journal while the store is
    open, and in every file after."""
    secret = "s3cr3t-" + os.urandom(12).hex()
    key = "sk-proj-" + os.urandom(24).hex()
    monkeypatch.setenv("FOO_API_KEY", secret)
    path = tmp_path / "db" / "rlmd.db"
    path.parent.mkdir()
    journalled: list[bytes] = []

    async def record() -> Store:
        store = Store(path)
        e = Emitter(store.record_batched)
        e.start(f"use key {secret} please", budget={"key": secret, "n": 3})
        it = e.iteration(0)
        e.call(it, "root", [{"role": "user", "content": f"the key is {key}"}], "plain", 10, 5)
        c = e.cell_start(it, 0, "print(1)")  # journals the call: its prompt holds the key
        e.cell_finish(c, it, 0, "print(1)", stdout=f"{secret}\n")
        it = e.iteration(1)  # journals the finish: its output holds the secret
        e.call(it, "root", [{"role": "user", "content": "nothing"}], f"I saw {key}", 10, 5)
        journalled.append(_files(path))
        e.finish(answer="done")
        return store

    store = asyncio.run(record())
    assert not store.errors
    run = store.get_run(store.list_runs()[0]["id"])
    assert run is not None and run["question"] == "use key [REDACTED] please"
    store.close()
    for blob in (journalled[0], _files(path)):
        assert secret.encode() not in blob and key.encode() not in blob
        assert b"[REDACTED]" in blob


def test_a_kept_event_is_stored_as_it_was_when_emitted(tmp_path):
    """The engine may change an event's objects after emitting it (a folded turn's message
    gets a note): what is kept for the next step start is a copy."""
    path = tmp_path / "rlmd.db"
    message = {"role": "user", "content": "as sent"}

    async def record() -> Store:
        store = Store(path)
        e = Emitter(store.record_batched)
        e.start("q")
        it = e.iteration(0)
        e.call(it, "sub", [message], "ok", 1, 1)  # kept, not a step start
        message["content"] += " and changed after"
        e.cell_start(it, 0, "x = 1")
        e.finish(answer="a")
        return store

    store = asyncio.run(record())
    assert not store.errors
    run_id = store.list_runs()[0]["id"]
    calls = [n for n in store.nodes(run_id) if n["kind"] == "model_call"]
    assert [m["content"] for m in calls[0]["data"]["messages"]] == ["as sent"]
    store.close()

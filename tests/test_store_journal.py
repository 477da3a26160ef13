"""The store's step journal (rlmd/store/journal.py): a SIGKILLed writer's journalled steps
reach the database at the next open, each once; a torn last line is dropped; a live
process's journal is left alone; without a journal, or when it fails, steps are written to
the database at once."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers.store_events import record_three_depths

import rlmd.store.db as store_db
from rlmd.engine.events import Event, IterationStarted, ModelCallStarted, RunStarted
from rlmd.store import Store
from rlmd.store.journal import Journal, folder_of

pytestmark = pytest.mark.timeout(120)

# Records the pickled events with record_batched on a running loop, writes the first half to
# the database (a flush: the journal's count is then in the file), and SIGKILLs itself right
# after the last event, with no turn of the loop in between (no timer fires).
CHILD = """
import asyncio, os, pickle, signal, sys
from rlmd.store import Store

events = pickle.load(open(sys.argv[2], "rb"))

async def main():
    store = Store(sys.argv[1])
    for i, event in enumerate(events):
        store.record_batched(event)
        if i == len(events) // 2:
            store.flush()
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def _events() -> list[Event]:
    out: list[Event] = []
    record_three_depths(SimpleNamespace(record=out.append))  # type: ignore[arg-type]
    return out


def _dump(path: Path) -> list[list[tuple[Any, ...]]]:
    """Every row of runs (without ``pid``) and nodes."""
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        runs = [
            tuple(v for k, v in dict(r).items() if k != "pid")
            for r in conn.execute("SELECT * FROM runs")
        ]
        nodes = [tuple(r) for r in conn.execute("SELECT * FROM nodes")]
    return [sorted(runs, key=repr), sorted(nodes, key=repr)]


def _last_step(events: list[Event]) -> int:
    """Index of the last event ``record_batched`` journals on its arrival."""
    return max(
        i
        for i, e in enumerate(events)
        if isinstance(e, store_db.STEP_STARTS)
        and not (isinstance(e, ModelCallStarted) and e.role == "sub")
    )


def _journals(path: Path) -> list[Path]:
    folder = Path(folder_of(str(path)))
    return sorted(folder.iterdir()) if folder.exists() else []


def test_a_sigkilled_writer_loses_no_journalled_step_and_writes_none_twice(tmp_path):
    events = _events()[:18]  # ends inside a child run: a model call's start and finish
    events[0] = dataclasses.replace(events[0], question="zèbres \u2014 \udcff?")  # not ASCII
    cut = _last_step(events) + 1  # the finish is kept in memory only: the step in flight
    assert cut == len(events) - 1
    pickled = tmp_path / "events.pickle"
    pickled.write_bytes(pickle.dumps(events))
    path = tmp_path / "killed.db"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(pickled)], capture_output=True, timeout=60
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    [journal] = _journals(path)
    pid = int(journal.name.split("-")[0])
    with sqlite3.connect(path) as conn:  # the first half is in the database, with its count
        [(name, applied)] = conn.execute("SELECT * FROM journal_applied").fetchall()
        in_db = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
    assert name == journal.name and 0 < applied < cut and 0 < in_db
    with journal.open("ab") as f:  # a write cut short by the kill
        f.write(b'[["cell.started","r","')

    with Store(path) as store:  # replays the dead journal: from its count on
        assert store.anomalies["duplicate_node"] == 0 and not store.errors
        running = {r["id"]: r["pid"] for r in store.list_runs() if r["status"] == "running"}
    assert set(running.values()) == {pid}  # the runs are the dead writer's: interrupted next
    assert _journals(path) == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM journal_applied").fetchall() == []

    expected = tmp_path / "expected.db"
    with Store(expected) as plain:  # what the writer had journalled, one event a transaction
        for event in events[:cut]:
            plain.record(event)
    assert _dump(path) == _dump(expected)
    assert any("zèbres \u2014" in str(run) for run in _dump(path)[0])
    with Store(path, check_interrupted=True) as store:  # nothing left to replay; marked
        assert set(store.mark_interrupted()) == set()
        assert {store.get_run(r)["status"] for r in running} == {"interrupted"}


def test_a_live_writers_journal_is_left_to_it(tmp_path):
    path = tmp_path / "s.db"

    async def main() -> None:
        writer = Store(path)
        writer.record_batched(RunStarted(run_id="r", depth=0, question="q"))
        writer.record_batched(IterationStarted(run_id="r", depth=0, node_id="it", index=0))
        call = ModelCallStarted(run_id="r", depth=0, node_id="m", parent_id="it", role="root")
        writer.record_batched(call)  # journalled, not yet in the database
        with Store(path) as reader:  # its lock says the writer lives: no replay
            assert reader.get_run("r") is None
        assert len(_journals(path)) == 1
        writer.close()
        with Store(path) as reader:
            assert [n["id"] for n in reader.nodes("r")] == ["it", "m"]
        assert _journals(path) == []

    asyncio.run(main())


async def _record_all(store: Store, events: list[Event]) -> None:
    for i, event in enumerate(events):
        store.record_batched(event)
        if i % 5 == 0:
            await asyncio.sleep(0)


def _plain(tmp_path: Path, events: list[Event]) -> Path:
    path = tmp_path / "plain.db"
    with Store(path) as plain:
        for event in events:
            plain.record(event)
    return path


def test_without_a_journal_folder_steps_go_to_the_database_at_once(tmp_path, caplog):
    path = tmp_path / "s.db"
    Path(folder_of(str(path))).write_text("not a folder")
    events = _events()
    store = Store(path)
    asyncio.run(_record_all(store, events[:3]))
    assert store._journal is None and "no step journal" in caplog.text
    with sqlite3.connect(path) as conn:  # the step start committed at once, as before
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    asyncio.run(_record_all(store, events[3:]))
    store.close()
    assert not store.errors
    assert _dump(path) == _dump(_plain(tmp_path, events))


def test_a_failing_journal_write_loses_nothing(tmp_path, monkeypatch, caplog):
    real = Journal.append_json  # what the store writes a step with
    calls = []

    def full_disk(self: Journal, records: list[str]) -> None:
        calls.append(len(records))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(self, records)

    monkeypatch.setattr(Journal, "append_json", full_disk)
    path = tmp_path / "s.db"
    events = _events()
    store = Store(path)
    asyncio.run(_record_all(store, events))
    store.close()
    assert len(calls) == 3 and "step journal" in caplog.text and not store.errors
    assert _journals(path) == []
    assert _dump(path) == _dump(_plain(tmp_path, events))


def test_a_long_lived_store_starts_new_journals(tmp_path, monkeypatch):
    monkeypatch.setattr(store_db, "ROTATE_AFTER", 3)
    path = tmp_path / "s.db"
    events = _events()
    names = set()

    async def main(store: Store) -> None:
        for event in events:
            store.record_batched(event)
            if store._journal is not None:
                names.add(store._journal.name)
            store.flush()

    store = Store(path)
    asyncio.run(main(store))
    store.close()
    assert len(names) > 2 and _journals(path) == [] and not store.errors
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM journal_applied").fetchall() == []
    assert _dump(path) == _dump(_plain(tmp_path, events))


def test_an_in_memory_store_has_no_journal():
    async def main() -> None:
        with Store(":memory:") as store:
            store.record_batched(RunStarted(run_id="r", depth=0, question="q"))
            assert store._journal is None and store.get_run("r") is not None

    asyncio.run(main())
    assert not os.path.exists(folder_of(":memory:"))


def test_a_dead_writers_runs_wait_for_its_journal(tmp_path, monkeypatch):
    """A run whose dead process left a journal that could not be written (here: the
    replay is switched off, as when that process died after it) is not marked interrupted:
    its steps would land after the mark."""
    path = tmp_path / "s.db"
    dead = 2**22 + 12345  # beyond pid_max's default: no such process
    with Store(path) as store:
        store.record(RunStarted(run_id="r", depth=0, question="q", pid=dead))
    folder = Path(folder_of(str(path)))
    folder.mkdir()
    (folder / f"{dead}-abc-journal").write_text("")
    monkeypatch.setattr(Store, "_replay_dead", lambda self: None)
    with Store(path) as store:
        assert store.mark_interrupted() == []
        assert store.get_run("r")["status"] == "running"
    monkeypatch.undo()
    with Store(path) as store:  # replayed (an empty journal): now marked
        assert store.mark_interrupted() == ["r"]
    assert _journals(path) == []

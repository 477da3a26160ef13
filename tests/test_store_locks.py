"""The store survives a workspace or ``--context`` folder that holds the rlmd home (issue 11
#8): reading the store's own files from inside the daemon dropped SQLite's POSIX locks, and a
later ``rlmd run`` then deleted the WAL under the daemon (runs vanished, "database disk image
is malformed")."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers.cli import rlmd
from helpers.server import CELLS, Daemon, question, run_to_end

from rlmd import paths
from rlmd.context import load_codebase, load_context
from rlmd.store import Store

pytestmark = pytest.mark.timeout(180)


def params(workspace: Path, *cells: str) -> dict:
    return {"workspace": str(workspace), "question": question(*cells), "models": {"root": CELLS}}


async def test_a_workspace_holding_the_rlmd_home_then_rlmd_run_loses_no_run(tmp_path):
    # The user's home as the workspace, with the default rlmd home inside it.
    user_home = tmp_path / "user"
    home = user_home / ".rlmd"
    home.mkdir(parents=True)
    (user_home / "notes.md").write_text("# notes\n")
    d = Daemon(home, "--idle-timeout", "0").start()
    ids: list[str] = []
    c = await d.client()
    try:
        for i in range(3):
            # each task loads the workspace as a codebase, rlmd.db and its -wal/-shm included
            done = await run_to_end(c, params(user_home, f"x = {i}", "FINAL(len(context))"))
            assert done["status"] == "completed", done
            ids.append(done["run_id"])
        # a separate `rlmd run` over the same folder, while the daemon holds the store
        script = tmp_path / "s.json"
        script.write_text(json.dumps(["```repl\nFINAL(len(context))\n```"]))
        for _ in range(2):
            proc = rlmd(
                "run", "How many files?", "--context", str(user_home),
                "--model", f"scripted:{script}", "--json", home=home,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            ids.append(json.loads(proc.stdout)["run_id"])
        for i in range(3):
            done = await run_to_end(c, params(user_home, f"y = {i}", "FINAL(len(context))"))
            assert done["status"] == "completed", done
            ids.append(done["run_id"])
        listed = await c.command("rlmd.runs.list", {"limit": 100})
        assert {r["id"] for r in listed["runs"]} >= set(ids)
    finally:
        await c.close()
        d.stop()
    with sqlite3.connect(home / "rlmd.db") as conn:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        stored = {row[0] for row in conn.execute("select id from runs")}
    assert stored >= set(ids)
    runs = rlmd("runs", "--json", "--limit", "100", home=home)
    assert runs.returncode == 0, runs.stderr
    assert {r["id"] for r in json.loads(runs.stdout)} >= set(ids)


def test_the_loader_never_opens_the_rlmd_home_or_a_sqlite_file(tmp_path, monkeypatch):
    user_home = tmp_path / "user"
    home = user_home / ".rlmd"
    monkeypatch.setenv("RLMD_HOME", str(home))
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[keys]\nopenai = 'sk-secret'\n")
    (user_home / "app.sqlite3").write_bytes(b"SQLite format 3\x00" + b"\x01" * 100)
    (user_home / "plain.txt").write_text("hello\n")
    opened: list[str] = []
    real_open = open

    def spying_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spying_open)
    ctx = load_codebase(user_home)
    assert list(ctx.value) == ["plain.txt"]
    assert ctx.skipped["protected"] == 2  # the rlmd home folder, the SQLite file
    assert not [p for p in opened if p.startswith(str(home)) or p.endswith(".sqlite3")]
    # a context file inside the home is refused by name, without being opened
    with pytest.raises(ValueError, match="rlmd home"):
        load_context(home / "config.toml")


def test_the_store_files_are_refused_wherever_they_are_reached(tmp_path):
    # A store outside the rlmd home, reached through a hard link with an innocent name.
    db = tmp_path / "elsewhere" / "trajectories.db"
    db.parent.mkdir()
    store = Store(db)
    try:
        link = tmp_path / "project" / "data.bin"
        link.parent.mkdir()
        link.hardlink_to(db)
        st = link.stat()
        assert (st.st_dev, st.st_ino) in paths.protected_files()
        ctx = load_codebase(link.parent)
        assert ctx.value == {} and ctx.skipped["protected"] == 1
        with pytest.raises(ValueError, match="store"):
            load_context(link)
    finally:
        store.close()

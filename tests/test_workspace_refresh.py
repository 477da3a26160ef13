"""A warm workspace asked again sees its folder as it is now: only changed files are read
again (size and modification time), and the symbol index is updated for them alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.server import CELLS, Daemon, event, finished, make_project, question, run_to_end

import rlmd.context as context_mod
from rlmd.codeintel.index import index_for
from rlmd.context import load_codebase, refresh_codebase
from rlmd.server.client import RpcError


def _project(root: Path) -> Path:
    proj = root / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pkg" / "core.py").write_text("def helper():\n    return 42\n")
    (proj / "pkg" / "other.py").write_text("class Untouched:\n    pass\n")
    (proj / "gone.py").write_text("x = 1\n")
    (proj / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    return proj


def _edit(path: Path, text: str) -> None:
    """Write ``text`` and move the modification time on: a file system with coarse time
    stamps could otherwise give the edit the same mtime as the first write."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_refresh_reads_only_changed_files_and_updates_the_index(tmp_path, monkeypatch):
    proj = _project(tmp_path)
    ctx = load_codebase(proj)
    assert ctx.files_read == 4 and ctx.skipped["binary"] == 1
    index = index_for(ctx)
    assert index.find_definition("helper") and not index.find_definition("renamed")
    untouched = ctx.value["pkg/other.py"]

    assert refresh_codebase(ctx) is None  # nothing changed: nothing to rebind

    _edit(proj / "pkg" / "core.py", "def renamed():\n    return 43\n")
    (proj / "gone.py").unlink()
    (proj / "new.py").write_text("NEW = 'fresh'\n")
    opened: list[str] = []
    read = context_mod._read_text

    def counting(path, *rest):
        opened.append(Path(path).relative_to(proj).as_posix())
        return read(path, *rest)

    monkeypatch.setattr(context_mod, "_read_text", counting)
    fresh = refresh_codebase(ctx)
    assert fresh is not None
    # pkg/other.py and the binary logo.png were not opened again
    assert sorted(opened) == ["new.py", "pkg/core.py"]
    assert fresh.files_read == 2 and fresh.skipped["binary"] == 1
    assert sorted(fresh.value) == ["new.py", "pkg/core.py", "pkg/other.py"]
    assert fresh.value["pkg/core.py"] == "def renamed():\n    return 43\n"
    assert fresh.value["pkg/other.py"] is untouched
    again = index_for(fresh)
    assert again is index  # the same index, updated in place
    assert again.find_definition("renamed") == ["pkg/core.py:1: function renamed: def renamed():"]
    assert again.find_definition("helper") == []
    assert again.find_definition("Untouched")  # kept without parsing it again
    assert again.find_definition("NEW")


ASK = (
    "import json\nkept = globals().get('kept', 0) + 7\n"
    "src = context['pkg/core.py']\n"
    "defs = find_definition('renamed')\n"
    "FINAL(json.dumps({'src': src, 'defs': defs, 'n': len(context), 'kept': kept}))"
)


@pytest.mark.timeout(120)
async def test_a_warm_workspace_asked_again_sees_the_edited_file(tmp_path):
    """Through the daemon: task 1 loads the workspace; a file is edited, one added; task 2 in
    the same warm REPL (its variables kept) sees the new text and symbols, and the workspace
    reports that it read only the two changed files again."""
    proj = _project(tmp_path)
    script = tmp_path / "ask.json"
    script.write_text(json.dumps(["```repl\n" + ASK + "\n```"]))
    (tmp_path / "home").mkdir()
    daemon = Daemon(tmp_path / "home", "--idle-timeout", "0")
    daemon.start()
    try:
        c = await daemon.client()
        try:
            base = {"workspace": str(proj), "question": "q"}
            first = await run_to_end(c, {**base, "models": {"root": f"scripted:{script}"}})
            _edit(proj / "pkg" / "core.py", "def renamed():\n    return 43\n")
            (proj / "new.py").write_text("NEW = 1\n")
            then = await run_to_end(c, {**base, "models": {"root": f"scripted:{script}"}})
            refreshed = [
                n["params"]["data"]
                for n in c.notifications
                if n["method"] == "rlmd/workspace" and n["params"]["change"] == "refreshed"
            ]
        finally:
            await c.close()
    finally:
        daemon.stop()
    assert first["status"] == "completed", first.get("error")
    before = json.loads(first["answer"])
    assert before["src"].startswith("def helper") and before["defs"] == [] and before["n"] == 3
    assert then["status"] == "completed", then.get("error")
    after = json.loads(then["answer"])
    assert after["src"] == "def renamed():\n    return 43\n" and after["n"] == 4
    assert after["kept"] == 14  # the same warm REPL: the first task's variable is still there
    assert after["defs"] == ["pkg/core.py:1: function renamed: def renamed():"]
    assert refreshed == [{"files": 4, "read": 2}]


def test_refresh_sees_hostile_swaps_as_a_first_load_does(tmp_path, monkeypatch):
    """Between two loads: a file deleted, one replaced by a symlink out of the project, an
    empty one by a FIFO with its old modification time, a 200 MB file added, a file touched,
    a folder made unlistable and a .gitignore replaced by a symlink to an outside file. The
    refresh holds what a first load of the folder holds, and reads nothing outside it."""
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    for name in ("gone.py", "link.py", "touched.py", "sub/deep.py"):
        (proj / name).write_text(f"# {name}\n")
    (proj / "empty.py").write_text("")
    outside = tmp_path / "outside.txt"
    outside.write_text("*.py\n")
    ctx = load_codebase(proj)
    assert sorted(ctx.value) == ["empty.py", "gone.py", "link.py", "sub/deep.py", "touched.py"]

    (proj / "gone.py").unlink()
    (proj / "link.py").unlink()
    (proj / "link.py").symlink_to(outside)
    old = (proj / "empty.py").stat()
    (proj / "empty.py").unlink()
    os.mkfifo(proj / "empty.py")
    os.utime(proj / "empty.py", ns=(old.st_atime_ns, old.st_mtime_ns), follow_symlinks=False)
    with open(proj / "big.txt", "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: no disk used
    os.utime(proj / "touched.py")
    (proj / ".gitignore").symlink_to(outside)  # would ignore every .py if followed
    scandir = os.scandir

    def unlistable(path):
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(context_mod.os, "scandir", unlistable)
    opened: list[str] = []
    real_open = os.open

    def recording(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(context_mod.os, "open", recording)
    fresh = refresh_codebase(ctx)
    first = load_codebase(proj)
    assert fresh is not None
    assert sorted(fresh.value) == sorted(first.value) == ["touched.py"]
    assert fresh.skipped == first.skipped
    assert fresh.skipped["special"] == 1 and fresh.skipped["oversized"] == 1
    assert fresh.skipped["unreadable"] == 1  # the folder it could not list is counted
    assert not any(str(outside) in p for p in opened)  # opened with O_NOFOLLOW: never followed


@pytest.mark.timeout(180)
async def test_a_warm_workspace_whose_folder_went_away_fails_the_task_clearly(tmp_path):
    """Through the daemon: between tasks a file becomes a symlink to the rlmd home's store
    and another a FIFO; then the whole folder is renamed away. The second task completes
    without either; the third is refused at once, saying the folder is gone; with the folder back,
    a fourth completes in the same workspace."""
    proj = _project(tmp_path)
    script = tmp_path / "ask.json"
    script.write_text(json.dumps(["```repl\nFINAL(','.join(sorted(context)))\n```"]))
    home = tmp_path / "home"
    home.mkdir()
    daemon = Daemon(home, "--idle-timeout", "0")
    daemon.start()
    try:
        c = await daemon.client()
        try:
            req = {
                "workspace": str(proj),
                "question": "q",
                "models": {"root": f"scripted:{script}"},
            }
            first = await run_to_end(c, req)
            (proj / "gone.py").unlink()
            (proj / "gone.py").symlink_to(next(p for p in home.rglob("*") if p.is_file()))
            (proj / "pkg" / "other.py").unlink()
            os.mkfifo(proj / "pkg" / "other.py")
            second = await run_to_end(c, req)
            proj.rename(tmp_path / "moved")
            with pytest.raises(RpcError, match="no such folder"):
                await run_to_end(c, req)
            (tmp_path / "moved").rename(proj)
            fourth = await run_to_end(c, req)
        finally:
            await c.close()
    finally:
        daemon.stop()
    assert first["status"] == "completed", first.get("error")
    assert first["answer"] == "gone.py,pkg/core.py,pkg/other.py"
    assert second["status"] == "completed", second.get("error")
    assert second["answer"] == "pkg/core.py"
    assert fourth["status"] == "completed", fourth.get("error")
    assert fourth["answer"] == "pkg/core.py"


def test_a_file_swapped_for_a_symlink_after_its_lstat_is_not_followed(tmp_path, monkeypatch):
    """A file turned into a symlink out of the project between the walk's lstat and its open
    (a race another process on the host could win) is not read through the link."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text("a = 1\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET\n")
    real_open = os.open

    def swapping(path, *args, **kwargs):
        if str(path).endswith("a.py") and not os.path.islink(path):
            os.unlink(path)
            os.symlink(secret, path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(context_mod.os, "open", swapping)
    ctx = load_codebase(proj)
    assert "SECRET\n" not in ctx.value.values()
    assert ctx.value == {} and ctx.skipped["ignored"] == 1


def test_a_touched_but_unchanged_file_is_read_once_and_nothing_is_rebound(tmp_path, monkeypatch):
    """``touch`` (or a save without an edit, a checkout that rewrites the same bytes) moves
    the modification time only: the file is read again once, its text found the same, and
    the refresh reports no change (the codebase is not sent to the sandbox again)."""
    proj = _project(tmp_path)
    ctx = load_codebase(proj)
    before = ctx.value["pkg/core.py"]
    st = (proj / "pkg" / "core.py").stat()
    os.utime(proj / "pkg" / "core.py", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert refresh_codebase(ctx) is None
    assert ctx.value["pkg/core.py"] is before
    opened: list[str] = []
    read = context_mod._read_text

    def counting(path, *rest):
        opened.append(path)
        return read(path, *rest)

    monkeypatch.setattr(context_mod, "_read_text", counting)
    assert refresh_codebase(ctx) is None
    assert opened == []  # the new stamp was kept: not read a second time


@pytest.mark.timeout(180)
async def test_a_queued_task_whose_folder_was_renamed_away_says_so(tmp_path):
    """Through the daemon: a task queued behind a running one in the same workspace, whose
    folder is renamed away before its turn, fails saying the folder is gone (not that the
    sandbox could not start); with the folder back, the workspace serves the next task."""
    proj = make_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    daemon = Daemon(home, "--idle-timeout", "0")
    daemon.start()
    try:
        c = await daemon.client()
        try:
            base = {"workspace": str(proj), "models": {"root": CELLS}}
            gate = tmp_path / "gate"  # the first task's model replies wait for this file
            slow = await c.command(
                "rlmd.task.start", {**base, "question": question("x = 1", gate=gate)}
            )
            await c.wait_for(event(slow["run_id"], "model_call.started"), timeout=60)
            queued = await c.command("rlmd.task.start", {**base, "question": question("y = 1")})
            assert queued["state"] == "queued", queued
            proj.rename(tmp_path / "moved")
            gate.touch()  # only now may the first task go on (and the queued one follow)
            first = (await c.wait_for(finished(slow["run_id"]), timeout=90))["params"]
            second = (await c.wait_for(finished(queued["run_id"]), timeout=90))["params"]
            (tmp_path / "moved").rename(proj)
            third = await run_to_end(c, {**base, "question": question("z = 1")})
        finally:
            await c.close()
    finally:
        daemon.stop()
    assert first["status"] == "completed", first.get("error")
    assert second["status"] == "failed", second
    assert second["error"].startswith("the workspace folder is gone: "), second
    assert third["status"] == "completed", third.get("error")

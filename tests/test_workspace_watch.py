"""A warm workspace knows from the kernel (inotify) whether its folder changed since the
codebase was read, so a task in an unchanged folder does not walk it; every change is still
seen by the next task, and where a watch could miss one the folder is walked as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.server import CELLS, Daemon, question, run_to_end

import rlmd.context as context_mod
from rlmd.context import load_codebase, refresh_codebase
from rlmd.workspace import manager as manager_mod
from rlmd.workspace import watch as watch_mod

pytestmark = pytest.mark.skipif(
    watch_mod.open_watch() is None, reason="no inotify here: the folder is always walked"
)

SHOW = "import json\nFINAL(json.dumps({k: context[k] for k in sorted(context)}))"


def _tree(root: Path) -> Path:
    proj = root / "proj"
    (proj / "pkg" / "sub").mkdir(parents=True)
    (proj / "build").mkdir()
    (proj / ".gitignore").write_text("build/\n*.log\n")
    (proj / "a.py").write_text("A = 1\n")
    (proj / "pkg" / "b.py").write_text("B = 2\n")
    (proj / "pkg" / "sub" / "c.py").write_text("C = 3\n")
    (proj / "build" / "out.py").write_text("OUT = 1\n")
    return proj


@pytest.mark.timeout(240)
async def test_each_change_between_two_warm_questions_is_seen_by_the_next(tmp_path):
    """Through the daemon, one warm workspace, a question after each change: a file edited
    in place to the same size, one added, one deleted, one added in a new folder tree, a
    folder renamed, a file edited in the renamed folder, files added under gitignored
    names, then nothing. Each answer holds the folder as it is; the workspace keeps a watch
    on the folder throughout (so the unchanged case is the one that skips the walk)."""
    proj = _tree(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    expect = {
        ".gitignore": "build/\n*.log\n",
        "a.py": "A = 1\n",
        "pkg/b.py": "B = 2\n",
        "pkg/sub/c.py": "C = 3\n",
    }

    def edit_in_place() -> None:
        (proj / "a.py").write_text("A = 9\n")  # same size; no time stamp moved on purpose
        expect["a.py"] = "A = 9\n"

    def add() -> None:
        (proj / "pkg" / "new.py").write_text("N = 1\n")
        expect["pkg/new.py"] = "N = 1\n"

    def delete() -> None:
        (proj / "pkg" / "b.py").unlink()
        del expect["pkg/b.py"]

    def add_in_new_folders() -> None:
        (proj / "fresh" / "deep").mkdir(parents=True)
        (proj / "fresh" / "deep" / "d.py").write_text("D = 4\n")
        expect["fresh/deep/d.py"] = "D = 4\n"

    def rename_folder() -> None:
        (proj / "pkg" / "sub").rename(proj / "pkg" / "moved")
        expect["pkg/moved/c.py"] = expect.pop("pkg/sub/c.py")

    def edit_in_renamed_folder() -> None:
        (proj / "pkg" / "moved" / "c.py").write_text("C = 8\n")
        expect["pkg/moved/c.py"] = "C = 8\n"

    def add_ignored() -> None:
        (proj / "build" / "more.py").write_text("MORE = 1\n")
        (proj / "build" / "gen").mkdir()
        (proj / "build" / "gen" / "g.py").write_text("G = 1\n")
        (proj / "debug.log").write_text("log\n")

    steps = [
        edit_in_place,
        add,
        delete,
        add_in_new_folders,
        rename_folder,
        edit_in_renamed_folder,
        add_ignored,
        lambda: None,
    ]
    daemon = Daemon(home, "--idle-timeout", "0")
    daemon.start()
    answers, watched = [], []
    try:
        c = await daemon.client()
        try:
            req = {"workspace": str(proj), "question": question(SHOW), "models": {"root": CELLS}}
            for step in [lambda: None, *steps]:
                step()
                done = await run_to_end(c, req, timeout=90)
                assert done["status"] == "completed", done.get("error")
                answers.append((json.loads(done["answer"]), dict(expect)))
                listed = await c.command("rlmd.workspace.list", {})
                watched.append(listed["workspaces"][0]["watched_folders"])
        finally:
            await c.close()
    finally:
        daemon.stop()
    for i, (got, want) in enumerate(answers):
        assert got == want, f"question {i}"
    assert all(isinstance(n, int) and n >= 3 for n in watched), watched


def test_a_same_size_edit_the_stamps_cannot_show_is_named_by_the_watch(tmp_path):
    """An edit that leaves a file's size and times as the load saw them (two writes within
    one tick of the file system's clock) is missed by the stamps, not by the watch: the
    refresh reads the files it names again."""
    proj = _tree(tmp_path)
    watch = watch_mod.FolderWatch()
    ctx = load_codebase(proj, on_folder=watch.add)
    assert watch.broken is None and watch.folders == 3  # proj, pkg, pkg/sub: build/ is ignored
    assert watch.changed() is None
    (proj / "pkg" / "b.py").write_text("B = 7\n")
    st = os.lstat(proj / "pkg" / "b.py")
    ctx.stamps["pkg/b.py"] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    assert refresh_codebase(ctx) is None  # the stamps alone see nothing
    named = watch.changed()
    assert named == {"pkg/b.py"}
    fresh = refresh_codebase(ctx, reread=named)
    assert fresh is not None and fresh.value["pkg/b.py"] == "B = 7\n"
    watch.close()


def test_an_unchanged_folder_is_not_walked(tmp_path, monkeypatch):
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, manager_mod.threading.Event())
    assert watch is not None

    def no_walk(path):
        raise AssertionError(f"walked {path}")

    monkeypatch.setattr(context_mod.os, "scandir", no_walk)
    assert manager_mod._watched_refresh(ctx, watch) == (None, watch)
    watch.close()


def test_a_folder_put_in_the_roots_place_is_walked(tmp_path):
    """The root's path may come to lead to another folder without an event on any watched
    one (the root renamed away, or one of its parents): the next refresh walks the new one."""
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, manager_mod.threading.Event())
    assert watch is not None
    proj.rename(tmp_path / "old")
    proj.mkdir()
    (proj / "other.py").write_text("O = 1\n")
    watch.changed()  # the rename, seen: the flag stays
    fresh, again = manager_mod._watched_refresh(ctx, watch)
    assert fresh is not None and sorted(fresh.value) == ["other.py"]
    assert again is not None and again is not watch
    (tmp_path / "old" / "a.py").write_text("A = 2\n")  # the old tree is no longer watched
    assert again.changed() is None
    (proj / "other.py").write_text("O = 2\n")
    assert again.changed() == {"other.py"}
    watch.close()
    again.close()


def test_a_rename_of_the_roots_parent_is_noticed(tmp_path):
    proj = _tree(tmp_path / "parent")
    watch = watch_mod.FolderWatch()
    load_codebase(proj, on_folder=watch.add)
    (tmp_path / "parent").rename(tmp_path / "gone")
    _tree(tmp_path / "parent")  # the same path, another folder; no event on a watched one
    assert watch.changed() == set()  # walk it all
    watch.close()


def test_a_virtualenv_that_stops_being_one_is_seen(tmp_path):
    proj = _tree(tmp_path)
    (proj / "env").mkdir()
    (proj / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (proj / "env" / "lib.py").write_text("L = 1\n")
    ctx, watch = manager_mod._watched_load(proj, manager_mod.threading.Event())
    assert "env/lib.py" not in ctx.value and watch is not None
    (proj / "env" / "pyvenv.cfg").unlink()
    fresh, watch2 = manager_mod._watched_refresh(ctx, watch)
    assert fresh is not None and fresh.value["env/lib.py"] == "L = 1\n"
    watch.close()
    assert watch2 is not None
    watch2.close()


def test_a_walk_that_fails_leaves_the_change_to_the_next(tmp_path):
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, manager_mod.threading.Event())
    assert watch is not None
    proj.rename(tmp_path / "away")
    with pytest.raises(NotADirectoryError):
        manager_mod._watched_refresh(ctx, watch)
    (tmp_path / "away").rename(proj)
    (proj / "a.py").write_text("A = 5\n")
    fresh, again = manager_mod._watched_refresh(ctx, watch)
    assert fresh is not None and fresh.value["a.py"] == "A = 5\n"
    watch.close()
    assert again is not None
    again.close()


@pytest.mark.parametrize("why", ["network file system", "too many folders"])
def test_no_watch_is_kept_where_it_could_miss_a_change(tmp_path, monkeypatch, why):
    """On a file system inotify may not see every change of (NFS, FUSE...), or with more
    folders than the watch may take, the load keeps no watch and every refresh walks."""
    if why == "network file system":
        monkeypatch.setattr(watch_mod, "_fs_magic", lambda lib, path: 0x6969)  # NFS
    else:
        monkeypatch.setattr(watch_mod, "_watch_limit", lambda: 2)
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, manager_mod.threading.Event())
    assert watch is None and sorted(ctx.value) == [".gitignore", "a.py", "pkg/b.py", "pkg/sub/c.py"]
    (proj / "a.py").write_text("A = 3\n")
    os.utime(proj / "a.py", ns=(0, 10**18))  # a stamp the first load did not see
    fresh, again = manager_mod._watched_refresh(ctx, None)
    assert fresh is not None and fresh.value["a.py"] == "A = 3\n" and again is None

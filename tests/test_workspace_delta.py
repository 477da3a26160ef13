"""After an edit between two questions, a warm workspace lists again only the folders its
watch named and sends the sandbox only the files that changed; what the model sees (its
``context`` and the metadata about it) is what a fresh load of the folder gives."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.server import CELLS, Daemon, event, question, run_to_end

import rlmd.context as context_mod
from rlmd.context import Context, load_codebase
from rlmd.engine.events import RunStarted
from rlmd.kernel.core import Kernel
from rlmd.models.tokens import count_tokens
from rlmd.sandbox import create_sandbox
from rlmd.workspace import manager as manager_mod
from rlmd.workspace import watch as watch_mod

pytestmark = pytest.mark.skipif(
    watch_mod.open_watch() is None, reason="no inotify here: the folder is always walked"
)

SHOW = "import json\nFINAL(json.dumps(list(context.items())).encode().hex())"
"""The model's ``context`` as a list of items (the order counts too), in hex: the answer
verifier would question an answer naming a file that is not in the codebase (a
``.gitignore``'s text does)."""


def _tree(root: Path) -> Path:
    proj = root / "proj"
    (proj / "pkg" / "sub").mkdir(parents=True)
    (proj / "build").mkdir()
    (proj / "docs").mkdir()
    (proj / ".gitignore").write_text("build/\n*.log\n")
    (proj / "a.py").write_text("A = 1\n")
    (proj / "pkg" / "b.py").write_text("B = 2\n")
    (proj / "pkg" / "sub" / "c.py").write_text("C = 3\n")
    (proj / "docs" / "guide.md").write_text("# guide\n")
    (proj / "build" / "out.py").write_text("OUT = 1\n")
    (proj / "logo.png").write_bytes(b"\x89PNG\x00binary")
    os.symlink("a.py", proj / "alias.py")
    return proj


def _changes(proj: Path) -> list[tuple[str, Callable[[], None]]]:
    """Each kind of change, in an order that keeps every one meaningful."""

    def relink() -> None:
        (proj / "alias.py").unlink()
        os.symlink("pkg", proj / "alias.py")

    return [
        ("edit", lambda: (proj / "a.py").write_text("A = 9\n")),  # same size, same tick
        ("add", lambda: (proj / "pkg" / "new.py").write_text("N = 1\n")),
        ("delete", lambda: (proj / "pkg" / "b.py").unlink()),
        ("binary added", lambda: (proj / "pkg" / "data.bin").write_bytes(b"\x00\x01")),
        (
            "new folder with files",
            lambda: (
                (proj / "fresh" / "deep").mkdir(parents=True),
                (proj / "fresh" / "deep" / "d.py").write_text("D = 4\n"),
                (proj / "fresh" / "e.py").write_text("E = 5\n"),
            ),
        ),
        ("folder renamed", lambda: (proj / "pkg" / "sub").rename(proj / "pkg" / "moved")),
        ("edit in the renamed folder", lambda: (proj / "pkg" / "moved" / "c.py").write_text("C")),
        ("folder moved up", lambda: (proj / "pkg" / "moved").rename(proj / "moved")),
        ("folder deleted", lambda: shutil.rmtree(proj / "docs")),
        (
            "file becomes gitignored",
            lambda: (proj / ".gitignore").write_text("build/\n*.log\ne.py\n"),
        ),
        ("nested .gitignore", lambda: (proj / "fresh" / ".gitignore").write_text("deep/\n")),
        ("ignored folder un-ignored", lambda: (proj / ".gitignore").write_text("*.log\n")),
        ("ignored file added", lambda: (proj / "debug.log").write_text("log\n")),
        ("symlink changed", relink),
        ("folder becomes a virtualenv", lambda: (proj / "moved" / "pyvenv.cfg").write_text("x\n")),
        ("virtualenv stops being one", lambda: (proj / "moved" / "pyvenv.cfg").unlink()),
        ("nothing", lambda: None),
    ]


def _meta(ctx: Context) -> dict:
    return dict(ctx.metadata(count_tokens))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["subprocess", "inprocess"])
async def test_after_each_change_the_model_sees_a_fresh_load(tmp_path, backend):
    """Through the daemon, one warm workspace, a question after each kind of change: the
    model's ``context`` (items, in order) and the metadata it was given equal those of a
    fresh load of the folder; the workspace keeps its watch throughout."""
    proj = _tree(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    if backend == "inprocess":
        (home / "config.toml").write_text(
            '[workspace]\nsandbox = "inprocess"\n[sandbox]\nrequire_isolation = false\n'
            "[daemon]\nallow_inprocess = true\n"
        )
    daemon = Daemon(home, "--idle-timeout", "0")
    daemon.start()
    seen = []
    try:
        c = await daemon.client()
        try:
            await c.command("rlmd.subscribe", {"events": "full", "progress": "none"})
            req = {"workspace": str(proj), "question": question(SHOW), "models": {"root": CELLS}}
            for label, change in [("first", lambda: None), *_changes(proj)]:
                change()
                done = await run_to_end(c, req, timeout=90)
                assert done["answer_source"] == "final", (label, done.get("error"))
                started = await c.wait_for(event(done["run_id"], RunStarted.kind))
                listed = await c.command("rlmd.workspace.list", {})
                fresh = load_codebase(proj)
                seen.append(
                    (
                        label,
                        json.loads(bytes.fromhex(done["answer"])),
                        started["params"]["data"]["context"],
                        listed["workspaces"][0]["watched_folders"],
                        [list(item) for item in fresh.value.items()],
                        json.loads(json.dumps(_meta(fresh))),
                    )
                )
                c.notifications.clear()
        finally:
            await c.close()
    finally:
        daemon.stop()
    for label, items, meta, watched, want_items, want_meta in seen:
        assert items == want_items, label
        assert meta == want_meta, label
        assert isinstance(watched, int) and watched >= 3, (label, watched)


def _refresh(ctx: Context, watch: watch_mod.FolderWatch) -> Context:
    fresh, again = manager_mod._watched_refresh(ctx, watch)
    assert again is watch  # the partial path: the same watch, added to
    watch.clear()
    return ctx if fresh is None else fresh


def _assert_fresh(ctx: Context, root: Path, label: str) -> None:
    full = load_codebase(root)
    assert list(ctx.value.items()) == list(full.value.items()), label
    assert ctx.skipped == full.skipped, label
    assert ctx.stamps == full.stamps, label
    assert _meta(ctx) == _meta(full), label


def test_each_change_refreshed_in_part_equals_a_fresh_load(tmp_path):
    """The folders the watch named are listed again, and the result (files in order,
    skipped counts, stamps, the model's metadata from the carried sums) equals a full load
    after every kind of change."""
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, threading.Event())
    assert watch is not None
    _meta(ctx)  # the sums a refresh carries over
    for label, change in _changes(proj):
        change()
        ctx = _refresh(ctx, watch)
        _assert_fresh(ctx, proj, label)
    watch.close()


def test_an_edit_lists_only_its_own_folder(tmp_path, monkeypatch):
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, threading.Event())
    assert watch is not None
    listed: list[str] = []
    scandir = os.scandir

    def counting(path):
        listed.append(os.path.relpath(path, proj))
        return scandir(path)

    monkeypatch.setattr(context_mod.os, "scandir", counting)
    (proj / "pkg" / "sub" / "c.py").write_text("C = 4\n")
    fresh = _refresh(ctx, watch)
    assert listed == ["pkg/sub"]
    assert fresh.changes == ({"pkg/sub/c.py": "C = 4\n"}, [])
    assert fresh.value["a.py"] is ctx.value["a.py"]  # untouched texts are the same objects
    watch.close()


def test_random_changes_refreshed_in_part_equal_a_fresh_load(tmp_path):
    """A seeded run of 150 random edits, additions, deletions, folder moves and removals
    and .gitignore edits, a few at a time between refreshes."""
    rng = random.Random(23)
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, threading.Event())
    assert watch is not None
    _meta(ctx)

    def folders() -> list[Path]:
        return [Path(d) for d, _, _ in os.walk(proj)]

    def files() -> list[Path]:
        return [Path(d) / f for d, _, fs in os.walk(proj) for f in fs]

    for step in range(50):
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(
                ["edit", "edit", "add", "delete", "mkdir", "move", "rmtree", "ignore"]
            )
            if kind == "edit" and files():
                rng.choice(files()).write_text(f"E = {rng.random()}\n")
            elif kind == "add":
                (rng.choice(folders()) / f"f{rng.randint(0, 99)}.py").write_text("F\n")
            elif kind == "delete" and files():
                rng.choice(files()).unlink()
            elif kind == "mkdir":
                new = rng.choice(folders()) / f"d{rng.randint(0, 99)}"
                new.mkdir(exist_ok=True)
                (new / "x.py").write_text("X\n")
            elif kind in ("move", "rmtree"):
                inner = [d for d in folders() if d != proj]
                if inner:
                    victim = rng.choice(inner)
                    if kind == "rmtree":
                        shutil.rmtree(victim)
                    else:
                        target = rng.choice([d for d in folders() if victim not in d.parents])
                        if target != victim and not (target / victim.name).exists():
                            victim.rename(target / victim.name)
            elif kind == "ignore":
                where = rng.choice(folders())
                (where / ".gitignore").write_text(rng.choice(["", "x.py\n", "d*/\n", "*.py\n"]))
        ctx = _refresh(ctx, watch)
        _assert_fresh(ctx, proj, f"step {step}")
    watch.close()


def test_lost_events_walk_the_whole_folder(tmp_path):
    """A queue overflow (events lost) leaves the names incomplete: a new watch, filled by a
    walk of the whole folder."""
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, threading.Event())
    assert watch is not None
    (proj / "pkg" / "b.py").write_text("B = 5\n")
    watch.changed()
    watch._whole = True  # what an IN_Q_OVERFLOW event sets
    assert not watch.complete
    fresh, again = manager_mod._watched_refresh(ctx, watch)
    assert again is not None and again is not watch
    assert fresh is not None and fresh.value["pkg/b.py"] == "B = 5\n"
    watch.close()
    again.close()


@pytest.mark.parametrize("backend", ["subprocess", "inprocess"])
async def test_a_refused_delta_binds_the_whole_codebase_and_keeps_variables(tmp_path, backend):
    proj = _tree(tmp_path)
    ctx = load_codebase(proj)
    sandbox = create_sandbox(backend)
    try:
        await sandbox.start(manager_mod._no_calls)
        await sandbox.load_context(ctx.value, codebase=True)
        await sandbox.execute("kept = 7")
        # a difference that does not fit the codebase bound (it lacks "nope.py")
        new = {**ctx.value, "z.py": "Z\n"}
        new.pop("a.py")
        await sandbox.update_codebase(new, {"z.py": "Z\n"}, ["a.py", "nope.py"])
        out = await sandbox.execute(
            "import json\nprint(json.dumps([list(context.items()), kept, list_files()]))"
        )
        items, kept, listed = json.loads(out.stdout)
        assert items == [list(i) for i in new.items()] and kept == 7
        assert listed == sorted(new)
        # then a good difference applies on top of the whole bind
        newer = {**new, "z.py": "Z2\n"}
        await sandbox.update_codebase(newer, {"z.py": "Z2\n"}, [])
        out = await sandbox.execute("print(context['z.py'], read_file('z.py'), kept)")
        assert out.stdout.split() == ["Z2", "1|", "Z2", "7"]
    finally:
        await sandbox.close()


async def test_a_delta_that_fails_in_the_kernel_falls_back_to_a_whole_bind(tmp_path, monkeypatch):
    """The kernel failing during the difference (``SandboxError``: it was restarted with
    the old codebase) is followed by a bind of the whole new one."""
    from rlmd.sandbox.base import SandboxError

    proj = _tree(tmp_path)
    ctx = load_codebase(proj)
    sandbox = create_sandbox("subprocess")
    try:
        await sandbox.start(manager_mod._no_calls)
        await sandbox.load_context(ctx.value, codebase=True)
        op = sandbox._op

        async def failing(request):
            if request.get("op") == "update_codebase":
                raise SandboxError("update_codebase failed: the kernel died")
            return await op(request)

        monkeypatch.setattr(sandbox, "_op", failing)
        new = {**ctx.value, "a.py": "A = 2\n"}
        await sandbox.update_codebase(new, {"a.py": "A = 2\n"}, [])
        out = await sandbox.execute("import json\nprint(json.dumps(list(context.items())))")
        assert json.loads(out.stdout) == [list(i) for i in new.items()]
        assert sandbox.bound.context == (new, True)
    finally:
        await sandbox.close()


def test_the_kernel_applies_a_difference_to_its_own_copy():
    """``context`` after an update is rebuilt from the kernel's copy (a ``context`` the
    model changed is replaced, as a whole bind would), in path order; a difference for
    another codebase changes nothing."""
    kernel = Kernel(lambda fn, args: None)
    kernel.bind_context({"a.py": "A", "c.py": "C"}, True)
    kernel.exec_cell("context['a.py'] = 'mangled'\ndel context['c.py']")
    kernel.update_codebase({"b.py": "B"}, [], 3)
    assert list(kernel.ns["context"].items()) == [("a.py", "A"), ("b.py", "B"), ("c.py", "C")]
    with pytest.raises(ValueError, match="would not hold"):
        kernel.update_codebase({"d.py": "D"}, ["a.py"], 4)
    with pytest.raises(ValueError, match="does not hold"):
        kernel.update_codebase({}, ["zzz.py"], 2)
    assert list(kernel.ns["context"]) == ["a.py", "b.py", "c.py"]
    assert kernel.ns["read_file"]("b.py").strip() == "1| B"


def test_a_partial_refresh_past_the_file_cap_is_refused(tmp_path, monkeypatch):
    """The codebase caps hold for a refresh that lists only the named folders too: the
    files kept in all folders count, and the old context is left as it was."""
    proj = _tree(tmp_path)
    ctx, watch = manager_mod._watched_load(proj, threading.Event())
    assert watch is not None
    n = len(ctx.value)
    monkeypatch.setattr(context_mod, "MAX_CODEBASE_FILES", n + 1)
    (proj / "pkg" / "one.py").write_text("1\n")
    ctx = _refresh(ctx, watch)  # n + 1 files: at the cap, not past it
    (proj / "pkg" / "sub" / "two.py").write_text("2\n")
    with pytest.raises(context_mod.CodebaseTooLarge, match=f"more than {n + 1} files"):
        manager_mod._watched_refresh(ctx, watch)
    assert len(ctx.value) == n + 1
    (proj / "pkg" / "sub" / "two.py").unlink()
    (proj / "pkg" / "one.py").unlink()
    assert len(_refresh(ctx, watch).value) == n  # the change seen before is still pending
    watch.close()

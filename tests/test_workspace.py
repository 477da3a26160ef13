"""A daemon workspace (rlmd/workspace) end to end: a real subprocess sandbox holding a real
codebase, checkpoints on disk, restore after a stop and after a kernel death, its state
sequence, and the prepared REPL a task's run attaches to."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.scripted import scripted_registry, turn_of

from rlmd.engine import RunConfig, run_task
from rlmd.workspace import checkpoint as ckpt
from rlmd.workspace.manager import (
    Workspace,
    WorkspaceManager,
    WorkspaceSettings,
    WorkspaceState,
)


class Changes:
    """Records every ``on_change`` as ``(change, state)`` with its data."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.data: dict[str, dict[str, Any]] = {}

    def __call__(self, ws: Workspace, kind: str, data: dict[str, Any]) -> None:
        self.seen.append((kind, ws.state))
        self.data[kind] = data


@pytest.fixture
async def manager(codebase: Path):
    changes = Changes()
    mgr = WorkspaceManager(lambda folder: WorkspaceSettings(idle_timeout_s=None), changes)
    mgr.changes = changes  # type: ignore[attr-defined]
    yield mgr
    await mgr.shutdown()  # stops what a failed test left running


async def test_state_sequence_checkpoint_and_restore_after_a_stop(manager, codebase):
    changes: Changes = manager.changes
    ws = manager.get(codebase)
    assert ws.state is WorkspaceState.STOPPED and ws.describe()["state"] == "stopped"

    starting = asyncio.ensure_future(ws.ensure_started())
    await asyncio.sleep(0)  # the start runs up to its first await
    assert ws.state is WorkspaceState.STARTING
    info = await starting
    assert ws.state is WorkspaceState.READY
    assert info is not None and info["files"] == 5 and info["restored"] == []
    assert await ws.ensure_started() is None  # already running

    made = await ws.run_cell(
        "import math\ncount = len(context)\nnames = sorted(context)\nsquare = lambda x: x * x",
        timeout_s=30,
    )
    assert made.error is None
    saved = await ws.checkpoint()
    assert saved is not None and saved["variables"] == ["count", "names"]
    assert set(saved["skipped"]) == {"square"}  # modules are never saved, nor listed
    path = ckpt.checkpoint_path(ws.folder)
    on_disk = json.loads(path.read_text())
    assert on_disk["workspace"] == ws.folder and on_disk["version"] == 2
    assert on_disk["variables"]["count"] == {
        "type": "int",
        "size": None,
        "preview": "5",
        "bytes": 1,
    }
    values = (path.parent / on_disk["values"]["file"]).read_bytes()  # the kernel's JSON
    assert json.loads(values) == {"count": 5, "names": sorted(json.loads(values)["names"])}
    assert len(values) == on_disk["values"]["bytes"] and saved["bytes"] > len(values)
    with pytest.raises(FileNotFoundError):  # the kernel's copy is gone from its folder
        await ws.sandbox.download(ckpt.SAVE_FILE)

    await ws.stop(checkpoint=False, reason="test")
    assert ws.state is WorkspaceState.STOPPED and ws.sandbox is None

    info = await ws.ensure_started()
    assert info is not None and sorted(info["restored"]) == ["count", "names"]
    back = await ws.run_cell("print(count, names[0], 'math' in dir())", timeout_s=30)
    assert back.stdout == "5 .gitignore False\n"
    note = await ws.model_note()
    assert "restored from the workspace checkpoint" in note and "count" in note
    assert "Imports are not restored" in note

    await ws.reset()
    assert not ckpt.checkpoint_path(ws.folder).exists()
    await manager.close(ws)
    assert ws.state is WorkspaceState.CLOSED and manager.find(codebase) is None
    assert changes.seen == [
        ("started", "ready"),
        ("cell", "ready"),
        ("checkpointed", "ready"),
        ("stopped", "stopped"),
        ("started", "ready"),
        ("cell", "ready"),
        ("stopped", "stopped"),  # reset
        ("reset", "stopped"),
        ("closed", "closed"),
    ]


async def test_a_dead_kernel_gets_the_checkpoints_variables_back(manager, codebase):
    changes: Changes = manager.changes
    ws = manager.get(codebase)
    await ws.run_cell("kept = [1, 2, 3]", timeout_s=30)
    await ws.checkpoint()
    await ws.run_cell("later = 'not checkpointed'", timeout_s=30)
    died = await ws.run_cell("import os\nos._exit(3)", timeout_s=30)
    assert died.kernel_restarted and "kept" in died.lost_variables
    assert ws.kernel_restarts == 1
    assert changes.data["restored"]["restored"] == ["kept"]
    again = await ws.run_cell("print(kept, 'later' in dir(), len(context))", timeout_s=30)
    assert again.stdout == "[1, 2, 3] False 5\n"
    note = await ws.model_note()
    assert "died during a cell run by hand" in note and "kept" in note


async def test_a_checkpoint_from_before_version_2_is_still_restored(manager, codebase):
    """Version 1 (sessions up to 20) kept the values inside ``checkpoint.json``; a daemon
    updated over one must not lose the REPL's variables."""
    ws = manager.get(codebase)
    path = ckpt.checkpoint_path(ws.folder)
    path.parent.mkdir(parents=True)
    old = {"version": 1, "workspace": ws.folder, "taken_at": 5.0,
           "variables": {"rows": [1, "two", None], "label": "x" * 200}, "skipped": {"f": "a function"}}  # fmt: skip
    path.write_text(json.dumps(old))
    info = await ws.ensure_started()
    assert info is not None and sorted(info["restored"]) == ["label", "rows"]
    assert info["not_restored"] == {"f": "a function"}
    back = await ws.run_cell("print(rows, len(label))", timeout_s=30)
    assert back.stdout == "[1, 'two', None] 200\n"
    listed = ckpt.load(path)  # the description a stopped workspace's listing shows
    assert listed.variables["label"]["size"] == 200 and listed.variables["label"]["bytes"] == 202
    assert listed.variables["label"]["preview"].endswith("...")
    assert len(listed.variables["label"]["preview"]) == 80
    await ws.checkpoint()  # written again as version 2
    assert json.loads(path.read_text())["version"] == 2


async def test_a_changed_values_file_restores_nothing_and_says_why(manager, codebase):
    ws = manager.get(codebase)
    await ws.run_cell("a = 1\nb = 'two'", timeout_s=30)
    await ws.checkpoint()
    await ws.stop(checkpoint=False, reason="test")
    path = ckpt.checkpoint_path(ws.folder)
    values = path.parent / json.loads(path.read_text())["values"]["file"]
    values.write_bytes(values.read_bytes().replace(b"two", b"owt"))  # same length, other bytes
    info = await ws.ensure_started()
    assert info is not None and info["restored"] == []
    assert set(info["not_restored"]) == {"a", "b"}
    assert "changed or cut short" in info["not_restored"]["a"]
    assert (await ws.run_cell("print('a' in dir())", timeout_s=30)).stdout == "False\n"
    values.unlink()  # gone: the same, the REPL still starts
    await ws.stop(checkpoint=False, reason="test")
    info = await ws.ensure_started()
    assert info is not None and "No such file" in info["not_restored"]["b"]
    await ws.reset()  # the checkpoint and every values file go
    assert list(path.parent.iterdir()) == []


async def test_a_task_attaches_to_the_prepared_repl_and_gives_it_back(manager, codebase):
    """The workspace bound ``context`` once; the run only attaches its handler: it sees the
    workspace's variables and its sub-calls work; after the task they are refused again."""
    seen: list[str] = []

    def root(messages: list[dict]) -> str:
        if turn_of(messages) == 0:
            return "```repl\nprint(len(context), before)\nnote = llm_query('hi')\nprint(note)\n```"
        seen.append(messages[-1]["content"])
        return "```repl\nFINAL(str(before * 2))\n```"

    ws = manager.get(codebase)
    await ws.run_cell("before = 21", timeout_s=30)
    bound = ws.sandbox
    registry = scripted_registry(root=root, sub=lambda m: "sub says hi")
    try:
        result = await run_task(
            "double it",
            ws.context,
            RunConfig(root_model="root", sub_model="sub", workspace=ws.folder),
            get_model=registry.get,
            sandbox=ws.sandbox,
        )
    finally:
        await registry.aclose()
    assert (result.status, result.answer) == ("completed", "42")
    assert "5 21" in seen[0] and "sub says hi" in seen[0]
    assert ws.sandbox is bound  # the run neither replaced nor closed the workspace's REPL
    notes = await ws.finish_task()
    assert notes == []
    after = await ws.run_cell("llm_query('hi')", timeout_s=30)
    assert after.error is not None and "only available while a task runs" in after.error
    assert (await ws.run_cell("print(note)", timeout_s=30)).stdout == "sub says hi\n"


async def test_a_checkpoint_that_cannot_be_written_keeps_the_repl_and_its_variables(
    manager, codebase
):
    """A full disk (here: a file where the checkpoint's folder goes) made the checkpoint after
    a task fail, and the workspace stopped its REPL: the variables the task made, which no
    checkpoint held, were lost. The REPL stays; the note says the checkpoint was not written."""
    ws = manager.get(codebase)
    await ws.run_cell("made = 'by the task'", timeout_s=30)
    folder = ckpt.checkpoint_path(ws.folder).parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("not a folder")
    try:
        notes = await ws.finish_task()
        assert len(notes) == 1 and "checkpoint was not written" in notes[0]
        assert ws.state is WorkspaceState.READY
        kept = await ws.run_cell("print(made)", timeout_s=30)
        assert kept.stdout == "by the task\n" and not kept.kernel_restarted
    finally:
        folder.unlink()
    assert await ws.checkpoint() is not None  # written once it can be


async def test_an_idle_stop_or_a_close_that_cannot_checkpoint_keeps_the_repl(manager, codebase):
    """An idle sweep or a close whose checkpoint could not be written (a full disk) stopped
    the REPL anyway and lost the variables no checkpoint held. Both now keep it running,
    say why in a ``checkpoint_failed`` change, and stop once the checkpoint can be written."""
    from rlmd.workspace.manager import CheckpointNotWritten

    ws = manager.get(codebase)
    ws.settings = WorkspaceSettings(idle_timeout_s=0.001)
    await ws.run_cell("made = 'unsaved'", timeout_s=30)
    folder = ckpt.checkpoint_path(ws.folder).parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("not a folder")
    try:
        ws.last_used -= 1.0
        assert await manager.sweep_idle() == []
        assert ws.state is WorkspaceState.READY and ws.sandbox is not None
        failed = manager.changes.data["checkpoint_failed"]
        assert failed["reason"] == "idle" and "not written" in failed["error"]
        with pytest.raises(CheckpointNotWritten, match="stays open with its variables"):
            await manager.close(ws)
        assert (
            manager.find(codebase) is ws
            and manager.changes.data["checkpoint_failed"]["reason"] == "closed"
        )
        kept = await ws.run_cell("print(made)", timeout_s=30)
        assert kept.stdout == "unsaved\n" and not kept.kernel_restarted
        assert "stopped" not in manager.changes.data
    finally:
        folder.unlink()
    ws.last_used -= 1.0
    assert await manager.sweep_idle() == [ws.folder]
    assert ws.state is WorkspaceState.STOPPED
    assert manager.changes.data["stopped"]["checkpoint_error"] is None
    assert "made" in manager.changes.data["checkpointed"]["variables"]


async def test_a_close_a_cancel_or_a_shutdown_stops_the_codebase_load_of_a_starting_workspace(
    manager, codebase, monkeypatch
):
    """Opening ``/`` over the socket read every text file under it: the daemon grew past
    2.9 GiB, ``rlmd.workspace.close`` timed out and SIGTERM did not end the daemon (each
    waited for the load's thread, which nothing could stop). A close, a cancelled caller and
    the shutdown now stop the load within a file, and the open gets a clear error."""
    import threading

    from rlmd.sandbox.base import SandboxError
    from rlmd.workspace import manager as manager_mod

    loading = threading.Event()
    seen: list[threading.Event | None] = []
    real = manager_mod.load_codebase

    def huge_folder(root, *, stop=None, **kw):  # still reading when the close comes
        seen.append(stop)
        loading.set()
        if stop is not None:
            stop.wait(60)
        return real(root, stop=stop, **kw)

    monkeypatch.setattr(manager_mod, "load_codebase", huge_folder)

    async def open_(ws):  # as rlmd.workspace.open does
        async with ws.hold("open"):
            return await ws.ensure_started()

    async def while_loading(ws):
        loading.clear()
        started = asyncio.ensure_future(open_(ws))
        assert await asyncio.to_thread(loading.wait, 60)
        return started

    ws = manager.get(codebase)
    opening = await while_loading(ws)
    await manager.close(ws)
    with pytest.raises(SandboxError, match="was closed while its codebase was loading"):
        await opening
    assert seen[-1] is not None and seen[-1].is_set()
    assert manager.find(codebase) is None and ws.sandbox is None

    ws = manager.get(codebase)  # a task cancelled while its workspace loads
    opening = await while_loading(ws)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert seen[-1] is not None and seen[-1].is_set() and ws.sandbox is None

    opening = await while_loading(ws)  # the daemon stopping (SIGTERM)
    await manager.shutdown()
    with pytest.raises(SandboxError, match="was closed while its codebase was loading"):
        await opening
    assert seen[-1] is not None and seen[-1].is_set() and manager.workspaces == {}

    monkeypatch.setattr(manager_mod, "load_codebase", real)  # nothing left set for later
    ws = manager.get(codebase)
    assert (await ws.ensure_started())["files"] == 5  # type: ignore[index]


@pytest.mark.parametrize("probe", ["honest", "faked json", "faked file"])
async def test_one_value_bound_to_many_names_cannot_blow_up_the_checkpoint(
    manager, codebase, probe
):
    """Review19: the per-variable limit was the only one, so one 30 MB string bound to 20
    names (30 MB in the REPL) made a 660 MB checkpoint and the daemon peak at 2.1 GB; with
    200 names, past this machine's memory. All variables together now get at most
    ``max_total_bytes`` of JSON. The kernel writes the values; the host refuses a file longer
    than that (plus the names), so REPL code that fakes the kernel's ``json`` only saves its
    own lie, and code that replaces the kernel's writer gets nothing saved."""
    ws = manager.get(codebase)
    code = "big = 'x' * 100_000\nfor i in range(10):\n    globals()['alias%d' % i] = big\n"
    code += "del i\nsmall = [1]"
    if probe == "faked json":  # every value "1 byte, unchanged"
        code += (
            "\nimport sys, types, json as _j\nclass _Same:\n    def __eq__(self, o): return True\n"
            "sys.modules['json'] = types.SimpleNamespace(\n"
            "    dumps=lambda v, **k: '1' if k.get('allow_nan') is False else _j.dumps(v, **k),\n"
            "    loads=lambda t: _Same() if t == '1' else _j.loads(t))"
        )
    if probe == "faked file":  # the kernel's writer says 1 byte each and writes 2 MB
        code += (
            "\nimport sys\nvf = [m for k, m in sys.modules.items() if k.endswith('.varfile')][0]\n"
            "def _lie(items, workdir, name, *limits, vf=vf):\n"
            "    with open(vf.file_in(workdir, name), 'w') as f:\n"
            "        f.write('{\"big\":\"' + 'y' * 2_000_000 + '\"}')\n"
            "    return {'saved': {k: {'type': 'str', 'size': 1, 'preview': 'y', 'bytes': 1}\n"
            "                      for k, _ in items}, 'skipped': {}, 'bytes': 1}\n"
            "vf.save = _lie\ndel vf"
        )
    assert (await ws.run_cell(code, timeout_s=30)).error is None
    if probe == "faked file":  # nothing to save (the previous checkpoint is kept)
        # the download's bound: the limit plus the kernel's description of what it saved
        # (each saved name is a key there too); the exact one is checked after it
        with pytest.raises(ckpt.NotTaken, match=r"larger than the 350,\d{3} bytes allowed"):
            await ckpt.take(ws.sandbox, ws.folder, max_var_bytes=150_000, max_total_bytes=350_000)
        with pytest.raises(FileNotFoundError):  # never left in the sandbox's folder
            await ws.sandbox.download(ckpt.SAVE_FILE)
        return
    saved = await ckpt.take(ws.sandbox, ws.folder, max_var_bytes=150_000, max_total_bytes=350_000)
    names = {"big", "small", *(f"alias{i}" for i in range(10))}
    assert set(saved.variables) | set(saved.skipped) == names
    with pytest.raises(FileNotFoundError):  # never left in the sandbox's folder
        await ws.sandbox.download(ckpt.SAVE_FILE)
    assert saved.values is not None and len(saved.values) < 350_000 + 1_000
    if probe == "faked json":  # its own values, as it chose to write them: 1 each
        assert json.loads(saved.values) == dict.fromkeys(names, 1)
        return
    big = [n for n in saved.variables if n != "small"]
    assert len(big) == 3 and "small" in saved.variables  # 3 x 100,002 bytes fit in 350,000
    assert json.loads(saved.values) == {**dict.fromkeys(big, "x" * 100_000), "small": [1]}
    full = [n for n, why in saved.skipped.items() if "350,000 bytes of JSON for all" in why]
    assert len(full) == 8 and not set(full) & set(saved.variables)
    # the total is never below the per-variable limit: one such value still fits
    lone = await ckpt.take(ws.sandbox, ws.folder, max_var_bytes=150_000, max_total_bytes=1)
    assert len([n for n in lone.variables if n != "small"]) == 1


def test_a_killed_writers_temp_file_is_removed_by_the_next_save(tmp_path):
    """Review19: a daemon killed while writing a checkpoint left ``.checkpoint.json.<pid>.tmp``
    (up to 128 MiB) behind for good. The next save removes a dead writer's; a live one's stays."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    path = tmp_path / "checkpoint.json"
    left = tmp_path / f".checkpoint.json.{int(dead.stdout)}.tmp"
    live = tmp_path / f".checkpoint.json.{os.getppid()}.tmp"
    other = tmp_path / ".other.json.1.tmp"
    for f in (left, live, other):
        f.write_bytes(b"partial")
    ckpt.save(ckpt.Checkpoint(workspace="w", taken_at=1.0), path)
    assert not left.exists()
    assert live.exists() and other.exists()
    assert ckpt.load(path).workspace == "w"


@pytest.mark.parametrize("how", ["folder planted", "disk full", "json broken"])
async def test_a_checkpoint_the_repl_could_not_write_keeps_the_previous_one(manager, codebase, how):
    """Review21: when the kernel could not write its values file (its folder full, a folder
    where the file goes, model code that broke ``json``), every variable came back "skipped"
    and that empty checkpoint replaced the previous good one (its values file deleted); an
    idle stop then stopped the REPL too: the variables were gone from both. Now the previous
    checkpoint stays and the REPL keeps running, as for a full rlmd home."""
    from rlmd.workspace.manager import CheckpointNotWritten

    ws = manager.get(codebase)
    await ws.run_cell("kept = 'from the first task'", timeout_s=30)
    await ws.checkpoint()
    path = ckpt.checkpoint_path(ws.folder)
    before = path.read_bytes()
    breakers = {
        "folder planted": f"import os\nos.mkdir({ckpt.SAVE_FILE!r})\nos.mkdir('{ckpt.SAVE_FILE}/x')",
        "disk full": "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (3, 3))",
        "json broken": "import sys\nsys.modules['json'] = None",
    }
    made = await ws.run_cell(f"made = 'later'\n{breakers[how]}", timeout_s=30)
    assert made.error is None, made.error
    with pytest.raises(CheckpointNotWritten, match="previous checkpoint is kept"):
        await ws.checkpoint()
    notes = await ws.finish_task()
    assert len(notes) == 1 and "previous checkpoint is kept" in notes[0]
    assert ws.state is WorkspaceState.READY
    assert (await ws.run_cell("print(made)", timeout_s=30)).stdout == "later\n"
    assert path.read_bytes() == before
    await ws.stop(checkpoint=False, reason="test")
    info = await ws.ensure_started()
    assert info is not None and info["restored"] == ["kept"]


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000,  # nested past the decoder's recursion limit
        b'{"version": 2, "variables": {"a": ' + b"[" * 100_000 + b"]}",
        b'{"version": 2, "variables": {}, "skipped": {}, "values": null, "pad": "'
        + b"x" * 2_000
        + b'"}',
        b"\xff\xfe not text",
        b'{"version": 2, "taken_at": {"a": 1}}',
    ],
    ids=["deep", "deep inside", "huge", "not utf-8", "bad taken_at"],
)
@pytest.mark.parametrize("stepwise", [False, True], ids=["one-call", "stepwise"])
def test_a_corrupt_checkpoint_json_is_set_aside_not_raised(
    tmp_path, monkeypatch, content, stepwise
):
    """Review21: a ``checkpoint.json`` nested too deep raised ``RecursionError`` out of
    ``load`` (every open of the workspace failed, the listing too) and a huge one was read
    whole into the daemon. Each is now set aside as ``.corrupt`` and ignored, also when
    read member by member (a large file)."""
    monkeypatch.setattr(ckpt, "MAX_METADATA_BYTES", 1_000, raising=False)
    if stepwise:
        monkeypatch.setattr(ckpt, "STEPWISE_FROM", 0)
    path = tmp_path / "checkpoint.json"
    path.write_bytes(content)
    assert ckpt.load(path) is None
    assert not path.exists() and (tmp_path / "checkpoint.json.corrupt").exists()


def test_a_large_checkpoint_json_is_read_member_by_member_as_json_loads_reads_it(monkeypatch):
    """A ``checkpoint.json`` of 200,000 variables decoded by one ``json.loads`` held the GIL
    0.3 s: every client of the daemon waited. ``loads_stepwise`` decodes it in small steps
    and must read exactly what ``json.loads`` reads, and refuse what it refuses."""
    import random

    monkeypatch.setattr(ckpt, "STEPWISE_FROM", 0)
    rnd = random.Random(16)

    def value(depth: int) -> Any:
        kinds: list[Any] = [
            lambda: None,
            lambda: rnd.random() < 0.5,
            lambda: rnd.uniform(-1e6, 1e6),
            lambda: rnd.randrange(-(10**20), 10**20),
            lambda: 's\u00e9\U0001f600\\"\n x',
            lambda: float("nan"),
        ]
        if depth < 3:
            kinds.append(lambda: [value(depth + 1) for _ in range(rnd.randrange(3))])
            kinds.append(lambda: {f"k{rnd.randrange(4)}": value(depth + 1) for _ in range(3)})
        return rnd.choice(kinds)()

    for _ in range(2_000):
        obj = {f"k{rnd.randrange(6)}": value(0) for _ in range(rnd.randrange(6))}
        text = json.dumps(obj, indent=rnd.choice([None, 1]), ensure_ascii=rnd.random() < 0.5)
        assert json.dumps(ckpt.loads_stepwise(text)) == json.dumps(json.loads(text)), text
    assert ckpt.loads_stepwise(' {"a": 1, "a": {"b": 1, "b": 2}} ') == {"a": {"b": 2}}
    assert ckpt.loads_stepwise("[1, 2]") == [1, 2]
    for bad in (
        "{",
        '{"a"',
        '{"a":}',
        '{"a":1,}',
        '{"a":1 "b":2}',
        '{"a":1}x',
        "{a:1}",
        '{"a":{"b":1,}}',
        '{"a":{"b" 1}}',
        '{"a":{',
        '\ufeff{"a":1}',
        '{"a":"\x01"}',
        "",
    ):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            ckpt.loads_stepwise(bad)


def test_a_checkpoint_json_is_written_member_by_member_as_json_dumps_writes_it():
    """One ``json.dumps`` of the ``checkpoint.json`` of 200,000 variables held the GIL
    ~0.15 s even in a worker thread; ``dumps_stepwise`` encodes member by member and must
    write exactly what ``json.dumps`` writes."""
    import random

    rnd = random.Random(23)
    odd = ['s\u00e9\U0001f600\\"\n x', "\ud800", "", "a" * 100]
    for _ in range(500):
        obj: dict[str, Any] = {
            rnd.choice(odd) + str(k): rnd.choice(
                [
                    None,
                    1.5,
                    float("nan"),
                    [1, "x"],
                    {},
                    {rnd.choice(odd) + str(i): {"type": "int", "size": None} for i in range(3)},
                ]
            )
            for k in range(rnd.randrange(6))
        }
        assert ckpt.dumps_stepwise(obj) == json.dumps(obj, separators=(",", ":"))


def test_a_checkpoint_json_over_the_limit_is_not_written(tmp_path, monkeypatch):
    """What ``load`` would set aside is never written: the previous checkpoint stays."""
    monkeypatch.setattr(ckpt, "MAX_METADATA_BYTES", 1_000, raising=False)
    path = tmp_path / "checkpoint.json"
    info = {"type": "int", "size": None, "preview": "1", "bytes": 1}
    ckpt.save(ckpt.Checkpoint("w", 1.0, {"a": info}, {"b": "x"}, values=b'{"a":1}'), path)
    skipped = {f"v{i}": "x" for i in range(200)}
    many = ckpt.Checkpoint("w", 2.0, {"a": info}, skipped, values=b'{"a":1}')  # same values
    with pytest.raises(OSError, match="too large"):
        ckpt.save(many, path)
    assert ckpt.load(path).skipped == {"b": "x"}
    assert ckpt.read_values(ckpt.load(path)) == b'{"a":1}'


async def _checkpointed_and_stopped(manager, codebase):
    """The workspace of ``codebase`` with ``a = 1`` checkpointed, stopped without another
    checkpoint; returns it and its ``checkpoint.json`` path."""
    ws = manager.get(codebase)
    await ws.run_cell("a = 1", timeout_s=30)
    await ws.checkpoint()
    await ws.stop(checkpoint=False, reason="test")
    return ws, ckpt.checkpoint_path(ws.folder)


@pytest.mark.parametrize("size", [2**62, 10**30, "fifo", "folder"])
async def test_a_values_reference_with_an_absurd_length_restores_nothing_and_says_why(
    manager, codebase, size
):
    """Review21: ``read_values`` read ``bytes + 1`` from the values file, so a
    ``checkpoint.json`` claiming 2**62 bytes raised ``MemoryError`` (10**30:
    ``OverflowError``) out of the restore: the workspace could not be opened at all; a FIFO
    in place of the values file blocked the restore (and the workspace) for good."""
    ws, path = await _checkpointed_and_stopped(manager, codebase)
    meta = json.loads(path.read_text())
    if size in ("fifo", "folder"):  # a folder: "Is a directory: 16" (review22)
        values = path.parent / meta["values"]["file"]
        values.unlink()
        os.mkfifo(values) if size == "fifo" else values.mkdir()
    else:
        meta["values"]["bytes"] = size
        path.write_text(json.dumps(meta))
    info = await asyncio.wait_for(ws.ensure_started(), 60)
    assert info is not None and info["restored"] == []
    why = info["not_restored"]["a"]
    if isinstance(size, int):
        assert "changed or cut short" in why
    else:
        assert f"its values file is not a regular file (a {size.replace('fifo', 'FIFO')})" in why


def test_two_saves_of_one_checkpoint_at_once_leave_a_whole_one(tmp_path, monkeypatch):
    """Review21: a save is a thread the event loop does not wait for once its caller is
    cancelled (a task cancelled while checkpointing), so the next holder's save could run at
    the same time. The later one deleted every values file but its own, the first one's
    included, and the first then pointed ``checkpoint.json`` at it: no checkpoint was left.
    Saves of one folder now take turns."""
    import threading

    path = tmp_path / "checkpoint.json"
    paused, go = threading.Event(), threading.Event()
    write = ckpt._write_atomic

    def slow_first(target, data):
        write(target, data)
        if data == b'{"a":1}':  # the first save, its values written
            paused.set()
            go.wait(30)

    monkeypatch.setattr(ckpt, "_write_atomic", slow_first)
    info = {"type": "int", "size": None, "preview": "1", "bytes": 1}
    first = ckpt.Checkpoint("w", 1.0, {"a": info}, values=b'{"a":1}')
    second = ckpt.Checkpoint("w", 2.0, {"b": info}, values=b'{"b":2}')
    one = threading.Thread(target=ckpt.save, args=(first, path))
    one.start()
    assert paused.wait(30)
    two = threading.Thread(target=ckpt.save, args=(second, path))
    two.start()
    two.join(1)  # done at once before (racing), waiting its turn now
    go.set()
    one.join(30)
    two.join(30)
    back = ckpt.load(path)
    assert back is not None and back.taken_at == 2.0
    assert ckpt.read_values(back) == b'{"b":2}'


async def test_a_restore_that_failed_as_a_whole_does_not_let_the_next_checkpoint_drop_it(
    manager, codebase
):
    """Review21: the values go back through a file in the sandbox's folder; when that cannot
    be written (its folder full, something in the way), nothing was restored after a kernel
    death, and the checkpoint after the task replaced the good one with what the new kernel
    held: the variables were gone from both. The next checkpoint now tries the restore
    again first and, while it fails, keeps the previous checkpoint (and the REPL)."""
    from rlmd.workspace.manager import CheckpointNotWritten

    ws = manager.get(codebase)
    await ws.run_cell("kept = 'from the first task'", timeout_s=30)
    await ws.checkpoint()
    path = ckpt.checkpoint_path(ws.folder)
    before = path.read_bytes()
    crash = f"import os\nos.mkdir({ckpt.RESTORE_FILE!r})\nos.mkdir('{ckpt.RESTORE_FILE}/x')\n"
    r = await ws.run_cell(crash + "os._exit(3)", timeout_s=30)
    assert r.kernel_restarted
    assert "kept" in ws.last_restore["not_restored"]
    await ws.run_cell("made = 'after the restart'", timeout_s=30)
    with pytest.raises(CheckpointNotWritten, match="previous checkpoint is kept"):
        await ws.checkpoint()
    assert path.read_bytes() == before
    await ws.run_cell(f"import shutil\nshutil.rmtree({ckpt.RESTORE_FILE!r})", timeout_s=30)
    saved = await ws.checkpoint()  # restored first, then written with both
    assert saved is not None and saved["variables"] == ["kept", "made"]
    back = await ws.run_cell("print(kept, made)", timeout_s=30)
    assert back.stdout == "from the first task after the restart\n"


def test_a_save_that_fails_after_its_values_file_leaves_no_orphan(tmp_path, monkeypatch):
    """Review21: when ``checkpoint.json`` could not be written (a full rlmd home) after the
    new values file was, that file (up to 128 MiB) stayed, unreferenced, on the full disk:
    each retry then needed room for a second copy. It is removed; the previous one stays."""
    path = tmp_path / "checkpoint.json"
    info = {"type": "int", "size": None, "preview": "1", "bytes": 1}
    ckpt.save(ckpt.Checkpoint("w", 1.0, {"a": info}, values=b'{"a":1}'), path)
    before = sorted(p.name for p in tmp_path.iterdir())
    write = ckpt._write_atomic

    def full(target, data):
        if target.name == "checkpoint.json":
            raise OSError(28, "No space left on device")
        write(target, data)

    monkeypatch.setattr(ckpt, "_write_atomic", full)
    with pytest.raises(OSError, match="No space"):
        ckpt.save(ckpt.Checkpoint("w", 2.0, {"b": info}, values=b'{"b":2}'), path)
    with pytest.raises(OSError, match="No space"):  # the same values again: kept, not lost
        ckpt.save(ckpt.Checkpoint("w", 2.0, {"a": info}, values=b'{"a":1}'), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert ckpt.read_values(ckpt.load(path)) == b'{"a":1}'


@pytest.mark.parametrize("failure", ["sandbox", "cancelled"])
async def test_a_restore_that_fails_with_the_sandbox_stops_the_start_and_keeps_the_checkpoint(
    manager, codebase, monkeypatch, failure
):
    """Review21: the restore ran after the workspace took the sandbox, so one that failed
    with it (the kernel killed while decoding the values: "load_vars failed ... restarted")
    or was cancelled left the workspace "starting" for good with a REPL lacking the
    variables, and its next checkpoint (at the latest the daemon's shutdown) replaced the
    checkpoint that had them. The start now fails and stops; the checkpoint stays."""
    from rlmd.sandbox.base import SandboxError

    ws, path = await _checkpointed_and_stopped(manager, codebase)
    before = path.read_bytes()
    restore = ckpt.restore

    async def broken(*args, **kwargs):
        if failure == "cancelled":
            raise asyncio.CancelledError
        raise SandboxError("load_vars failed: the kernel died; the kernel was restarted")

    monkeypatch.setattr(ckpt, "restore", broken)
    with pytest.raises(SandboxError if failure == "sandbox" else asyncio.CancelledError) as e:
        await ws.ensure_started()
    if failure == "sandbox":
        assert "checkpoint's variables could not be restored: load_vars failed" in str(e.value)
    assert ws.state is WorkspaceState.STOPPED and ws.sandbox is None
    await manager.shutdown()  # checkpoints every running workspace: none
    assert path.read_bytes() == before
    monkeypatch.setattr(ckpt, "restore", restore)
    info = await manager.get(codebase).ensure_started()
    assert info is not None and info["restored"] == ["a"]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder"])
def test_a_fifo_or_link_at_checkpoint_json_is_set_aside_not_waited_on(tmp_path, kind):
    """Review21: ``load`` opened ``checkpoint.json`` blocking and following links: a FIFO
    there blocked the workspace's open (its worker thread) for good; a link made the daemon
    read whatever it points at. Both are now set aside like any unreadable file."""
    import threading

    path = tmp_path / "checkpoint.json"
    target = tmp_path / "elsewhere.json"
    target.write_text('{"version": 2, "workspace": "w", "variables": {}, "skipped": {}}')
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(target)
    got: list[Any] = []
    problems: list[str] = []
    reader = threading.Thread(target=lambda: got.append(ckpt.load(path, problems)), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # let the old code's reader go
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert got == [None]
    assert (tmp_path / "checkpoint.json.corrupt").exists() and target.exists()
    if kind == "folder":  # review22: it said "[Errno 21] Is a directory: 17", the descriptor
        assert "not a regular file (a folder)" in problems[0]


@pytest.mark.parametrize("taken_at", ["1e300", "NaN", "-Infinity", "1" + "0" * 400])
async def test_a_checkpoint_with_an_impossible_time_still_restores(manager, codebase, taken_at):
    """Review21: ``taken_at`` was any float: 1e300 or NaN made the restore note's
    ``time.localtime`` raise (``OverflowError``/``ValueError``) after the sandbox had started,
    so the open failed and the workspace stayed "starting", and the value is not JSON a
    client can read. An impossible time now reads as 0."""
    ws, path = await _checkpointed_and_stopped(manager, codebase)
    meta = json.loads(path.read_text())
    path.write_text(
        json.dumps(meta).replace(f'"taken_at": {meta["taken_at"]}', f'"taken_at": {taken_at}')
    )
    info = await ws.ensure_started()
    assert info is not None and info["restored"] == ["a"] and info["checkpoint_taken_at"] == 0.0
    assert ws.state is WorkspaceState.READY


async def test_an_unreadable_checkpoint_is_reported_and_each_one_kept(manager, codebase):
    """A corrupt ``checkpoint.json`` was set aside with only a log line: the start said
    nothing, the model was not told, and a second corrupt one overwrote the first
    ``.corrupt`` (found by user21)."""
    ws = manager.get(codebase)
    path = ckpt.checkpoint_path(ws.folder)
    path.parent.mkdir(parents=True)
    for n, aside in ((1, "checkpoint.json.corrupt"), (2, "checkpoint.json.corrupt-2")):
        path.write_text(f"{{not json {n}")
        info = await ws.ensure_started()
        assert info is not None and info["restored"] == [] and info["checkpoint_error"]
        assert "unreadable" in info["checkpoint_error"] and aside in info["checkpoint_error"]
        assert (path.parent / aside).read_text() == f"{{not json {n}"
        note = await ws.model_note()
        assert "No variables were restored" in note and aside in note
        await ws.stop(checkpoint=False, reason="test")
    assert (path.parent / "checkpoint.json.corrupt").read_text() == "{not json 1"
    info = await ws.ensure_started()  # nothing there now: no error
    assert info is not None and info["checkpoint_error"] is None


async def test_the_shutdown_stops_a_cell_run_by_hand_and_keeps_the_variables(manager, codebase):
    """Review22: SIGTERM while a cell sent with ``rlmd.workspace.exec`` ran: the shutdown
    waited for the cell up to its 30 s, then stopped the sandbox without a checkpoint, and
    every variable since the last one was lost; a cell queued behind it ran after the
    shutdown had begun. The running cell is now interrupted (its variables kept), the
    queued one is not run, and the checkpoint holds the variables."""
    from rlmd.sandbox.base import SandboxError
    from rlmd.sandbox.session import SandboxState

    ws = manager.get(codebase)

    async def exec_(code: str):  # as rlmd.workspace.exec does
        async with ws.hold(f"cell-{len(code)}"):
            return await ws.run_cell(code, timeout_s=600)

    await exec_("kept = 'set by hand'")
    running = asyncio.ensure_future(exec_("import time\nwhile True:\n    time.sleep(0.05)"))
    queued = asyncio.ensure_future(exec_("late = 'after the shutdown began'"))
    while ws.sandbox is None or ws.sandbox.state is not SandboxState.RUNNING:
        await asyncio.sleep(0.01)
    assert not queued.done()

    await manager.shutdown()
    result = await running
    assert "KeyboardInterrupt" in (result.error or "") and not result.kernel_restarted
    with pytest.raises(SandboxError, match="daemon is stopping: the cell was not run"):
        await queued
    path = ckpt.checkpoint_path(ws.folder)
    assert sorted(json.loads(path.read_text())["variables"]) == ["kept"]


async def test_a_value_nested_too_deep_to_read_back_is_not_saved(manager, codebase):
    """Review22: ``json.dumps`` nests as deep as the REPL's recursion limit allows, a fresh
    kernel's ``json.loads`` only to the default one: after ``sys.setrecursionlimit(20000)``
    a list nested 5000 deep was saved, and the restore failed as a whole ("maximum recursion
    depth exceeded while decoding a JSON array"), so no variable came back. Such a value is
    now skipped, saying why, and the others are restored."""
    ws = manager.get(codebase)
    nest = "def nest(n):\n    v = []\n    for _ in range(n):\n        v = [v]\n    return v\n"
    made = await ws.run_cell(
        nest + "import sys\nsys.setrecursionlimit(20000)\n"  # edge: within MAX_NESTING (500)
        "deep = nest(5000)\nloop = []\nloop.append(loop)\nedge = nest(499)\n"
        "shared = [nest(10)] * 3\nkept = 'a plain string'\n",
        timeout_s=60,
    )
    assert made.error is None
    saved = await ws.checkpoint()
    assert saved is not None and sorted(saved["variables"]) == ["edge", "kept", "shared"]
    assert "nested more than" in saved["skipped"]["deep"]
    assert "circular" in saved["skipped"]["loop"]
    await ws.stop(checkpoint=False, reason="test")
    info = await ws.ensure_started()
    assert info is not None and sorted(info["restored"]) == ["edge", "kept", "shared"]
    back = await ws.run_cell("print(kept, shared[2] == shared[0], len(edge))", timeout_s=30)
    assert back.stdout == "a plain string True 1\n"


async def test_a_checkpoint_of_many_variables_restores_and_is_told_in_short(manager, codebase):
    """Review22: the next task's system prompt named every restored variable (all 200,000 a
    cell of model code can make); it now names 40, as the list of the REPL's variables."""
    ws = manager.get(codebase)
    code = "globals().update({f'v{i}': i for i in range(20_000)})\n"
    code += "globals().update({f'f{i}': (lambda: 0) for i in range(300)})"  # not saveable
    made = await ws.run_cell(code, 60)
    assert made.error is None
    saved = await ws.checkpoint()
    # what the protocol carries is bounded: the first names by name and the counts
    first = sorted(f"v{i}" for i in range(20_000))[: ckpt.SUMMARY_NAMES]
    assert saved is not None and saved["variables"] == first
    assert saved["variables_total"] == 20_000 and saved["skipped_total"] == 300
    assert list(saved["skipped"]) == sorted(f"f{i}" for i in range(300))[: ckpt.SUMMARY_NAMES]
    assert manager.changes.data["checkpointed"] == saved
    on_disk = ckpt.load(ckpt.checkpoint_path(ws.folder))  # the file has them all
    assert on_disk is not None and len(on_disk.variables) == 20_000
    assert len(on_disk.skipped) == 300
    await ws.stop(checkpoint=False, reason="test")
    info = await ws.ensure_started()
    assert info is not None and len(info["restored"]) == 20_000
    assert len(ws.sandbox.bound.user_names) == 20_000  # what a kill would lose
    note = await ws.model_note()
    assert "v38, v39 and 19960 more." in note and "v40" not in note and len(note) < 4000


@pytest.mark.timeout(60)  # far more than one pass takes; the quadratic one took over an hour
@pytest.mark.parametrize("backend", ["subprocess", "inprocess"])
async def test_the_host_records_restored_variables_in_one_pass(backend, monkeypatch):
    """Review22: the host recorded each name a restore bound by looking it up in two lists,
    so a checkpoint of 200,000 variables (one cell of model code makes them) held the
    daemon's event loop, and every client with it, for ten minutes at the next start."""
    from rlmd.sandbox import create_sandbox

    sandbox = create_sandbox(backend)
    names = [f"v{i}" for i in range(500_000)]

    async def bound_all(request):  # the kernel's answer, without a kernel
        return {"restored": list(request["names"]), "missing": {}}

    if backend == "subprocess":
        monkeypatch.setattr(sandbox, "_op", bound_all)
    else:
        kernel = type("K", (), {"load_vars": lambda self, req: asyncio.run(bound_all(req))})()
        monkeypatch.setattr(sandbox, "_live", lambda: kernel)
    out = await sandbox.load_variables("values.json", names)
    assert len(out["restored"]) == 500_000 and sandbox.bound.user_names == names


def test_a_reset_removes_the_checkpoint_past_a_folder_named_like_a_values_file(
    tmp_path, monkeypatch
):
    """Review22: ``rlmd.workspace.reset`` answered ``-32603`` (IsADirectoryError) when a
    folder was named like a values file, after removing ``checkpoint.json`` but before the
    real values file, which stayed for good."""
    monkeypatch.setenv("RLMD_HOME", str(tmp_path / "home"))
    folder = tmp_path / "proj"
    path = ckpt.checkpoint_path(folder)
    saved = ckpt.Checkpoint(str(folder), variables={"a": {"type": "int"}}, values=b'{"a":1}')
    ckpt.save(saved, path)
    (path.parent / "values-0000000000000000.json").mkdir()
    ckpt.remove(folder)
    assert sorted(p.name for p in path.parent.iterdir()) == ["values-0000000000000000.json"]


async def test_a_command_that_waited_behind_a_close_says_the_workspace_was_closed(
    manager, codebase
):
    """Review22: an exec or open queued behind ``rlmd.workspace.close`` then tried to start
    the closed workspace and failed with "... was closed while its codebase was loading",
    although nothing was loading."""
    from rlmd.sandbox.base import SandboxError

    ws = manager.get(codebase)
    await ws.ensure_started()
    await manager.close(ws)
    with pytest.raises(SandboxError, match="was closed while this waited in line"):
        await ws.run_cell("print(1)", timeout_s=30)
    again = manager.get(codebase)  # a new command opens it anew
    assert again is not ws and (await again.run_cell("print(1)", timeout_s=30)).stdout == "1\n"


async def test_a_stopped_workspaces_listing_is_read_once_kept_a_while_then_dropped(
    tmp_path, monkeypatch
):
    """``rlmd.workspace.variables`` on a stopped workspace pages its checkpoint: the sorted
    listing is read once for a walk through the pages (200,000 descriptions take ~1.6 s),
    read again when the file changes, and dropped when unused (it holds ~75 MB then)."""
    from rlmd.workspace import listing as listing_mod

    reads: list[Path] = []
    read = listing_mod.read_listing
    monkeypatch.setattr(listing_mod, "read_listing", lambda p: reads.append(p) or read(p))
    paths = []
    for i in range(3):
        c = ckpt.Checkpoint(f"/p{i}")
        c.variables = {n: {"type": "int", "size": None, "preview": "1", "bytes": 1} for n in "cab"}
        c.values = b'{"a":1,"b":1,"c":1}'
        paths.append(tmp_path / f"w{i}" / "checkpoint.json")
        ckpt.save(c, paths[-1])
    listings = listing_mod.Listings(size=2, keep_s=0.3)
    first = await listings.get(paths[0])
    assert first is not None and first.names == ["a", "b", "c"]
    assert await listings.get(paths[0]) is first and reads == [paths[0]]
    c = ckpt.load(paths[0])
    assert c is not None
    c.variables["d"] = c.variables["a"]
    c.values = b'{"a":1,"b":1,"c":1,"d":1}'
    ckpt.save(c, paths[0])  # a new checkpoint: a new file
    again = await listings.get(paths[0])
    assert again is not None and again.names == ["a", "b", "c", "d"] and len(reads) == 2
    await listings.get(paths[1])
    await listings.get(paths[2])  # the least recently used (paths[0]) goes
    assert set(listings._entries) == {paths[1], paths[2]}
    await asyncio.sleep(0.6)
    assert listings._entries == {}  # dropped unused, with no call to notice it
    assert await listings.get(tmp_path / "none" / "checkpoint.json") is None

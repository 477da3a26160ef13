"""A run over a codebase that is still being read starts its own REPL meanwhile (issue 16:
the kernel's launch and hello were on the way to the first model request after the read).

Real subprocess REPLs; the read is held on an event, so the tests see the REPL start while
the load is known to be unfinished, with no timing assumption.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from helpers.scripted import repl, scripted_registry

import rlmd.context
from rlmd.context import PendingLoad
from rlmd.engine import Budget, RunConfig, run_task
from rlmd.sandbox import create_sandbox
from rlmd.sandbox.session import SandboxState


def _config() -> RunConfig:
    return RunConfig(root_model="root", sub_model="sub", budget=Budget())


@pytest.fixture
def held_read(monkeypatch):
    """Every codebase read waits for the returned event before it starts."""
    release = threading.Event()
    load = rlmd.context._load_path

    def held(path, stop=None, spool=None):
        release.wait(60)
        return load(path, stop, spool)

    monkeypatch.setattr(rlmd.context, "_load_path", held)
    yield release
    release.set()


def _registry(code: str):
    def model(messages):
        return repl(code)

    return scripted_registry(root=model, sub=model)


def _recording_factory():
    made = []

    def make():
        box = create_sandbox("subprocess", spare_kernel=False)
        made.append(box)
        return box

    return made, make


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _until(predicate) -> None:
    while not predicate():  # the test's own timeout bounds this
        await asyncio.sleep(0.02)


async def test_the_repl_starts_while_the_codebase_is_read_and_gets_it(codebase, held_read):
    made, make = _recording_factory()
    registry = _registry("FINAL(str(len(context)))")
    load = PendingLoad(codebase)
    task = asyncio.ensure_future(
        run_task("How many files?", load, _config(), get_model=registry.get, make_sandbox=make)
    )
    await _until(lambda: made and made[0].state is SandboxState.READY)  # started, read held
    assert not load._future.done()
    held_read.set()
    result = await asyncio.wait_for(task, 120)
    await registry.aclose()
    assert result.status == "completed" and result.answer == "5"
    assert len(made) == 1 and made[0].state is SandboxState.CLOSED  # the run closed its REPL


async def test_a_codebase_that_cannot_be_read_stops_the_repl_started_for_it(tmp_path, held_read):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # not a regular file or folder: the load refuses it
    made, make = _recording_factory()
    registry = _registry("FINAL('never')")
    task = asyncio.ensure_future(
        run_task("q", fifo, _config(), get_model=registry.get, make_sandbox=make)
    )
    await _until(lambda: made and made[0].pid is not None)
    pid = made[0].pid
    held_read.set()
    with pytest.raises(ValueError, match="not a regular file or folder"):
        await asyncio.wait_for(task, 120)
    await registry.aclose()
    assert made[0].state is SandboxState.CLOSED
    await _until(lambda: not _alive(pid))


@pytest.mark.parametrize("spool", [True, False], ids=["spooled", "not-spooled"])
async def test_cancelling_during_the_read_stops_the_repl_started_for_it(codebase, held_read, spool):
    made, make = _recording_factory()
    registry = _registry("FINAL('never')")
    load = PendingLoad(codebase, spool=spool)
    task = asyncio.ensure_future(
        run_task("q", load, _config(), get_model=registry.get, make_sandbox=make)
    )
    await _until(lambda: made and made[0].pid is not None)
    pid = made[0].pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await registry.aclose()
    assert made[0].state is SandboxState.CLOSED
    await _until(lambda: not _alive(pid))


async def test_a_repl_that_fails_to_start_fails_the_run_as_before(codebase, tmp_path):
    """The start's failure ends the run with a status and the kernel's message, not an
    exception out of run_task: as when the run started the REPL itself."""
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'no kernel here' >&2\nexit 5\n")
    fake_python.chmod(0o755)
    registry = _registry("FINAL('never')")

    def make():
        return create_sandbox("subprocess", python=str(fake_python), isolation="none")

    result = await run_task(
        "q", PendingLoad(codebase), _config(), get_model=registry.get, make_sandbox=make
    )
    await registry.aclose()
    assert result.status != "completed" and result.answer is None
    assert "no kernel here" in (result.error or "")


@pytest.mark.parametrize("pending", [True, False], ids=["codebase-being-read", "text"])
async def test_an_unknown_sub_model_stops_the_repl_started_for_the_run(codebase, pending):
    """The sub model is looked up once the REPL's start is under way: its KeyError closes
    that REPL (it was left starting, its kernel running, before)."""
    made, make = _recording_factory()
    registry = scripted_registry(root=lambda messages: repl("FINAL('never')"))
    config = RunConfig(root_model="root", sub_model="no-such-model", budget=Budget())
    context = PendingLoad(codebase) if pending else "some text"
    with pytest.raises(KeyError):
        await asyncio.wait_for(
            run_task("q", context, config, get_model=registry.get, make_sandbox=make), 120
        )
    await registry.aclose()
    assert len(made) == 1 and made[0].state is SandboxState.CLOSED
    if made[0].pid is not None:
        await _until(lambda: not _alive(made[0].pid))


@pytest.fixture
def bound_from_file(monkeypatch):
    """The contexts subprocess REPLs bound from a spooled file (a list of their paths)."""
    from rlmd.sandbox.session import SandboxSession

    seen: list[list[str]] = []
    real = SandboxSession.load_context_file

    async def spy(self, value, file, index_at):
        seen.append(list(value))
        return await real(self, value, file, index_at)

    monkeypatch.setattr(SandboxSession, "load_context_file", spy)
    return seen


async def test_a_codebase_read_while_the_repl_starts_is_bound_from_its_folder(
    codebase, held_read, bound_from_file
):
    """The files go into the REPL's folder as they are read; the kernel binds them from
    there, in the context's order, the moment the read ends."""
    made, make = _recording_factory()
    registry = _registry("FINAL(repr([(p, len(t)) for p, t in context.items()]))")
    load = PendingLoad(codebase, spool=True)
    task = asyncio.ensure_future(
        run_task("Which files?", load, _config(), get_model=registry.get, make_sandbox=make)
    )
    await _until(lambda: made and made[0].state is SandboxState.READY)  # started, read held
    held_read.set()
    result = await asyncio.wait_for(task, 120)
    await registry.aclose()
    expected = rlmd.context.load_codebase(codebase).value
    assert result.status == "completed"
    assert result.answer == repr([(p, len(t)) for p, t in expected.items()])
    assert bound_from_file == [list(expected)]
    assert made[0].state is SandboxState.CLOSED


@pytest.mark.parametrize("where", ["inprocess", "someone else's REPL"])
async def test_a_spool_nobody_can_use_is_given_up(codebase, bound_from_file, where):
    """An in-process REPL has no folder, and a REPL passed in was bound by its owner: the
    run binds the context the usual way and the spool lets its kept bytes go."""
    registry = _registry("FINAL(str(len(context)))")
    load = PendingLoad(codebase, spool=True)
    if where == "inprocess":
        result = await run_task(
            "q",
            load,
            _config(),
            get_model=registry.get,
            make_sandbox=lambda: create_sandbox("inprocess"),
        )
    else:
        box = create_sandbox("subprocess", spare_kernel=False)
        await box.start(lambda fn, args: None)
        await box.load_context({"only.py": "x = 1\n"}, codebase=True)
        try:
            result = await run_task("q", load, _config(), get_model=registry.get, sandbox=box)
        finally:
            await box.close()
    await registry.aclose()
    assert result.status == "completed"
    assert result.answer == ("5" if where == "inprocess" else "1")
    assert bound_from_file == []
    assert load.spool is not None and load.spool.finish(["pkg/core.py"]) is None


class _StubbornStart:
    """A REPL whose start ignores its first cancel until released (a kernel stopping
    slowly), recording whether it was closed."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.closed = False

    async def start(self, handler) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.release.wait()
            raise

    async def close(self) -> None:
        self.closed = True


async def test_a_second_cancel_while_the_start_stops_still_closes_the_repl():
    from rlmd.engine.loop import start_sandbox

    box = _StubbornStart()
    starting = start_sandbox(box)  # type: ignore[arg-type]
    await asyncio.sleep(0)  # the start is under way
    abandon = asyncio.ensure_future(starting.abandon())
    while not starting.started.cancelling():
        await asyncio.sleep(0)
    abandon.cancel()  # the second cancel, while the start is still stopping
    box.release.set()  # the start ends (gather waits for it even when cancelled)
    with pytest.raises(asyncio.CancelledError):
        await abandon
    assert starting.started.cancelled()
    assert box.closed

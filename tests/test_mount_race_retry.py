"""The kernel start retried after bwrap loses a race with a vanishing host mount: at most
three starts, only for that failure, and the last failure is what the caller sees."""

from __future__ import annotations

import pytest

from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.process import transport as transport_mod
from rlmd.sandbox.process.transport import ProcessTransport

RACE = "bwrap: Can't bind mount /oldroot/tmp/x on /newroot/tmp/x: No such file or directory"


def _transport(tmp_path, monkeypatch, messages: list[str]) -> tuple[ProcessTransport, list]:
    t = ProcessTransport(limits=Limits(), isolation="none", spare_kernel=False)
    t._workdir = str(tmp_path)  # a restart: no first process to take
    calls: list[str] = []

    async def relaunch():
        calls.append("launch")
        return object()

    async def attach(process, handler, cap, start_timeout_s):
        calls.append("attach")
        raise SandboxError(messages[min(calls.count("attach"), len(messages)) - 1])

    monkeypatch.setattr(t, "_relaunch", relaunch)
    monkeypatch.setattr(t, "_attach", attach)
    return t, calls


async def test_a_mount_race_that_never_ends_is_tried_three_times_then_raised(tmp_path, monkeypatch):
    t, calls = _transport(tmp_path, monkeypatch, [RACE, RACE, RACE + " (third)"])
    with pytest.raises(SandboxError, match=r"\(third\)"):
        await t.spawn(lambda *a: None, 1, 1.0)  # type: ignore[arg-type]
    assert (
        calls == ["launch", "attach"] * transport_mod._MOUNT_RACE_TRIES == ["launch", "attach"] * 3
    )


@pytest.mark.parametrize(
    "why",
    [
        "No such file or directory",  # the mount and its folder are gone
        "Invalid argument",  # the folder is still there, its mount is gone
    ],
)
async def test_both_ways_of_losing_the_race_are_tried_again(tmp_path, monkeypatch, why):
    race = (
        "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: "
        f'remount "/newroot/tmp/rlmd-sandbox-1-2-x": {why}'
    )
    t, calls = _transport(tmp_path, monkeypatch, [race, "started"])
    with pytest.raises(SandboxError, match="^started$"):  # the second start's own outcome
        await t.spawn(lambda *a: None, 1, 1.0)  # type: ignore[arg-type]
    assert calls == ["launch", "attach"] * 2


async def test_another_failure_is_raised_at_once_and_not_hidden_by_a_race_before_it(
    tmp_path, monkeypatch
):
    t, calls = _transport(tmp_path, monkeypatch, ["kernel died: MemoryError"])
    with pytest.raises(SandboxError, match="MemoryError"):
        await t.spawn(lambda *a: None, 1, 1.0)  # type: ignore[arg-type]
    assert calls == ["launch", "attach"]
    t, calls = _transport(tmp_path, monkeypatch, [RACE, "kernel died: MemoryError"])
    with pytest.raises(SandboxError, match="MemoryError"):
        await t.spawn(lambda *a: None, 1, 1.0)  # type: ignore[arg-type]
    assert calls == ["launch", "attach"] * 2

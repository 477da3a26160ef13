"""The kernel's cgroup-v1 join: the host moves bwrap's child in right after the clone
(``Launch.join_early``), the kernel checks before its hello and joins itself otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.sandbox_host import FakeHost, ok

from rlmd.sandbox import create_sandbox
from rlmd.sandbox.process import isolate
from rlmd.sandbox.process.launch import KERNEL_MAIN


def _kernel(*args: str, fd: int) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", KERNEL_MAIN, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        pass_fds=(fd,),
    )


def _own_group_name() -> str | None:
    """The last path component of a cgroup this process is in (not a root), if any."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            name = line.rstrip("\n").rpartition("/")[2]
            if name:
                return name
    return None


def test_a_kernel_already_in_its_groups_does_not_join_again():
    """Moved by the host (here: a group this process is already in), the kernel only closes
    the descriptors: one it could not write does not stop it. A name it is not in: it
    writes, and a write that fails still ends it with 71 before its hello."""
    name = _own_group_name()
    if name is None:
        pytest.skip("this process is in no named cgroup")
    fd = os.open(os.devnull, os.O_RDONLY)  # a write to it fails
    try:
        moved = _kernel("--cgroup-fd", str(fd), "--cgroup-name", name, fd=fd)
        not_moved = _kernel("--cgroup-fd", str(fd), "--cgroup-name", "0123456789abcdef", fd=fd)
        # Two descriptors of one group it is in once: not all joined, so it writes.
        twice = _kernel(
            "--cgroup-fd", str(fd), "--cgroup-fd", str(fd), "--cgroup-name", name, fd=fd
        )
    finally:
        os.close(fd)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout[4:].startswith(b'{"op":"hello"')
    for proc in (not_moved, twice):
        assert proc.returncode == 71
        assert b"could not join its cgroup" in proc.stderr
        assert b"hello" not in proc.stdout


def test_the_host_moves_the_pid_bwrap_reports(tmp_path):
    """bwrap's info (its child's host pid) is read to the object's end and the pid written
    to each group's ``cgroup.procs``; info without a valid pid writes nothing."""
    procs = [tmp_path / "memory.procs", tmp_path / "pids.procs"]
    for path in procs:
        path.write_text("")
    r, w = os.pipe()
    os.write(w, b'{\n    "child-pid": 4242\n}\n')
    # The write end stays open (a process forked meanwhile may hold a copy): the object's
    # end is enough.
    isolate._move_sandboxed(r, [str(p) for p in procs])
    os.close(w)
    assert [p.read_text() for p in procs] == ["4242", "4242"]
    for info in (b"", b"{", b'{"child-pid": "4242"}', b'{"child-pid": true}', b'{"child-pid": 1}'):
        for path in procs:
            path.write_text("")
        r, w = os.pipe()
        os.write(w, info)
        os.close(w)
        isolate._move_sandboxed(r, [str(p) for p in procs])
        assert [p.read_text() for p in procs] == ["", ""], info
    with pytest.raises(OSError):
        os.fstat(r)  # the read end is closed either way


async def test_the_hardened_kernel_runs_in_its_groups_with_no_cgroup_file_open():
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(FakeHost())
    try:
        launch = box._kernel.launch
        if launch.wrapper != "bwrap" or not launch.cgroups:
            pytest.skip("no bwrap sandbox with cgroups here")
        assert launch.info_fd is None  # handed to the mover, which closed it
        await ok(box, "x = 1")
        pid = box._kernel.kernel_pid()
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
        for path in launch.cgroups:
            controller = path.split("/")[4]
            name = os.path.basename(path)
            assert any(f":{controller}:" in line and line.endswith("/" + name) for line in lines)
        fds = os.listdir(f"/proc/{pid}/fd")
        targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds]
        assert not any("cgroup" in t for t in targets), targets
    finally:
        await box.close()

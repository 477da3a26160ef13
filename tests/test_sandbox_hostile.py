"""Hostile model code, run against every sandbox backend that can start here.

Each case must end with this process (the host) alive and untouched, a clear message to the
model, and the sandbox usable for the next cell. A backend that documents it cannot contain
a case lists it in ``Sandbox.uncontained`` (the in-process backend: most of them; the
subprocess backend: those its isolation could not cover on this machine); the case is then
skipped with the reason printed, never silently passed. New backends in
``rlmd.sandbox.BACKENDS`` are picked up automatically.

Limits are small (256 MiB, 2 s, 64 processes) so the suite stays fast on a shared machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.sandbox_host import FakeHost
from helpers.scripted import repl, scripted_registry, turn_of

from rlmd.sandbox import BACKENDS, create_sandbox, files, unavailable_reason
from rlmd.sandbox.base import CellResult, Sandbox
from rlmd.sandbox.limits import Limits, MiB

LIMITS = Limits(
    wall_s=2.0,
    memory_bytes=256 * MiB,
    processes=64,
    open_files=256,
    file_size_bytes=8 * MiB,
    disk_bytes=32 * MiB,
    output_bytes=1 * MiB,
    network=False,
)

KEY_ENV = "RLMD_HOSTILE_FAKE_API_KEY"

EXPECT_ISOLATION = os.environ.get("RLMD_EXPECT_ISOLATION")
"""CI pins the wrapper the subprocess sandbox must get here (``bwrap``, ``unshare`` or
``none``): when detection regresses, the suite fails instead of skipping cases."""


def expected_isolation_or_fail(record: dict[str, Any]) -> None:
    got = record.get("wrapper") or "none"
    if EXPECT_ISOLATION and got != EXPECT_ISOLATION:
        pytest.fail(
            f"RLMD_EXPECT_ISOLATION={EXPECT_ISOLATION} but the subprocess sandbox got {got!r}: "
            "isolation detection regressed (or the machine lost bwrap/unshare)"
        )


def make(name: str) -> Sandbox:
    """A sandbox of backend ``name`` with the suite's limits (a short interrupt grace where
    the backend takes one)."""
    try:
        return create_sandbox(name, limits=LIMITS, interrupt_grace_s=0.5)
    except TypeError:
        return create_sandbox(name, limits=LIMITS)


@pytest.fixture(params=BACKENDS)
async def sb(request, monkeypatch):
    reason = unavailable_reason(request.param)
    if reason is not None:
        if EXPECT_ISOLATION and request.param == "subprocess":
            pytest.fail(f"RLMD_EXPECT_ISOLATION is set but subprocess cannot start: {reason}")
        pytest.skip(f"{request.param} cannot start here: {reason}")
    # A key-shaped secret in the host's environment, made at run time.
    monkeypatch.setenv(KEY_ENV, "sk-" + secrets.token_hex(16))
    box = make(request.param)
    await box.start(FakeHost())
    if request.param == "subprocess":
        expected_isolation_or_fail(box.isolation)
    yield box
    await box.close()


def test_the_subprocess_sandbox_gets_the_isolation_ci_pins():
    """Read from the sandbox's own ``isolation`` record, the one the trajectory stores."""
    if not EXPECT_ISOLATION:
        pytest.skip("RLMD_EXPECT_ISOLATION is not set (scripts/test.sh sets it)")
    got = make("subprocess").isolation.get("wrapper") or "none"
    assert got == EXPECT_ISOLATION, (
        f"RLMD_EXPECT_ISOLATION={EXPECT_ISOLATION} but the subprocess sandbox got {got!r}: "
        "isolation detection regressed (or the machine lost bwrap/unshare)"
    )


def test_a_normal_user_gets_the_limits_root_gets_or_is_told_which_not():
    """Issue 11 #5: as a normal user without cgroups, 600 processes got past a limit of 256
    and 3 GB went into tmpfs past 2 GiB. scripts/test-nonroot.sh sets RLMD_EXPECT_NONROOT."""
    if not os.environ.get("RLMD_EXPECT_NONROOT"):
        pytest.skip("RLMD_EXPECT_NONROOT is not set (scripts/test-nonroot.sh sets it)")
    assert os.geteuid() != 0
    record = make("subprocess").isolation
    enforced = record["enforced"]
    if record["wrapper"] is None:
        pytest.fail(f"no namespaces for a normal user here: {record.get('unavailable')}")
    assert enforced["processes"] is not None  # cgroup pids if delegated, else RLIMIT_NPROC
    assert enforced["disk_bytes"].startswith("host watch")
    if record["wrapper"] == "bwrap" and "cgroup memory" not in enforced["memory_bytes"]:
        assert "tmpfs" in enforced["memory_bytes"]
        tmpfs = sum(record["tmpfs_bytes"].values())
        assert record["rlimits"]["AS"] + tmpfs <= LIMITS.memory_bytes + MiB * 16
    for controller in ("memory", "pids"):  # each either used or explained
        cgroup = record["cgroup"] or {"controllers": []}
        assert controller in cgroup["controllers"] or f"cgroup {controller}" in record.get(
            "unavailable", {}
        )


def contained_or_skip(box: Sandbox, case: str) -> None:
    if case in box.uncontained:
        pytest.skip(f"{box.kind} documents that it cannot contain {case!r}")


async def usable(box: Sandbox) -> None:
    """The host is alive (we are running) and the sandbox runs the next cell."""
    r = await box.execute("print('still usable', 6 * 7)", timeout_s=30)
    assert r.error is None, r.error
    assert r.stdout == "still usable 42\n"


async def cell(box: Sandbox, code: str) -> CellResult:
    return await box.execute(code)


# --------------------------------------------------------------------------- runaway code


async def test_infinite_loop(sb):
    contained_or_skip(sb, "infinite_loop")
    await sb.execute("kept = 'yes'")
    r = await cell(sb, "while True:\n    pass")
    assert r.timed_out
    assert "wall-clock time limit 2 s exceeded" in r.error
    await usable(sb)


async def test_a_namespace_key_that_is_not_a_string(sb):
    # globals()[1] = 2 made the kernel's end-of-cell scan fail: the subprocess kernel
    # restarted, the in-process sandbox raised on every later cell.
    await sb.execute("kept = 'yes'")
    r = await cell(sb, "globals()[1] = 2\nglobals()[('t',)] = 3\ny = 4")
    assert r.error is None, r.error
    await usable(sb)
    names = {v.name for v in await sb.list_variables()}
    assert {"kept", "y"} <= names and all(isinstance(n, str) for n in names)
    out = await sb.save_variables(["kept", "y"], ".v.json", max_var_bytes=100, max_total_bytes=999)
    assert set(out["saved"]) == {"kept", "y"}


async def test_huge_integer_power(sb):
    contained_or_skip(sb, "c_level_loop")
    # CPython checks for signals inside long multiplication, so this one can be interrupted
    # (state kept) on backends that interrupt; others restart. Either way it ends.
    r = await cell(sb, "x = 10 ** 10 ** 8")
    assert r.timed_out
    assert "wall-clock time limit 2 s exceeded" in r.error
    await usable(sb)


async def test_c_level_loop_that_never_yields(sb):
    contained_or_skip(sb, "c_level_loop")
    await sb.execute("lost_one = 1")
    r = await cell(sb, "sum(range(10 ** 14))")  # no signal check until it returns
    assert r.timed_out and r.kernel_restarted
    assert "wall-clock time limit 2 s exceeded" in r.error
    assert "restarted" in r.error and "lost_one" in r.lost_variables
    await usable(sb)


async def test_memory_bomb(sb):
    contained_or_skip(sb, "memory_bomb")
    r = await cell(sb, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 2**20))")
    assert "memory limit 256 MiB exceeded" in r.error
    await usable(sb)


async def test_fork_bomb(sb):
    contained_or_skip(sb, "fork_bomb")
    r = await cell(sb, "import os\nwhile True:\n    os.fork()")
    assert r.error is not None
    assert "process count limit 64 exceeded" in r.error or r.timed_out
    await usable(sb)
    r = await sb.execute(
        "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit()))", timeout_s=30
    )
    assert int(r.stdout) < 8  # the bomb's processes are gone


async def test_output_flood(sb):
    contained_or_skip(sb, "output_flood")
    r = await cell(sb, "for _ in range(300):\n    print('x' * 2**20)")  # 300 MB
    assert len(r.stdout) < 2 * MiB
    assert "output truncated" in r.stdout
    await usable(sb)


async def test_fd_level_output_flood(sb):
    contained_or_skip(sb, "fd_output_flood")
    r = await cell(sb, "import os\nfor _ in range(200):\n    os.write(1, b'y' * 2**20)")
    assert len(r.stdout) + len(r.stderr) < 4 * MiB
    assert "truncated" in r.stdout + r.stderr
    await usable(sb)


async def test_huge_file(sb):
    contained_or_skip(sb, "huge_file")
    r = await cell(
        sb,
        "with open('huge.bin', 'wb') as f:\n    for _ in range(64):\n        f.write(b'z' * 2**20)",
    )
    assert "file size limit 8 MiB exceeded" in r.error
    await usable(sb)
    assert len(await sb.download("huge.bin")) <= 8 * MiB


async def test_filling_the_working_folder(sb):
    """Issue 11 #5: one cell wrote 2.6 GB in the working folder, on the host's root file
    system. The folder is a tmpfs of ``disk_bytes`` (root) or watched by the host (others)."""
    contained_or_skip(sb, "fill_disk")
    r = await cell(
        sb,
        "import time\nfor i in range(400):\n"
        "    open(f'fill{i}.bin', 'wb').write(b'd' * 2**20)\n    time.sleep(0.005)",
    )
    assert r.error is not None and "working folder size limit 32 MiB exceeded" in r.error, r.error
    assert not r.timed_out
    names = (await sb.execute("import glob\nprint(len(glob.glob('fill*.bin')))")).stdout
    assert 16 <= int(names) < 200  # stopped near the cap, not at 400 MiB
    r = await sb.execute("import glob, os\nfor f in glob.glob('fill*.bin'): os.remove(f)")
    assert r.error is None, r.error
    await usable(sb)


async def test_filling_the_sandbox_tmp(sb):
    """Issue 11 #5: as a normal user 3 GB went into the sandbox's tmpfs past a 2 GiB
    memory limit. Its tmpfs folders have sizes, counted in the memory limit."""
    contained_or_skip(sb, "fill_disk")
    if sb.kind != "subprocess" or sb.isolation.get("wrapper") != "bwrap":
        pytest.skip("only the bwrap sandbox mounts its own /tmp")
    sizes = sb.isolation["tmpfs_bytes"]
    assert sum(sizes.values()) <= LIMITS.memory_bytes // 4 + len(sizes) * MiB
    r = await cell(
        sb,
        "n = 0\ntry:\n    for i in range(200):\n"
        "        with open(f'/tmp/fill{i}.bin', 'wb') as f:\n            f.write(b't' * 2**20)\n"
        "        n += 1\nexcept OSError as e:\n    print(n, e.errno)",
    )
    n, errno = r.stdout.split()
    assert errno == "28" and int(n) * MiB <= sizes["/tmp"]
    await usable(sb)


async def test_filling_a_watched_working_folder(monkeypatch):
    """Where no tmpfs can be mounted (a normal user), the host watches the folder and stops
    the cell past the cap; the record says so."""
    from rlmd.sandbox import workdirs

    monkeypatch.setattr(workdirs, "can_mount", lambda: False)
    box = create_sandbox("subprocess", limits=LIMITS, spare_kernel=False)
    await box.start(FakeHost())
    try:
        assert box.isolation["enforced"]["disk_bytes"].startswith("host watch")
        assert not workdirs.capped(box.workdir)
        await test_filling_the_working_folder(box)
    finally:
        await box.close()


def test_a_cgroup_parent_this_user_cannot_write_is_not_used(tmp_path, monkeypatch):
    """Issue 11 #10: once root had used rlmd on a cgroup-v1 host, every run of another
    user failed with ``Permission denied`` under ``/sys/fs/cgroup/memory/rlmd``. Here the
    parent exists but groups cannot be made in it (a read-only mount stands for another
    user's folder): the sandbox starts without that controller and says why."""
    from rlmd.sandbox.process import isolate

    if os.geteuid() != 0:
        pytest.skip("needs root to mount the stand-in")
    root = tmp_path / "cgroup"
    for controller in ("memory", "pids"):
        (root / controller / isolate.cgroup_parent()).mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(root)], check=True)
        monkeypatch.setattr(isolate, "CGROUP_ROOT", str(root))
        monkeypatch.setattr(isolate, "_CGROUP_PROBLEMS", {})
        isolate.cgroup_controllers.cache_clear()
        iso = isolate.Isolation(isolate.IsolationConfig(limits=LIMITS))
        assert iso.controllers == ()
        launch = iso.launch(["/bin/true"], str(tmp_path))  # raised EROFS/EACCES before
        launch.close_fds()
        record = iso.record()
        assert "delegate" in record["unavailable"]["cgroup memory"]
        assert record["enforced"]["processes"] != "cgroup pids"
    finally:
        isolate.cgroup_controllers.cache_clear()
        subprocess.run(["umount", "-l", str(root)], check=False)


# --------------------------------------------------------------------------- exits and kills


async def test_sys_exit(sb):
    contained_or_skip(sb, "sys_exit")
    await sb.execute("kept = 1")
    r = await cell(sb, "import sys\nsys.exit(1)")
    assert "SystemExit" in r.error and "does not end the session" in r.error
    assert not r.kernel_restarted
    await usable(sb)


async def test_os_exit(sb):
    contained_or_skip(sb, "os_exit")
    await sb.execute("lost_one = 1")
    r = await cell(sb, "import os\nos._exit(1)")
    assert r.kernel_restarted and "restarted" in r.error
    assert "lost_one" in r.lost_variables
    await usable(sb)


async def test_kill_the_parent(sb):
    contained_or_skip(sb, "kill_parent")
    r = await cell(sb, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('done')")
    assert os.getpid()  # we are still here
    await usable(sb)
    assert r.error is None or "restarted" in r.error


async def test_segfault_through_ctypes(sb):
    contained_or_skip(sb, "ctypes")
    r = await cell(sb, "import ctypes\nctypes.string_at(0)")
    assert r.kernel_restarted and "restarted" in r.error
    await usable(sb)


async def test_privileged_calls_through_ctypes_fail(sb):
    contained_or_skip(sb, "ctypes")
    r = await cell(
        sb,
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x20000), libc.mount(b'none', b'/mnt', b'tmpfs', 0, None))",
    )
    assert r.error is None, r.error
    assert r.stdout == "-1 -1\n"
    await usable(sb)


# --------------------------------------------------------------------------- escapes


USERNS_ATTACK = """
import ctypes, errno, os, struct, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NEW = 0x10000000 | 0x40000000  # CLONE_NEWUSER | CLONE_NEWNET

def outcome(pid):
    if pid == 0:  # the child, in its new namespaces
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        return 'made a namespace'
    return errno.errorcode[ctypes.get_errno()]

clone = outcome(libc.syscall(56, NEW | 17, 0, 0, 0, 0))  # 17: SIGCHLD
args = ctypes.create_string_buffer(struct.pack('8Q', NEW, 0, 0, 0, 17, 0, 0, 0))
clone3 = outcome(libc.syscall(435, args, 64))
print('clone', clone, 'clone3', clone3)
seen = []
t = threading.Thread(target=seen.append, args=('thread ran',))
t.start(); t.join()
print(seen[0], subprocess.run([sys.executable, '-c', 'print(6 * 7)'],
                             capture_output=True, text=True).stdout.strip())
"""


async def test_making_a_user_namespace_with_clone_or_clone3_through_ctypes_fails(sb):
    """``unshare`` was blocked but ``clone``/``clone3`` with ``CLONE_NEWUSER|CLONE_NEWNET``
    gave model code a user and network namespace with every capability in them. Threads
    and subprocesses (which use ``clone3``, then ``clone``) must still work."""
    contained_or_skip(sb, "ctypes")
    contained_or_skip(sb, "user_namespace")
    r = await cell(sb, USERNS_ATTACK)
    assert r.error is None, r.error
    words = r.stdout.splitlines()[0].split()  # clone <outcome> clone3 <outcome>
    # Docker's default profile answers a namespace flag on clone with EPERM or ENOSYS
    # (by version); ours with EPERM. Either way no namespace was made.
    assert words[1] in ("EPERM", "ENOSYS") and words[3] == "ENOSYS", r.stdout
    assert r.stdout.endswith("\nthread ran 42\n"), r.stdout
    await usable(sb)


async def test_network_connection(sb):
    contained_or_skip(sb, "network")
    r = await cell(
        sb, "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1).close()"
    )
    assert r.error is not None
    assert "OSError" in r.error or "timed out" in r.error or "gaierror" in r.error
    await usable(sb)


async def test_environment_has_no_keys(sb):
    contained_or_skip(sb, "env_keys")
    secret = os.environ[KEY_ENV]
    r = await cell(sb, "import os\nprint(sorted(os.environ))\nprint(dict(os.environ))")
    assert r.error is None, r.error
    assert secret not in r.stdout and KEY_ENV not in r.stdout
    await usable(sb)


async def test_proc_environ_of_host_processes(sb):
    contained_or_skip(sb, "proc_environ")
    # A host process whose environment block really holds the key (putenv in this process
    # does not change its /proc/PID/environ).
    holder = subprocess.Popen(["sleep", "60"], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until sleep has been exec'd
            with open(f"/proc/{holder.pid}/environ", "rb") as f:
                if f"{KEY_ENV}=".encode() in f.read():
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the holder process never showed the key in its environ")
        code = (
            "import glob\nhits = []\n"
            f"for path in glob.glob('/proc/*/environ') + ['/proc/{holder.pid}/environ']:\n"
            "    try:\n"
            "        data = open(path, 'rb').read()\n"
            "    except OSError:\n"
            "        continue\n"
            f"    if b'{KEY_ENV}=' in data:\n"
            "        hits.append(path)\n"
            "print(hits)"
        )
        r = await cell(sb, code)
    finally:
        holder.kill()
        holder.wait()
    assert r.error is None, r.error
    assert r.stdout == "[]\n"
    await usable(sb)


@pytest.fixture
def home_marker():
    """A file with a random name and content in the user's home, removed afterwards."""
    home = os.path.expanduser("~")
    path = os.path.join(home, f".rlmd-hostile-{secrets.token_hex(6)}")
    content = secrets.token_hex(16)
    try:
        with open(path, "w") as f:
            f.write(content)
    except OSError as exc:
        pytest.skip(f"cannot write a marker in the home folder: {exc}")
    yield path, content
    os.unlink(path)


async def test_home_folder_is_hidden(sb, home_marker):
    contained_or_skip(sb, "read_home")
    path, content = home_marker
    code = (
        f"import os\nhome = {os.path.dirname(path)!r}\n"
        "try:\n    print(sorted(os.listdir(home)))\nexcept OSError as e:\n    print('no home', e)\n"
        f"try:\n    print(open({path!r}).read())\nexcept OSError as e:\n    print('unreadable', type(e).__name__)"
    )
    r = await cell(sb, code)
    assert r.error is None, r.error
    assert content not in r.stdout and os.path.basename(path) not in r.stdout
    await usable(sb)


@pytest.fixture
def rlmd_home_outside(monkeypatch):
    """``$RLMD_HOME`` in a folder outside the home, /tmp and /run (as in
    ``RLMD_HOME=/var/lib/rlmd``), made readable to the sandbox's uid, with a marker file and
    a listening socket at ``run/rlmd.sock``; ``(home, marker name, socket path)``."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for base in ("/var/lib", "/srv", repo):
        if os.access(base, os.W_OK) and not base.startswith(("/home", "/root", "/tmp")):
            break
    else:
        pytest.skip("no writable folder outside the home, /tmp and /run")
    home = tempfile.mkdtemp(prefix="rlmd-hostile-home-", dir=base)
    marker = f"marker-{secrets.token_hex(6)}"
    open(os.path.join(home, marker), "w").close()
    os.mkdir(os.path.join(home, "run"))
    path = os.path.join(home, "run", "rlmd.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    for p in (home, os.path.join(home, "run")):  # what a same-uid sandbox could pass
        os.chmod(p, 0o755)
    os.chmod(path, 0o777)
    monkeypatch.setenv("RLMD_HOME", home)
    yield home, marker, path
    server.close()
    shutil.rmtree(home)


async def test_an_rlmd_home_outside_the_hidden_folders_and_its_socket_are_hidden(
    rlmd_home_outside,
):
    """Found by the hostile review: with ``RLMD_HOME=/var/lib/rlmd`` model code listed the
    rlmd home and connected to the daemon's socket (a read-only bind does not stop
    ``connect()``), then asked the daemon for an in-process workspace."""
    home, marker, sock = rlmd_home_outside
    reason = unavailable_reason("subprocess")
    if reason is not None:
        pytest.skip(f"subprocess cannot start here: {reason}")
    box = create_sandbox("subprocess", limits=LIMITS, spare_kernel=False)  # made now
    await box.start(FakeHost())
    try:
        contained_or_skip(box, "read_home")
        code = (
            "import os, socket\n"
            f"try:\n    print(sorted(os.listdir({home!r})))\n"
            "except OSError as e:\n    print('no home', type(e).__name__)\n"
            f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({sock!r})\n"
            "    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)"
        )
        r = await cell(box, code)
        assert r.error is None, r.error
        assert marker not in r.stdout and "run" not in r.stdout.splitlines()[0]
        assert "connected" not in r.stdout and "refused" in r.stdout
        await usable(box)
    finally:
        await box.close()


async def test_writing_outside_the_working_folder(sb):
    contained_or_skip(sb, "write_outside")
    target = f"/usr/rlmd-hostile-{secrets.token_hex(6)}"
    r = await cell(sb, f"open({target!r}, 'w').write('pwned')")
    assert r.error is not None and "OSError" in r.error
    assert not os.path.exists(target)
    await usable(sb)


async def test_planted_symlinks_and_fifos_in_the_working_folder(sb, tmp_path):
    """Found by the hostile fresh-user test: the host wrote a large context through a
    symlink planted at its fixed file name (overwriting a root-owned host file), and a FIFO at
    the next predictable name hung the host in ``open()`` while re-binding after a restart."""
    contained_or_skip(sb, "write_outside")
    victim = tmp_path / "VICTIM"
    victim.write_text("original")
    text = "line of context\n" * 70_000  # > 1 MiB: bound through a file
    await sb.load_context(text)
    names = [".rlmd-context.text", ".rlmd-context.json"] + [f".rlmd-context-{i}" for i in range(8)]
    plant = (
        "import os\n"
        f"for name in {names!r}:\n"
        f"    os.symlink({str(victim)!r}, name)\n"
        "os.mkfifo('fifo')\n"
        "os.symlink('/etc/hostname', 'link')\n"
        "print('planted', len(os.listdir('.')))"
    )
    r = await cell(sb, plant)
    assert r.error is None, r.error
    await asyncio.wait_for(sb.restart(), 60)  # re-binds the context: writes it again
    r = await cell(sb, "print(len(context), context[:15])")
    assert r.stdout == f"{len(text)} line of context\n", (r.stdout, r.error)
    assert victim.read_text() == "original"
    for bad in ("fifo", "link"):  # neither blocks nor follows: a clear error
        with pytest.raises((ValueError, OSError)):
            await asyncio.wait_for(sb.upload(bad, b"data"), 10)
        with pytest.raises((ValueError, OSError)):
            await asyncio.wait_for(sb.download(bad), 10)
    assert open("/etc/hostname").read() != "data"
    await usable(sb)


SWAP_TRIES = 2000


@contextlib.contextmanager
def swapping(folder: str, outside: Path) -> Iterator[None]:
    """While in the block, a thread keeps turning ``folder`` into a real folder, a symlink
    to ``outside`` and nothing, as fast as it can."""
    trash = folder + ".trash"
    os.mkdir(trash)
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            with contextlib.suppress(OSError):
                os.mkdir(folder)
            with contextlib.suppress(OSError):
                os.rename(folder, os.path.join(trash, str(i)))
            with contextlib.suppress(OSError):
                os.symlink(outside, folder)
            with contextlib.suppress(OSError):
                os.unlink(folder)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        yield
    finally:
        stop.set()
        swapper.join()


def test_swapping_a_folder_for_a_symlink_when_the_kernel_has_no_openat2(tmp_path, monkeypatch):
    """The component-by-component ``O_NOFOLLOW`` walk used where ``openat2`` is missing
    holds against the same race."""
    monkeypatch.setattr(files, "_openat2_works", False)
    root, outside = tmp_path / "work", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("outside")
    read_outside = 0
    with swapping(str(root / "d"), outside):
        for _ in range(SWAP_TRIES):
            with contextlib.suppress(ValueError, OSError):
                files.upload_file(str(root), "d/planted", b"pwned")
            with contextlib.suppress(ValueError, OSError):
                read_outside += files.download_file(str(root), "d/secret") == b"outside"
    assert sorted(os.listdir(outside)) == ["secret"]
    assert read_outside == 0
    files.upload_file(str(root), "e/f/g.txt", b"made")  # and the walk still works
    assert files.download_file(str(root), "e/f/g.txt") == b"made"


async def test_swapping_a_folder_for_a_symlink_outside_during_upload_and_download(sb, tmp_path):
    """Found by the hostile review: swapping ``d/`` for a symlink to ``/etc`` between the
    host's path check and its open let a root host read ``/etc/shadow`` and create a file in
    ``/etc``. A thread swaps ``d`` (folder, symlink to a folder outside, nothing) as fast as
    it can while the host uploads to and downloads from ``d/``: nothing outside is ever
    written or read, however the race falls."""
    contained_or_skip(sb, "write_outside")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = secrets.token_hex(16)
    (outside / "secret").write_text(secret)
    await sb.upload("marker", b"here")
    assert sb.workdir is not None
    root = next(
        f
        for f in (sb.workdir, os.path.join(sb.workdir, "work"))
        if os.path.isfile(os.path.join(f, "marker"))
    )
    read_outside = 0
    with swapping(os.path.join(root, "d"), outside):
        for _ in range(SWAP_TRIES):
            with contextlib.suppress(ValueError, OSError):
                await sb.upload("d/planted", b"pwned")
            with contextlib.suppress(ValueError, OSError):
                read_outside += secret.encode() in await sb.download("d/secret")
    assert sorted(os.listdir(outside)) == ["secret"]
    assert read_outside == 0
    await usable(sb)


# --------------------------------------------------------------------------- the REPL itself


async def test_a_hostile_repr_does_not_turn_a_finished_cell_into_a_timeout(sb):
    """Found by the hostile review: the variable preview after a cell called a ``__repr__``
    that never returns inside the cell's time, so a finished cell timed out and its output
    was lost. The preview is cut on its own bound; the output and the REPL are kept."""
    await sb.execute("kept = 1")
    r = await cell(
        sb,
        "class Hostile:\n    def __repr__(self):\n        while True:\n            pass\n"
        "h = Hostile()\nprint('finished')",
    )
    assert r.error is None and not r.timed_out and not r.kernel_restarted, r.error
    assert r.stdout == "finished\n"
    (info,) = [v for v in r.variables if v.name == "h"]
    assert info.type == "Hostile" and "preview cut" in info.preview
    r = await cell(sb, "print(kept)")
    assert r.stdout == "1\n"
    names = {v.name: v for v in await sb.list_variables()}  # the same bound when listing
    assert "preview cut" in names["h"].preview


async def test_a_thread_left_by_an_earlier_cell_cannot_give_the_answer(sb):
    """Found by the hostile review: a background thread left by one cell called ``FINAL()``
    during a later cell and became the run's answer."""
    r = await cell(
        sb,
        "import threading\ngo, fin, why = threading.Event(), threading.Event(), []\n"
        "def later():\n    go.wait()\n    try:\n        FINAL('hijacked')\n"
        "    except RuntimeError as e:\n        why.append(str(e))\n"
        "    finally:\n        fin.set()\n"
        "threading.Thread(target=later, daemon=True).start()",
    )
    assert r.error is None and r.final is None, r.error
    r = await cell(sb, "go.set()\nprint('thread done', fin.wait(60), why)")
    assert r.stdout.startswith("thread done True"), (r.stdout, r.error)
    assert "an earlier cell left running" in r.stdout
    assert r.final is None
    r = await cell(  # a thread the answering cell starts itself may answer
        sb,
        "t = threading.Thread(target=FINAL, args=('from this cell',))\nt.start()\nt.join()",
    )
    assert r.final == "from this cell", r.error


async def test_a_thread_left_by_an_earlier_cell_cannot_print_into_a_later_cells_output(sb):
    """Left open by session 11, found by review12b: what a thread an earlier cell started
    printed while a later cell ran was mixed into that cell's stdout, as if the cell had
    printed it. It goes to the cell's stderr now, after a label saying where it came from;
    the cell's stdout is its own (and threads it starts itself still print into it)."""
    if sb.kind == "inprocess":
        pytest.skip("in-process cells capture their own thread only: others write to rlmd's")
    r = await cell(
        sb,
        "import sys, threading, time\ngo, fin = threading.Event(), threading.Event()\n"
        "def later():\n    go.wait()\n    print('stale out')\n"
        "    print('stale err', file=sys.stderr)\n    fin.set()\n"
        "threading.Thread(target=later, daemon=True).start()\nprint('started')",
    )
    assert (r.error, r.stdout) == (None, "started\n")
    r = await cell(
        sb,
        "print('mine 1')\nsys.stderr.write('own err')\ngo.set()\nassert fin.wait(60)\n"
        "t = threading.Thread(target=print, args=('from a thread of this cell',))\n"
        "t.start()\nt.join()\nprint('mine 2')",
    )
    assert r.error is None, r.error
    assert r.stdout == "mine 1\nfrom a thread of this cell\nmine 2\n"
    assert r.stderr == (
        "own err\n[rlmd: written during this cell by a thread an earlier cell left "
        "running:]\nstale out\nstale err\n"
    )
    r = await cell(sb, "print('next')")
    assert (r.stdout, r.stderr) == ("next\n", "")


async def test_overwriting_the_helpers(sb):
    contained_or_skip(sb, "overwrite_helpers")
    r = await cell(
        sb,
        "llm_query = lambda *a, **k: 'evil'\nFINAL = print\nFINAL_VAR = 1\ndel SHOW_VARS",
    )
    assert r.error is None, r.error
    assert {"llm_query", "FINAL", "FINAL_VAR", "SHOW_VARS"} <= set(r.restored)
    r = await sb.execute("print(llm_query('q'))\nFINAL('done')")
    assert r.stdout == "answer to q\n" and r.final == "done"


async def test_closing_the_channel(sb):
    contained_or_skip(sb, "close_channel")
    await sb.execute("lost_one = 1")
    r = await cell(
        sb,
        "import os\nfor fd in range(3, 1024):\n    try:\n        os.close(fd)\n"
        "    except OSError:\n        pass\nimport time\ntime.sleep(0.5)",
    )
    assert r.kernel_restarted and "restarted" in r.error
    await usable(sb)


async def test_corrupting_the_channel(sb):
    contained_or_skip(sb, "close_channel")
    r = await cell(
        sb,
        "import os\nfor fd in range(0, 1024):\n    try:\n"
        "        os.write(fd, b'\\x00\\x00\\x00\\x05garbage{not json')\n"
        "    except OSError:\n        pass\nprint('wrote')",
    )
    # Either the garbage never reached the channel (the cell just ends), or the host saw a
    # malformed frame and replaced the kernel; both leave a working sandbox.
    assert r.error is None or "restarted" in r.error
    await usable(sb)


async def test_a_frame_nested_too_deeply_for_the_host_restarts_the_kernel(sb):
    """Review19: ``llm_query(d)`` or ``rlm_query(q, context=d)`` with a list nested 980
    deep: the kernel (a shallow stack) encoded it, the host's JSON reader in the pipe's
    callback raised ``RecursionError``, the frame was lost and the cell waited for its reply
    until the run's clock (118 s, then killed). Here the frame is written as is, 5,000 deep:
    a kernel protocol error, the kernel replaced, the model told why."""
    contained_or_skip(sb, "close_channel")
    forge = (
        "import os\nbody = b'{\"op\": \"call\", \"x\": ' + b'[' * 5000 + b']' * 5000 + b'}'\n"
        "frame = len(body).to_bytes(4, 'big') + body\n"
        "for fd in range(3, 1024):\n    try:\n        os.write(fd, frame)\n"
        "    except OSError:\n        pass\n"
        "print('forged')"
    )
    r = await cell(sb, forge)
    assert r.error is not None and r.kernel_restarted, (r.stdout, r.error)
    assert "nested too deeply to read" in r.error
    await usable(sb)


async def test_a_forged_done_frame_with_wrong_field_types_restarts_the_kernel(sb):
    """Found by the hostile review: model code wrote ``done`` frames (for every likely
    request id) whose fields had the wrong types; the one that matched the running cell
    ended the whole run ``failed``. It is a kernel protocol error: the kernel is replaced and
    the model told, and the sandbox goes on."""
    contained_or_skip(sb, "close_channel")
    forge = (
        "import json, os\nframes = b''\n"
        "for rid in range(200):\n"
        "    body = json.dumps({'op': 'done', 'id': rid, 'ok': True, 'result': {\n"
        "        'stdout': 5, 'stderr': [], 'error': 1, 'final': {}, 'variables': 'x',\n"
        "        'restored': 3, 'names': 4}}).encode()\n"
        "    frames += len(body).to_bytes(4, 'big') + body\n"
        "for fd in range(3, 1024):\n    try:\n        os.write(fd, frames)\n"
        "    except OSError:\n        pass\n"
        "print('forged')"
    )
    await sb.execute("kept = 1")
    r = await cell(sb, forge)
    assert r.error is not None and r.kernel_restarted, (r.stdout, r.error)
    assert "kernel protocol error: result field 'stdout' is a int" in r.error
    assert "kept" in r.lost_variables
    await usable(sb)


async def test_a_flood_of_forged_host_calls_restarts_the_kernel():
    """Review14: each ``call`` frame became a task in rlmd itself, however many came;
    model code forging a few bytes per frame could hold thousands of ``rlm_query`` calls
    (each a child run with its own REPL) outside every limit of its sandbox. Past
    ``MAX_CALLS_IN_FLIGHT`` waiting calls the channel is dropped as a protocol error."""
    from rlmd.sandbox.channel import MAX_CALLS_IN_FLIGHT

    reason = unavailable_reason("subprocess")
    if reason is not None:
        pytest.skip(f"subprocess cannot start here: {reason}")
    box = make("subprocess")
    host = FakeHost(delay=60)  # no call returns while the flood arrives
    await box.start(host)
    try:
        n = MAX_CALLS_IN_FLIGHT + 50
        forge = (
            "import json, os\nframes = b''\n"
            f"for i in range({n}):\n"
            "    body = json.dumps({'op': 'call', 'call': 10**6 + i, 'fn': 'llm_query',\n"
            "                       'args': {'prompt': 'x', 'model': None}}).encode()\n"
            "    frames += len(body).to_bytes(4, 'big') + body\n"
            "for fd in range(3, 1024):\n    try:\n        os.write(fd, frames)\n"
            "    except OSError:\n        pass\n"
            "print('forged')"
        )
        await box.execute("kept = 1")
        r = await box.execute(forge)
        assert r.error is not None and r.kernel_restarted, (r.stdout, r.error)
        assert f"more than {MAX_CALLS_IN_FLIGHT:,} host calls waiting" in r.error
        assert len(host.calls) <= MAX_CALLS_IN_FLIGHT
        host.delay = 0
        await usable(box)
    finally:
        await box.close()


async def test_forged_huge_frame_length_is_refused_not_buffered(sb):
    """Found by the hostile fresh-user test: a 3 GiB length prefix followed by 1.5 GB of
    spaces grew rlmd itself to 1.6 GB. The host must drop the channel at the length."""
    contained_or_skip(sb, "close_channel")
    if sb.kind == "container":
        pytest.skip(
            "known, left open: after the host drops a container's channel, the docker engine "
            "(20.10) can stall for minutes removing a container that keeps writing to its attach "
            "stream; the host-side length check itself is the shared KernelChannel's"
        )
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = await cell(
        sb,
        "import os\nfor fd in range(3, 1024):\n    try:\n"
        "        os.write(fd, (3 * 2**30).to_bytes(4, 'big') + b' ' * 2**20)\n"
        "    except OSError:\n        pass\n"
        "for _ in range(64):\n    for fd in range(3, 1024):\n        try:\n"
        "            os.write(fd, b' ' * 2**20)\n        except OSError:\n            pass\n"
        "print('wrote')",
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 48 * 1024, grown_kib  # the 64 MiB that followed was never buffered
    if r.error is not None and sb.kind == "subprocess":
        assert "over the host's limit" in r.error, r.error
    assert r.error is None or "restarted" in r.error
    await usable(sb)


async def test_background_process_does_not_outlive_the_cell(sb):
    contained_or_skip(sb, "background_process")
    r = await cell(
        sb,
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        import time\n"
        "        while True:\n"
        "            time.sleep(0.1)\n"
        "    os._exit(0)\n"
        "print(p.pid)",
    )
    assert r.error is None, r.error
    pid = int(r.stdout)
    # The sleep itself, not whatever process reuses its pid later (a new container).
    probe = (
        f"try:\n    print(b'sleep' in open('/proc/{pid}/cmdline', 'rb').read())\n"
        "except OSError:\n    print(False)"
    )
    if sb.isolation.get("background_processes") == "killed after each cell":
        r = await sb.execute(probe, timeout_s=30)
        assert r.stdout == "False\n", r.stdout
    await usable(sb)
    # Whatever the policy between cells, nothing survives the kernel.
    await sb.restart()
    r = await sb.execute(probe, timeout_s=30)
    assert r.stdout == "False\n", r.stdout


# --------------------------------------------------------------------------- a real run


async def test_a_real_run_survives_hostile_cells_and_records_the_isolation(tmp_path):
    """Through the engine: hostile cells, then an answer; the SQLite trajectory is whole and
    records the isolation the run really got."""
    from rlmd.engine import Budget, RunConfig, run_task
    from rlmd.store import Store

    cells = [
        "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 2**20))",
        "import os\nos._exit(3)",
        "while True:\n    pass",
        "FINAL(len(context))",
    ]

    def root(messages: list[dict[str, Any]]) -> str:
        return repl(cells[min(turn_of(messages), len(cells) - 1)])

    store = Store(tmp_path / "db.sqlite")
    registry = scripted_registry(root=root, sub=root)
    cfg = RunConfig(
        root_model="root",
        sub_model="sub",
        budget=Budget(cell_timeout_s=2.0),
        sandbox="subprocess",
        sandbox_options={"limits": LIMITS, "interrupt_grace_s": 0.5},
    )
    try:
        result = await run_task(
            "how long?", "abcde", cfg, get_model=registry.get, sinks=(store.record,)
        )
    finally:
        await registry.aclose()
    assert result.status == "completed" and result.answer == "5"
    run = store.get_run(result.run_id)
    sandbox = run["sandbox"] if isinstance(run["sandbox"], dict) else json.loads(run["sandbox"])
    iso = sandbox["isolation"]
    assert iso["backend"] == "subprocess"
    assert iso["limits"]["memory_bytes"] == 256 * MiB
    assert set(iso) >= {"network", "namespaces", "rlimits", "cgroup", "seccomp", "enforced"}
    cells_done = [n for n in store.nodes(result.run_id) if n["kind"] == "cell"]
    data = [c["data"] if isinstance(c["data"], dict) else json.loads(c["data"]) for c in cells_done]
    assert len(data) == 4
    assert "memory limit 256 MiB exceeded" in data[0]["error"]
    assert data[1]["kernel_restarted"] and "restarted" in data[1]["error"]
    assert data[2]["timed_out"]
    assert data[3]["final"] == "5"


def test_doctor_names_the_limits_nothing_enforces():
    """Issue 11 #5: record honestly what was not enforced (``rlmd doctor`` prints this)."""
    from rlmd import isolation

    record = make("subprocess").isolation
    assert isolation.unenforced(record) is None or "limits not enforced" in str(
        isolation.unenforced(record)
    )
    loose = {
        **record,
        "enforced": {**record["enforced"], "processes": None, "disk_bytes": None},
        "unavailable": {"cgroup pids": "cannot make groups under /sys/fs/cgroup/pids/rlmd-1000"},
    }
    text = isolation.unenforced(loose)
    assert text is not None and "disk_bytes, processes" in text and "rlmd-1000" in text

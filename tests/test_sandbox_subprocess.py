"""The subprocess backend: process hygiene, the channel, crashes, the environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers.sandbox_host import FakeHost, ok, run

from rlmd.sandbox import create_sandbox
from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.channel import StderrDrain


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a slow init to reap it counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state not in ("Z", "X")


async def gone(pid: int, within: float = 60.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.fixture
async def sb():
    box = create_sandbox("subprocess", timeout_s=30)
    host = FakeHost()
    await box.start(host)
    box.host = host  # type: ignore[attr-defined]
    yield box
    await box.close()


async def test_fd_level_writes_do_not_corrupt_the_channel(sb):
    code = (
        "import os, subprocess, sys\n"
        "os.write(1, b'x')\n"
        "os.write(1, b'\\x00\\x00\\x00\\x10{garbage frame}')\n"
        "os.write(2, b'to fd 2\\n')\n"
        "subprocess.run(['echo', 'from a child'])\n"
        "print('python level')\n"
        "value = 7"
    )
    r = await ok(sb, code)
    assert r.stdout == "python level\n"
    assert r.stderr.startswith("x\x00\x00\x00\x10{garbage frame}to fd 2\nfrom a child\n")
    r = await ok(sb, "print(value)")
    assert r.stdout == "7\n" and r.stderr == ""


async def test_fd_output_is_attributed_to_its_cell(sb):
    # More than a pipe buffer, so the sentinel path is exercised.
    r = await ok(sb, "import os\nfor _ in range(50):\n    os.write(2, b'e' * 4096)")
    assert r.stderr == "e" * 4096 * 50
    r = await ok(sb, "print('quiet')")
    assert r.stderr == ""


async def test_stderr_drain_splits_at_sentinels():
    drain = StderrDrain("abcd", cap=1000)
    mark = b"\x00rlmd:abcd:7\x00"
    stream = b"one" + mark + b"two"
    for i in range(len(stream)):  # the sentinel may arrive in pieces
        drain.feed(stream[i : i + 1])
    assert await drain.segment(7, 1.0) == (b"one", 0)
    assert drain.take_now() == (b"two", 0)
    drain.feed(b"\x00not a sentinel\x00 tail")
    assert drain.take_now() == (b"\x00not a sentinel\x00 tail", 0)
    small = StderrDrain("t", cap=4)
    small.feed(b"0123456789")
    assert "6 more bytes were dropped" in StderrDrain.text(small.take_now())


async def test_os_exit_restarts_the_kernel(sb):
    await sb.load_context({"k": "v"})
    await ok(sb, "x = 1\ny = 2")
    old_pid = sb.pid
    r = await run(sb, "import os\nprint('bye')\nos._exit(3)")
    assert r.kernel_restarted and not r.timed_out
    assert r.lost_variables == ["x", "y"]
    assert "exit code 3" in r.error and "variables lost: x, y" in r.error
    assert sb.pid != old_pid and await gone(old_pid)
    r = await ok(sb, "print(context['k'])")
    assert r.stdout == "v\n"


async def test_crash_by_signal(sb):
    r = await run(sb, "import ctypes\nctypes.string_at(0)")
    assert r.kernel_restarted
    assert "SIGSEGV" in r.error
    r = await ok(sb, "print('fine')")
    assert r.stdout == "fine\n"


async def test_kernel_killed_between_cells(sb):
    await ok(sb, "z = 1")
    kernel = sb._kernel
    os.kill(sb.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not kernel.dead:  # the session has seen it die (not a guess at how long that takes)
        assert time.monotonic() < deadline, "the kill was never noticed"
        await asyncio.sleep(0.01)
    r = await ok(sb, "print('after')")
    assert r.stdout == "after\n"
    assert r.kernel_restarted and r.lost_variables == ["z"]
    assert "the kernel was restarted before this cell" in r.stderr


async def test_closing_the_channel_fd_restarts(sb):
    # Model code that closes every fd above 2 takes the channel with it.
    r = await run(sb, "import os\nos.closerange(3, 4096)\nx = 1")
    assert r.kernel_restarted
    r = await ok(sb, "print('back')")
    assert r.stdout == "back\n"


STUBBORN_SLEEP = (
    "import time\nwhile True:\n    try:\n        time.sleep(60)\n    except BaseException:\n"
    "        pass"
)


async def test_timeout_kills_the_process_group():
    # Without namespaces (host-visible pids) background processes live until the kernel dies.
    sb = create_sandbox("subprocess", isolation="none", interrupt_grace_s=0.3)
    await sb.start(FakeHost())
    try:
        await ok(
            sb,
            "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\nchild_pid = child.pid",
        )
        child_pid = await sb.get_variable("child_pid")
        assert alive(child_pid)
        r = await run(sb, STUBBORN_SLEEP, timeout_s=0.3)
        assert r.timed_out and r.kernel_restarted
        assert "child_pid" in r.lost_variables and "child" in r.lost_variables
        assert await gone(child_pid)
    finally:
        await sb.close()


async def test_namespaced_kernel_and_its_cgroups_go_at_close():
    box = create_sandbox("subprocess")
    await box.start(FakeHost())
    await ok(box, "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\nimport time")
    health = await box.health()
    assert health["alive"] and health["pid"] == box.pid
    host_pid = health["host_pid"]
    cgroups = list(box._kernel.launch.cgroups)
    r = await run(box, "print(child.poll() is not None)")  # killed when its cell ended
    assert r.stdout == "True\n"
    await box.close()
    assert await gone(host_pid) and await gone(box.pid or host_pid)
    assert not any(os.path.exists(p) for p in cgroups)
    assert (await box.health())["alive"] is False


async def test_close_leaves_no_process_behind():
    box = create_sandbox("subprocess", isolation="none")
    await box.start(FakeHost())
    await ok(box, "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\ncp = child.pid")
    pid, child_pid = box.pid, await box.get_variable("cp")
    workdir = box.isolation["workdir"]
    assert os.path.isdir(workdir)
    await box.close()
    assert await gone(pid) and await gone(child_pid)
    assert not os.path.exists(workdir)
    await box.close()  # safe twice


async def test_clean_environment(monkeypatch):
    monkeypatch.setenv("SECRET_API_KEY", "sk-do-not-leak")
    box = create_sandbox("subprocess")
    await box.start(FakeHost())
    try:
        r = await ok(
            box,
            "import os, subprocess\n"
            "print(os.environ.get('SECRET_API_KEY'))\n"
            "print(sorted(os.environ))\n"
            "print(os.getcwd() == os.environ['HOME'])\n"
            "out = subprocess.run(['env'], capture_output=True, text=True).stdout",
        )
        lines = r.stdout.splitlines()
        assert lines[0] == "None"
        assert set(eval(lines[1])) <= {"PATH", "LANG", "HOME", "TMPDIR", "LC_CTYPE", "PWD"}
        assert lines[2] == "True"
        assert "sk-do-not-leak" not in await box.get_variable("out")
        assert os.path.realpath(box.isolation["workdir"]).startswith(
            os.path.realpath(os.environ.get("TMPDIR", "/tmp"))
        )
    finally:
        await box.close()


async def test_kernel_modules_are_private(sb):
    r = await ok(
        sb,
        "import sys\n"
        "print('rlmd' in sys.modules, '_rlmd_kernel' in sys.modules)\n"
        "print(__name__, sys.modules['__main__'] is sys.modules[__name__])\n"
        "def f():\n    return 1\n"
        "import pickle\nprint(pickle.loads(pickle.dumps(f))())",
    )
    assert r.stdout == "False True\n__main__ True\n1\n"
    r = await run(sb, "import protocol")
    assert "ModuleNotFoundError" in r.error


async def test_calls_overlap_while_the_handler_runs():
    """Four threads in one cell each wait on a host call: the calls run concurrently (each
    answer waits until all four calls are in the handler at once; one at a time, none would
    ever be answered and the deadline fails the test)."""

    class MeetingHost(FakeHost):
        def __init__(self):
            super().__init__()
            self.in_handler = 0
            self.all_in = asyncio.Event()

        async def __call__(self, fn, args):
            self.in_handler += 1
            if self.in_handler == 4:
                self.all_in.set()
            await self.all_in.wait()
            return await super().__call__(fn, args)

    host = MeetingHost()
    box = create_sandbox("subprocess")
    await box.start(host)
    try:
        cell = (
            "import threading\nout = []\n"
            "ts = [threading.Thread(target=lambda i=i: out.append(llm_query(str(i)))) "
            "for i in range(4)]\n"
            "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(sorted(out))"
        )
        r = await asyncio.wait_for(ok(box, cell), timeout=120)
        assert host.all_in.is_set()
        assert r.stdout == str(sorted(f"answer to {i}" for i in range(4))) + "\n"
    finally:
        await box.close()


async def test_start_failure_is_a_sandbox_error(tmp_path):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'no kernel here' >&2\nexit 5\n")
    fake_python.chmod(0o755)
    box = create_sandbox("subprocess", python=str(fake_python), isolation="none")
    with pytest.raises(SandboxError, match="no kernel here"):
        await box.start(FakeHost())
    await box.close()


async def test_a_start_that_loses_bwraps_mount_race_is_tried_again(tmp_path):
    """bwrap fails when a host mount vanishes while it copies the root (CI saw it while
    other sandboxes closed): the kernel starts again; any other start failure does not."""
    starts = tmp_path / "starts"
    flaky_python = tmp_path / "python"
    flaky_python.write_text(
        "#!/bin/sh\n"
        f"echo start >> {starts}\n"
        f"if [ $(wc -l < {starts}) -lt 3 ]; then\n"
        "  echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:"
        ' remount \\"/newroot/tmp/x\\": No such file or directory" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    flaky_python.chmod(0o755)
    box = create_sandbox("subprocess", python=str(flaky_python), isolation="none")
    try:
        await box.start(FakeHost())
        r = await ok(box, "6 * 7")
        assert r.stdout.strip() == "42"
        assert starts.read_text().count("start") == 3
    finally:
        await box.close()

    starts.unlink()
    failing = tmp_path / "failing"
    failing.write_text(f"#!/bin/sh\necho start >> {starts}\necho 'no kernel' >&2\nexit 1\n")
    failing.chmod(0o755)
    box = create_sandbox("subprocess", python=str(failing), isolation="none")
    with pytest.raises(SandboxError, match="no kernel"):
        await box.start(FakeHost())
    await box.close()
    assert starts.read_text().count("start") == 1


async def test_big_output(sb):
    r = await ok(sb, "s = 'y' * 5_000_000\nprint(s)")
    assert len(r.stdout) == 5_000_001


async def test_a_warm_cell_allocates_no_big_read_buffer(sb):
    # asyncio's pipe transport asked 256 KiB per read and shrank the bytes: at glibc's mmap
    # threshold that was an mmap + mremap + munmap per frame (a quarter of the host's CPU per
    # warm cell). A frame of a trivial cell now lands in a buffer of at most READ_BYTES.
    import tracemalloc

    from rlmd.sandbox.transport import READ_BYTES

    await ok(sb, "x = 1")
    tracemalloc.start()
    try:
        for i in range(20):
            r = await ok(sb, f"x = {i}\nprint(x)")
            assert r.stdout == f"{i}\n"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < READ_BYTES + 128 * 1024 < 256 * 1024, peak
    r = await ok(sb, "print('y' * 2_000_000)")  # big frames still arrive whole
    assert len(r.stdout) == 2_000_001


def test_small_reads_reach_asyncio_socket_transports():
    # The container backend's attach socket: the same asyncio attribute on another class.
    import socket

    from rlmd.sandbox.transport import READ_BYTES, small_reads

    got: list[int] = []

    class Sink(asyncio.Protocol):
        def __init__(self):
            self.done = asyncio.get_running_loop().create_future()

        def connection_made(self, transport):
            small_reads(transport)

        def data_received(self, data):
            got.append(len(data))

        def connection_lost(self, exc):
            self.done.set_result(None)

    async def main():
        a, b = socket.socketpair()
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(Sink, sock=a)
        await loop.run_in_executor(None, b.sendall, b"z" * 1_000_000)  # the loop reads meanwhile
        b.close()
        await asyncio.wait_for(proto.done, 60)

    asyncio.run(main())
    assert sum(got) == 1_000_000
    assert max(got) <= READ_BYTES


async def test_unicode_and_surrogates(sb):
    r = await ok(
        sb, "print('héllo \\u4e16\\u754c')\nbad = b'\\xff'.decode('utf-8', 'surrogateescape')"
    )
    assert r.stdout == "héllo 世界\n"
    assert await sb.get_variable("bad") == "\udcff"


async def test_many_round_trips_each_get_their_own_result(sb):
    # Speed is bench/sandbox_speed.py's job (it exits 1 on a missed target): a time bound
    # here failed at 7 ms on the shared machine under load 15 (~0.3 ms when quiet).
    times = []
    for i in range(200):
        t0 = time.perf_counter()
        r = await sb.execute(f"x = {i}\nprint(x * 2)")
        times.append(time.perf_counter() - t0)
        assert (r.stdout, r.error) == (f"{i * 2}\n", None)
    times.sort()
    print(f"subprocess cell round trip: median {times[len(times) // 2] * 1e6:.0f} us")


def test_kernel_script_exits_on_eof():
    """The kernel ends by itself when the host goes away (stdin EOF)."""
    import subprocess

    from rlmd.sandbox.process.launch import KERNEL_MAIN

    proc = subprocess.run(
        [sys.executable, "-I", KERNEL_MAIN],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert proc.stdout[4:].startswith(b'{"op":"hello"')


def test_kernel_without_its_cgroup_exits_before_its_hello():
    """A cgroup join that fails (here: a descriptor that cannot be written) ends the kernel
    with 71 before it says hello: no request is read outside the groups the host set up."""
    from rlmd.sandbox.process.launch import KERNEL_MAIN

    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        proc = subprocess.run(
            [sys.executable, "-I", KERNEL_MAIN, "--cgroup-fd", str(fd)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    assert proc.returncode == 71
    assert b"could not join its cgroup" in proc.stderr
    assert b"hello" not in proc.stdout


def test_the_host_writes_the_kernels_bytecode_cache():
    """The sandboxed kernel cannot write its own ``__pycache__``: the host writes a missing
    or stale entry (every module but the ``main.py`` script), and leaves fresh ones alone."""
    import importlib.util

    from rlmd.kernel import KERNEL_DIR
    from rlmd.sandbox.process import launch

    compile_kernel = launch.compile_kernel.__wrapped__  # not the once-per-process cache
    compile_kernel()
    names = sorted(n for n in os.listdir(KERNEL_DIR) if n.endswith(".py") and n != "main.py")
    caches = {n: importlib.util.cache_from_source(os.path.join(KERNEL_DIR, n)) for n in names}
    assert "serve.py" in names and "core.py" in names
    assert all(launch._fresh(os.path.join(KERNEL_DIR, n), c) for n, c in caches.items())
    assert compile_kernel() == []
    # A cache left by an older version of the file (another size) is stale.
    cells = caches["cells.py"]
    with open(cells, "r+b") as f:
        head = bytearray(f.read(16))
        head[12:16] = (int.from_bytes(head[12:16], "little") + 1).to_bytes(4, "little")
        f.seek(0)
        f.write(head)
    assert not launch._fresh(os.path.join(KERNEL_DIR, "cells.py"), cells)
    assert compile_kernel() == ["cells.py"]
    assert launch._fresh(os.path.join(KERNEL_DIR, "cells.py"), cells)


@pytest.mark.parametrize(
    "how", [["-O"], ["-X", "pycache_prefix=PREFIX"]], ids=["optimised", "pycache-prefix"]
)
def test_the_host_writes_the_bytecode_the_kernel_reads_whatever_its_own_flags(how, tmp_path):
    """The kernel runs ``-I`` without ``-O``: it reads ``__pycache__/NAME.TAG.pyc``, so a host
    run with ``-O`` (or a cache prefix) must still write that one, not its own."""
    from rlmd.kernel import KERNEL_DIR

    cells = os.path.join(KERNEL_DIR, "__pycache__", f"cells.{sys.implementation.cache_tag}.pyc")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(cells)
    flags = [f.replace("PREFIX", str(tmp_path)) for f in how]
    code = "from rlmd.sandbox.process import launch; print(launch.compile_kernel())"
    out = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "cells.py" in out.stdout
    from rlmd.sandbox.process import launch

    assert launch._fresh(os.path.join(KERNEL_DIR, "cells.py"), cells)


# --------------------------------------------------------------------------- start-up


async def test_kernel_starts_without_site_but_sees_site_packages(sb):
    import site

    r = await ok(
        sb,
        "import sys, sqlite_utils\n"
        "print(sys.flags.no_site, 'rlmd' in sys.modules, sys.prefix == PREFIX)\n"
        "print(callable(exit), callable(quit), [p for p in sys.path if p in SITE])".replace(
            "PREFIX", repr(sys.prefix)
        ).replace("SITE", repr(site.getsitepackages())),
    )
    assert r.stdout == f"1 False True\nTrue True {site.getsitepackages()}\n"
    r = await run(sb, "import module_that_does_not_exist_anywhere")
    assert "ModuleNotFoundError" in r.error


def test_kernel_processes_pth_files_like_site(tmp_path):
    """Folders listed in .pth files are added and import lines run, except for the files
    the host names (rlmd's own editable install)."""
    import subprocess

    from rlmd.sandbox.process.launch import KERNEL_MAIN, OWN_EDITABLE_PTH

    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "extra_mod.py").write_text("VALUE = 42\n")
    (tmp_path / "a.pth").write_text(
        "# comment\nextra\nmissing-folder\nimport os; os.environ['PTH_RAN'] = '1'\n"
    )
    (tmp_path / f"{OWN_EDITABLE_PTH}0.1.pth").write_text("import os; os.environ['OWN_RAN'] = '1'\n")
    code = (
        "import sys, runpy; sys.argv = ['k', '--site-packages', SITE, '--skip-pth', SKIP];"
        "sys.path.insert(0, DIR); import serve; serve._bootstrap(sys.argv[1:]);"
        "import os, extra_mod; print(extra_mod.VALUE, os.environ.get('PTH_RAN'), "
        "os.environ.get('OWN_RAN'), sys.path[-2:] == [SITE, EXTRA], callable(exit))"
    )
    code = (
        code.replace("SITE", repr(str(tmp_path)))
        .replace("SKIP", repr(OWN_EDITABLE_PTH))
        .replace("DIR", repr(os.path.dirname(KERNEL_MAIN)))
        .replace("EXTRA", repr(str(tmp_path / "extra")))
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert out.stdout == "42 1 None True True\n", out.stderr


async def test_spare_kernels(monkeypatch):
    from rlmd.sandbox.process import launch

    spares = launch.KernelSpares()
    monkeypatch.setattr(launch, "SPARES", spares)
    boxes = [create_sandbox("subprocess"), create_sandbox("subprocess")]
    for box in boxes:  # the second start of the same kind starts a spare
        await box.start(FakeHost())
    await ok(boxes[0], "x = 1")
    spec = boxes[0].transport.spec()
    deadline = time.monotonic() + 10
    while spec not in spares._ready and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    spare = spares._ready[spec]
    box = create_sandbox("subprocess")
    await box.start(FakeHost())  # takes the spare, starts the next one
    assert box.pid == spare.popen.pid and box.isolation["workdir"] == spare.workdir
    r = await ok(box, "print(x if 'x' in dir() else 'fresh')")
    assert r.stdout == "fresh\n"
    deadline = time.monotonic() + 10
    while spec not in spares._ready and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    nxt = spares._ready[spec]
    for b in (*boxes, box):
        await b.close()
    assert await gone(spare.popen.pid)
    assert alive(nxt.popen.pid)  # a spare outlives the sandboxes
    spares.close()
    assert await gone(nxt.popen.pid) and not os.path.exists(nxt.workdir)

    off = create_sandbox("subprocess", spare_kernel=False)
    await off.start(FakeHost())
    await off.close()
    assert spares._ready == {} and spares._starts[spec] == 3  # neither taken nor counted

    spares.close(final=True)
    assert spares.take(spec) is None and spares._launching == {}  # none after the final close


def test_spare_kernels_do_not_outlive_the_process(tmp_path):
    """A process that exits without closing anything leaves no kernel behind."""
    import subprocess

    script = tmp_path / "host.py"
    script.write_text(
        "import asyncio, time\n"
        "from rlmd.sandbox import create_sandbox\n"
        "from rlmd.sandbox.process.launch import SPARES\n"
        "async def handler(fn, args):\n    return None\n"
        "async def main():\n"
        "    for _ in range(2):\n"
        "        box = create_sandbox('subprocess')\n"
        "        await box.start(handler)\n"
        "        print(box.pid, flush=True)\n"
        "    while not SPARES._ready:\n"
        "        await asyncio.sleep(0.01)\n"
        "    print(*(p.popen.pid for p in SPARES._ready.values()), flush=True)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    ).stdout
    pids = [int(p) for p in out.split()]
    assert len(pids) == 3
    for pid in pids:
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(pid)


async def test_a_long_context_with_surrogates_goes_through_the_file(sb):
    text = "caf\u00e9 \ud800 " + "a" * (1 << 20)
    await sb.load_context(text)
    r = await ok(sb, "print(len(context), repr(context[:6]))")
    assert r.stdout == f"{len(text)} 'café \\ud800'\n"
    assert [f for f in os.listdir(sb.workdir) if f.startswith(".rlmd-context")] == []


async def test_isolation_record_tells_the_truth(sb):
    iso = sb.isolation
    if iso["wrapper"] is None:
        pytest.skip(f"no namespaces here: {iso.get('unavailable')}")
    r = await ok(
        sb,
        "import os\nprint(os.getpid())\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "import socket\nprint(sorted(name for _, name in socket.if_nameindex()))",
    )
    pid, caps, nets = r.stdout.splitlines()
    assert pid == "1" and int(caps, 16) == 0
    assert iso["network"] == "none" and nets == "['lo']"
    assert "pid" in iso["namespaces"] and "net" in iso["namespaces"]
    assert iso["rlimits"]["AS"] == sb.limits.memory_bytes
    r = await ok(sb, "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS))")
    assert r.stdout == f"({sb.limits.memory_bytes}, {sb.limits.memory_bytes})\n"


async def test_isolation_none_is_recorded_as_such():
    box = create_sandbox("subprocess", isolation="none")
    assert box.isolation["wrapper"] is None and box.isolation["namespaces"] == []
    assert box.isolation["network"] == "host"
    assert {"kill_parent", "proc_environ", "read_home"} <= box.uncontained
    with pytest.raises(ValueError, match="isolation must be one of"):
        create_sandbox("subprocess", isolation="chroot")


async def test_unshare_fallback_makes_a_pid_namespace():
    from rlmd.sandbox.process import isolate

    if isolate.unshare_problem() is not None:
        pytest.skip(f"unshare cannot work here: {isolate.unshare_problem()}")
    box = create_sandbox("subprocess", isolation="unshare", spare_kernel=False)
    await box.start(FakeHost())
    try:
        assert box.isolation["wrapper"] == "unshare" and box.isolation["network"] == "none"
        r = await ok(box, "import os\nprint(os.getpid())")
        assert r.stdout == "1\n"
        r = await run(box, "import os\nos._exit(2)")
        assert r.kernel_restarted and "exit code 2" in r.error
        assert (await ok(box, "print('back')")).stdout == "back\n"
    finally:
        await box.close()


async def test_kernel_runs_as_an_unprivileged_user_when_the_host_is_root(sb):
    iso = sb.isolation
    if iso["wrapper"] != "bwrap" or os.geteuid() != 0:
        pytest.skip("only bwrap as root drops to another uid")
    assert iso["uid"] == 65534
    r = await ok(
        sb,
        "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
        "try:\n    open('/etc/shadow').read()\nexcept OSError as e:\n    print(type(e).__name__)\n"
        "open('mine.txt', 'w').write('x')\nimport tempfile\nprint(tempfile.mkstemp()[1] != '')",
    )
    assert r.stdout == "65534 65534 []\nPermissionError\nTrue\n"
    await sb.upload("sub/dir/in.txt", b"for the kernel")
    r = await ok(
        sb, "print(open('sub/dir/in.txt').read())\n_ = open('sub/dir/out.txt', 'w').write('y')"
    )
    assert r.stdout == "for the kernel\n"
    assert await sb.download("sub/dir/out.txt") == b"y"


_START_AND_DIE = """
import asyncio, os, signal, sys
from rlmd.sandbox import create_sandbox

async def handler(fn, args):
    return None

async def main():
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(handler)
    await box.upload("big.bin", b"x" * 100_000)
    print(box.workdir, flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    await box.close()

asyncio.run(main())
"""


def test_working_folders_of_a_killed_rlmd_are_removed_when_the_next_one_starts(tmp_path):
    """Found by the hostile review: every kill of rlmd left its sandbox's working folder
    (whatever model code had written there) in the temporary folder for good. The next
    rlmd process to make a working folder removes those of dead owners, and only those."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def rlmd_process(how: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _START_AND_DIE, how],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    killed = rlmd_process("kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = killed.stdout.strip()
    assert os.path.isdir(left) and os.path.dirname(left) == str(tmp_path)
    not_ours = tmp_path / "rlmd-sandbox-not-a-working-folder"
    not_ours.mkdir()
    closed = rlmd_process("close")
    assert closed.returncode == 0, closed.stderr
    assert not os.path.exists(left)
    assert not os.path.exists(closed.stdout.strip())  # closed normally: removed by its owner
    assert not_ours.is_dir()


async def test_a_sandbox_still_starts_when_the_rlmd_home_cannot_be_made(monkeypatch):
    """The rlmd home is hidden in every sandbox; one that cannot be made (a read-only or
    foreign path) holds nothing to hide and must not stop the kernel from starting."""
    monkeypatch.setenv("RLMD_HOME", "/proc/rlmd-home-that-cannot-be-made")
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(FakeHost())
    try:
        assert (await ok(box, "print(6 * 7)")).stdout == "42\n"
    finally:
        await box.close()


async def test_cells_do_not_rebuild_the_isolation_record(monkeypatch):
    """Building the isolation record resolves the rlmd home and socket paths (~1 ms); the
    per-cell disk-watch decision once did it for every cell, half of the hardened sandbox's
    warm round trip. Once per kernel now, also where the folder is watched (no tmpfs)."""
    from rlmd.sandbox import workdirs

    monkeypatch.setattr(workdirs, "can_mount", lambda: False)
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(FakeHost())
    try:
        assert box.isolation["enforced"]["disk_bytes"].startswith("host watch")
        built = []
        record = type(box.transport).isolation
        monkeypatch.setattr(
            type(box.transport), "isolation", lambda self, k: built.append(k) or record(self, k)
        )
        for i in range(5):
            assert (await box.execute(f"print({i})")).stdout == f"{i}\n"
        assert len(built) == 1
        await box.restart()  # a new kernel: decided again, once
        for _ in range(3):
            await ok(box, "x = 1")
        assert len(built) == 2
    finally:
        await box.close()


def _stat_fds() -> list[str]:
    """This process's descriptors open on a ``/proc/<pid>/stat`` file."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/proc/") and target.endswith("/stat"):
                out.append(target)
    return out


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass"


async def test_the_kernels_cpu_reading_counts_threads_and_reaped_children_then_closes():
    # The cell clock's reading (a kept /proc/<pid>/stat descriptor): the kernel's own CPU
    # and its reaped children's count, and nothing is left open or read after it exits.
    box = create_sandbox("subprocess")
    await box.start(FakeHost())
    kernel = box._kernel
    host_pid = (await box.health())["host_pid"]
    try:
        before = kernel.cpu_s()
        await ok(box, BURN)
        own = kernel.cpu_s()
        assert own - before >= 0.25, (before, own)  # 0.3 s of CPU, 10 ms ticks
        assert f"/proc/{host_pid}/stat" in _stat_fds()
        await ok(box, f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}])")
        assert kernel.cpu_s() - own >= 0.25, own  # the child it waited for
    finally:
        await box.close()
    assert f"/proc/{host_pid}/stat" not in _stat_fds()
    assert kernel.cpu_s() is None

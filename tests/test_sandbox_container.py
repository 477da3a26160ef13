"""The container backend for real: limits, hardening, timeouts, orphans, templates, a run.

Skips only when no docker engine can be reached or started (printing why): as root with
``dockerd`` installed, the ``engine`` fixture runs ``scripts/docker-engine.sh`` first, which
starts ``dockerd`` and builds the base image (see shared/notes/sandboxes.md, test policy).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.scripted import repl, scripted_registry, turn_of

from rlmd.sandbox import SandboxError, create_sandbox, unavailable_reason
from rlmd.sandbox.limits import Limits, MiB

ROOT = Path(__file__).resolve().parents[1]


async def host(fn: str, args: dict[str, Any]) -> Any:
    return f"host answer to {args.get('prompt')}"


@pytest.fixture(scope="module")
def engine() -> Any:
    """The docker client, the engine started first if it can be (else the module skips)."""
    reason = unavailable_reason("container")
    if reason is not None and os.geteuid() == 0 and shutil.which("dockerd"):
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], check=False)
        from rlmd.sandbox.docker import engine as docker_host

        docker_host._probe = None  # probe again now
        reason = unavailable_reason("container")
    if reason is not None:
        print(f"container backend cannot start here: {reason}", file=sys.stderr)
        pytest.skip(f"container backend cannot start here: {reason}")
    from rlmd.sandbox.docker import engine as docker_host

    return docker_host.client()


@pytest.fixture
async def make(engine):
    """``await make(**options)``: a started container sandbox, closed after the test."""
    boxes = []

    async def start(**options: Any):
        sb = create_sandbox("container", **options)
        boxes.append(sb)
        await sb.start(host)
        return sb

    yield start
    for sb in boxes:
        await sb.close()


async def ok(sb, code: str, **kw: Any):
    r = await sb.execute(code, **kw)
    assert r.error is None, r.error
    return r


# --------------------------------------------------------------------------- hardening


async def test_isolation_record_says_what_was_enforced(make):
    sb = await make(limits=Limits(memory_bytes=256 * MiB, processes=64))
    iso = sb.isolation
    assert iso["backend"] == "container" and iso["template"] == "base"
    assert iso["image"] == "rlmd/sandbox-base:latest" and iso["image_id"].startswith("sha256:")
    assert iso["network"] == "none" and iso["read_only_root"] and iso["cap_drop"] == ["ALL"]
    eff = iso["effective"]  # what the engine reports it applied
    assert eff["network_mode"] == "none" and eff["read_only"] is True
    assert eff["memory_bytes"] == 256 * MiB and eff["pids_limit"] == 64
    assert eff["cap_drop"] == ["ALL"] and "no-new-privileges" in eff["security_opt"]
    assert iso["enforced"]["memory_bytes"] == "cgroup memory, no swap"
    assert iso["engine"].startswith("docker ") and iso["seccomp"]  # the engine's default profile
    assert iso["background_processes"] == "killed after each cell"
    assert iso["limits"] == sb.limits.to_dict()
    json.dumps(iso)  # recorded with the run


async def test_non_root_read_only_root_writable_tmp_and_work(make):
    sb = await make()
    r = await ok(
        sb,
        "import os\nprint(os.getuid(), os.getcwd())\n"
        "open('/tmp/a', 'w').write('x')\nopen('/work/b', 'w').write('y')\n"
        "try:\n    open('/etc/evil', 'w')\nexcept OSError as e:\n    print(e.errno, e.strerror)\n"
        "print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))",
    )
    assert r.stdout.splitlines() == ["1000 /work", "30 Read-only file system", "[]"]
    assert await sb.download("b") == b"y"


async def test_no_network_by_default(make):
    sb = await make()
    r = await ok(
        sb,
        "import os, socket\nprint(sorted(os.listdir('/sys/class/net')))\n"
        "s = socket.socket()\ns.settimeout(3)\n"
        "try:\n    s.connect(('1.1.1.1', 53))\n    print('connected')\n"
        "except OSError as e:\n    print('blocked', e.errno)",
    )
    lines = r.stdout.splitlines()
    assert lines[0] == "['lo']"
    assert lines[1].startswith("blocked")


async def test_memory_limit_restarts_with_a_clear_message(make):
    sb = await make(limits=Limits(memory_bytes=128 * MiB))
    await sb.load_context("still bound")
    await ok(sb, "a = 1")
    r = await sb.execute("b = b'x' * (400 * 1024 * 1024)")
    assert r.kernel_restarted and r.lost_variables == ["a"]
    assert "memory limit 128 MiB exceeded; the kernel was restarted; variables lost: a" in r.error
    r = await ok(sb, "print(context)")
    assert r.stdout == "still bound\n"


async def test_fork_bomb_hits_the_pids_limit(make):
    sb = await make(limits=Limits(processes=32))
    code = (
        "import os, time\npids, err = [], None\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        pids.append(pid)\n"
        "except OSError as e:\n"
        "    err = e.errno\n"
        "for p in pids:\n"
        "    os.kill(p, 9)\n"
        "    os.waitpid(p, 0)\n"
        "print(len(pids) < 32, err)"
    )
    r = await ok(sb, code, timeout_s=60)
    assert r.stdout == "True 11\n"  # EAGAIN before the 32nd process
    r = await ok(sb, "print('alive')")
    assert r.stdout == "alive\n"


async def test_file_size_limit_is_named(make):
    sb = await make(limits=Limits(file_size_bytes=4 * MiB))
    r = await sb.execute("open('big', 'wb').write(b'0' * (8 * 1024 * 1024))")
    assert "File too large" in r.error and "file size limit 4 MiB exceeded" in r.error
    assert not r.kernel_restarted


async def test_timeout_interrupts_and_keeps_variables(make):
    sb = await make()
    await ok(sb, "kept = 'yes'")
    r = await sb.execute("while True:\n    pass", timeout_s=0.5)
    assert r.timed_out and not r.kernel_restarted
    assert "wall-clock time limit 0.5 s exceeded) and was interrupted" in r.error
    assert "KeyboardInterrupt" in r.error
    r = await ok(sb, "print(kept)")
    assert r.stdout == "yes\n"


async def test_timeout_of_a_c_level_loop_restarts_and_rebinds(make):
    sb = await make(interrupt_grace_s=1.0)
    await sb.load_context("ctx")
    await sb.define_tools(["search"], {"LIMIT": 3})
    await ok(sb, "a = 1")
    old = sb.kernel.id
    # A cell that SIGINT cannot stop (it ignores the signal) gets its container replaced.
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    r = await sb.execute(code, timeout_s=0.5)
    assert r.timed_out and r.kernel_restarted and r.lost_variables == ["a"]
    assert "did not stop when interrupted" in r.error
    assert sb.kernel.id != old
    r = await ok(sb, "print(context, LIMIT)")
    assert r.stdout == "ctx 3\n"


async def test_interrupt_and_restart(make):
    import asyncio

    sb = await make()
    assert await sb.interrupt() is False  # nothing running
    await ok(sb, "kept = 1")
    task = asyncio.ensure_future(sb.execute("import time\ntime.sleep(30)"))
    await asyncio.sleep(0.5)
    assert await sb.interrupt() is True
    r = await task
    assert "KeyboardInterrupt" in r.error and not r.kernel_restarted
    assert await sb.get_variable("kept") == 1
    assert await sb.restart() == ["kept"]
    health = await sb.health()
    assert health["alive"] and health["restarts"] == 1 and health["status"] == "running"


async def test_os_exit_restarts(make):
    sb = await make()
    await ok(sb, "a = 1")
    r = await sb.execute("import os\nos._exit(3)")
    assert r.kernel_restarted and "exit code 3" in r.error and r.lost_variables == ["a"]
    await ok(sb, "print('back')")


async def test_upload_download_and_escapes(make):
    sb = await make()
    await sb.upload("data/in.txt", b"hello")
    r = await ok(
        sb, "print(open('data/in.txt').read())\n_ = open('out.bin', 'wb').write(b'\\x00\\x01')"
    )
    assert r.stdout == "hello\n"
    assert await sb.download("/work/out.bin") == b"\x00\x01"
    await ok(sb, "import os\nos.symlink('/etc/passwd', 'link')")
    for bad in ("../x", "/etc/passwd", "link"):
        with pytest.raises(ValueError):
            await sb.download(bad)
    with pytest.raises(FileNotFoundError):
        await sb.download("missing")


async def test_large_context_through_the_shared_folder(make):
    sb = await make()
    big = "0123456789" * 2_000_000  # 20 MB: passed as a file, not through the channel
    await sb.load_context(big)
    r = await ok(sb, "import os\nprint(len(context), context[-3:], os.listdir('.'))")
    assert r.stdout == "20000000 789 []\n"
    await sb.restart()  # re-bound the same way
    r = await ok(sb, "print(len(context))")
    assert r.stdout == "20000000\n"
    files = {f"src/m{i}.py": f"# module {i}\n" + "x = 1\n" * 20_000 for i in range(20)}  # 2.4 MB
    await sb.load_context(files, codebase=True)
    r = await ok(sb, "import os\nprint(len(list_files()), grep('module 7'), os.listdir('.'))")
    assert r.stdout == "20 ['src/m7.py:1:# module 7'] []\n"
    await sb.load_context("caf\u00e9 \ud800 " * 200_000)  # a lone surrogate survives the file
    r = await ok(sb, "print(context[:6] == 'caf\u00e9 ' + chr(0xD800), len(context))")
    assert r.stdout == "True 1400000\n"


async def test_a_context_file_that_cannot_be_written_goes_in_one_frame(make, monkeypatch):
    """A full host disk under the shared folder (ENOSPC from the context file) failed the
    bind with a bare OSError; the context goes through the channel instead."""
    import errno

    import rlmd.sandbox.docker.transport as transport

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    sb = await make()
    monkeypatch.setattr(transport, "write_new", full)
    await sb.load_context("0123456789" * 300_000)  # 3 MB: over the file threshold
    r = await ok(sb, "import os\nprint(len(context), context[-3:], os.listdir('.'))")
    assert r.stdout == "3000000 789 []\n"


async def test_a_codebase_spooled_while_read_is_bound_from_the_shared_folder(make, codebase):
    """``rlmd run --sandbox container``: the codebase's files go into ``/work`` as they are
    read (``rlmd.context.Spool``), owned by the container's user; the kernel binds them."""
    from rlmd.context import Spool, load_codebase

    sb = await make()
    file = sb.new_context_file()
    assert file is not None and file.kernel_path.startswith("/work/.rlmd-context-codebase-")
    spool = Spool()
    spool.offer(lambda: file.file)
    context = load_codebase(codebase, spool=spool)
    index_at = spool.finish(list(context.value))
    assert index_at is not None
    await sb.load_context_file(context.value, file, index_at)
    r = await ok(sb, "import os\nprint({p: len(t) for p, t in context.items()}, os.listdir('.'))")
    assert r.stdout == f"{ {p: len(t) for p, t in context.value.items()} } []\n"


# --------------------------------------------------------------------------- orphans


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


async def test_orphans_are_reaped_on_start(make, engine):
    from rlmd.sandbox.docker import engine as docker_host

    labels = {
        docker_host.LABEL: "1",
        docker_host.LABEL_HOST: socket.gethostname(),
        docker_host.LABEL_PID: str(_dead_pid()),
    }
    orphan = engine.containers.create("rlmd/sandbox-base:latest", ["sleep", "60"], labels=labels)
    mine = engine.containers.create(
        "rlmd/sandbox-base:latest", ["sleep", "60"], labels=docker_host.owner_labels()
    )
    try:
        docker_host._reaped_for = None  # as in a fresh process
        sb = await make()
        await ok(sb, "print(1)")
        ids = {c.id for c in engine.containers.list(all=True)}
        assert orphan.id not in ids  # its owner is dead
        assert mine.id in ids  # its owner (this process) lives
        assert sb.kernel.id in ids
    finally:
        for c in (orphan, mine):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def test_daemon_start_reaps_in_the_background(engine):
    from rlmd.sandbox.docker import engine as docker_host
    from rlmd.sandbox.docker.reaper import reap_in_background

    labels = {
        docker_host.LABEL: "1",
        docker_host.LABEL_HOST: socket.gethostname(),
        docker_host.LABEL_PID: str(_dead_pid()),
    }
    orphan = engine.containers.create("rlmd/sandbox-base:latest", ["sleep", "60"], labels=labels)
    docker_host._reaped_for = None  # as in a fresh daemon process
    thread = reap_in_background()
    assert thread is not None
    thread.join(30)
    assert orphan.id not in {c.id for c in engine.containers.list(all=True)}


async def test_closed_sandbox_leaves_no_container(make, engine):
    sb = await make()
    cid = sb.kernel.id
    await sb.close()
    assert cid not in {c.id for c in engine.containers.list(all=True)}


# --------------------------------------------------------------------------- templates


async def test_missing_template_image_says_how_to_build_it(engine, tmp_path, monkeypatch):
    (tmp_path / "nobuilt").mkdir()
    (tmp_path / "nobuilt" / "Dockerfile").write_text("FROM rlmd/sandbox-base:latest\n")
    monkeypatch.setenv("RLMD_SANDBOXES_DIR", str(tmp_path))
    sb = create_sandbox("container", template="nobuilt")
    with pytest.raises(SandboxError, match="run: rlmd sandbox build nobuilt"):
        await sb.start(host)


def test_template_build_and_ls_through_the_cli(engine, tmp_path, capsys):
    from rlmd.cli import main

    folder = tmp_path / "tpl-test"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        "FROM rlmd/sandbox-base:latest\nRUN echo built-by-test > /home/rlmd/marker\n"
    )
    try:
        assert main(["sandbox", "build", "tpl-test", "--dir", str(tmp_path)]) == 0
        capsys.readouterr()
        assert main(["sandbox", "ls", "--json", "--dir", str(tmp_path)]) == 0
        listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
        assert listed["tpl-test"]["image"] == "rlmd/sandbox-tpl-test:latest"
        assert listed["tpl-test"]["image_id"] and not listed["tpl-test"]["stale"]
        (folder / "Dockerfile").write_text("FROM rlmd/sandbox-base:latest\n")
        assert main(["sandbox", "ls", "--json", "--dir", str(tmp_path)]) == 0
        assert json.loads(capsys.readouterr().out)[0]["stale"] is True
        assert main(["sandbox", "build", "no-such", "--dir", str(tmp_path)]) == 2
    finally:
        try:
            engine.images.remove("rlmd/sandbox-tpl-test:latest", force=True)
        except Exception:  # noqa: BLE001 - never built
            pass


def test_templates_in_the_repo_are_listed(engine, capsys):
    from rlmd.cli import main

    assert main(["sandbox", "ls", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert {"base", "data"} <= set(listed)
    assert listed["base"]["image_id"]  # built by the engine fixture / scripts/docker-engine.sh


# --------------------------------------------------------------------------- a real run


async def test_engine_run_records_the_container_isolation(engine, tmp_path):
    from rlmd.engine import RunConfig, run_task
    from rlmd.store import Store

    def root(messages):
        if turn_of(messages) == 0:
            return repl("import os\nprint(os.getuid(), llm_query('ping'))\nn = len(context)")
        return repl("FINAL(n)")

    def sub(messages):
        return "pong"

    registry = scripted_registry(root=root, sub=sub)
    store = Store(tmp_path / "db.sqlite")
    cfg = RunConfig(
        root_model="root",
        sub_model="sub",
        sandbox="container",
        sandbox_options={"limits": {"memory_bytes": 512 * MiB}},
    )
    try:
        result = await run_task(
            "how long?", "abcdef", cfg, get_model=registry.get, sinks=(store.record,)
        )
    finally:
        await registry.aclose()
    assert result.status == "completed" and result.answer == "6"
    run = store.get_run(result.run_id)
    sandbox = run["sandbox"] if isinstance(run["sandbox"], dict) else json.loads(run["sandbox"])
    iso = sandbox["isolation"]
    assert sandbox["kind"] == "container"
    assert iso["network"] == "none" and iso["effective"]["memory_bytes"] == 512 * MiB
    assert iso["image_id"].startswith("sha256:") and iso["user"] == "1000:1000"
    cells = [n for n in store.nodes(result.run_id) if n["kind"] == "cell"]
    data = cells[0]["data"] if isinstance(cells[0]["data"], dict) else json.loads(cells[0]["data"])
    assert data["stdout"] == "1000 pong\n"


def test_run_template_flag_picks_the_container_backend(monkeypatch, capsys):
    """``rlmd run --template NAME`` runs in the container backend with that template."""
    import rlmd.runner
    from rlmd.cli import main
    from rlmd.engine import RunResult

    seen = {}

    async def fake_run_question(question, context, config, **kw):
        seen["config"] = config
        return RunResult("r1", "completed", "ok", "final", {}, 1, 0)

    monkeypatch.setattr(rlmd.runner, "run_question", fake_run_question)
    assert main(["run", "q", "--template", "data", "--json", "-q"]) == 0
    assert seen["config"].sandbox == "container"
    assert seen["config"].sandbox_options["template"] == "data"


async def test_containers_of_a_killed_process_are_reaped(engine, tmp_path):
    """A process that dies by SIGKILL leaves its container behind; the next start (here:
    ``reap_orphans``) removes it."""
    from rlmd.sandbox.docker import engine as docker_host

    script = tmp_path / "owner.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from rlmd.sandbox import create_sandbox\n"
        "async def host(fn, args):\n    return None\n"
        "async def main():\n"
        "    sb = create_sandbox('container')\n"
        "    await sb.start(host)\n"
        "    print(sb.kernel.id, flush=True)\n"
        "    time.sleep(120)\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=str(ROOT)
    )
    try:
        cid = proc.stdout.readline().strip()
        assert cid, "the owner process did not start its sandbox"
    finally:
        proc.kill()
        proc.wait()
    # Containers are never auto-removed, so only a reaper removes it: this one, or any
    # process starting a sandbox meanwhile (another test run on the machine).
    docker_host.reap_orphans()
    assert cid not in {c.id for c in engine.containers.list(all=True)}


async def test_spare_container_is_taken_by_the_next_start(make, engine):
    import asyncio

    from rlmd.sandbox.docker import launch as _launch

    limits = Limits(memory_bytes=300 * MiB)  # a spec of this test's own
    first = await make(limits=limits)
    second = await make(limits=limits)  # the second start of a spec makes a spare
    for _ in range(100):
        spare = next((c for s, c in _launch.SPARES._ready.items() if s.limits == limits), None)
        if spare is not None:
            break
        await asyncio.sleep(0.1)
    assert spare is not None
    third = await make(limits=limits)
    assert third.kernel.id == spare.cid
    r = await ok(third, "print('from the spare')")
    assert r.stdout == "from the spare\n"
    assert len({first.kernel.id, second.kernel.id, third.kernel.id}) == 3
    await asyncio.to_thread(_launch.close_spare_containers)
    assert not _launch.SPARES._ready


async def test_cpu_time_limit_restarts_with_a_clear_message(make):
    sb = await make(limits=Limits(cpu_s=2))
    await ok(sb, "a = 1")
    r = await sb.execute("while True:\n    pass", timeout_s=60)
    assert r.kernel_restarted and not r.timed_out
    assert "CPU time limit 2 s exceeded; the kernel was restarted; variables lost: a" in r.error
    await ok(sb, "print('back')")


async def test_container_removed_from_outside_is_replaced(make, engine):
    import asyncio

    sb = await make()
    await ok(sb, "a = 1")
    task = asyncio.ensure_future(sb.execute("import time\ntime.sleep(30)"))
    await asyncio.sleep(0.5)
    await asyncio.to_thread(engine.api.remove_container, sb.kernel.id, force=True)
    r = await task
    assert r.kernel_restarted and r.lost_variables == ["a"]
    assert "died while running the cell" in r.error
    await ok(sb, "print('replaced')")


# --------------------------------------------------------------------------- no engine needed


def test_stderr_drain_cuts_cells_at_sentinels_split_across_chunks():
    from rlmd.kernel import protocol
    from rlmd.sandbox.docker.attach import StderrDrain

    drain = StderrDrain("ab12", cap=10)
    data = b"one\x00two" + protocol.sentinel("ab12", 1) + b"x" * 25 + protocol.sentinel("ab12", 2)
    for i in range(len(data)):  # one byte at a time: every split point
        drain.feed(data[i : i + 1])
    assert drain._done[1] == (b"one\x00two", 0)
    assert drain._done[2] == (b"x" * 10, 15)  # capped, the rest counted
    drain.feed(b"tail\x00rl")
    assert StderrDrain.text(drain.take_now()) == "tail\x00rl"


def test_attach_stream_is_demultiplexed():
    import asyncio

    from rlmd.kernel import protocol
    from rlmd.sandbox.docker.attach import KernelConnection

    loop = asyncio.new_event_loop()
    try:
        conn = KernelConnection(loop, host, cap=100)

        def frame(stream: int, payload: bytes) -> bytes:
            return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

        hello = protocol.encode({"op": "hello", "token": "t0", "pid": 7})
        done = protocol.encode({"op": "done", "id": 1, "ok": True, "result": 5})
        fut = conn.pending[1] = loop.create_future()
        stream = frame(2, b"early ") + frame(1, hello[:3]) + frame(1, hello[3:] + done[:6])
        stream += frame(2, b"err") + frame(1, done[6:])
        for i in range(0, len(stream), 5):
            conn.data_received(stream[i : i + 5])
        assert conn.hello.result()["pid"] == 7
        assert fut.result()["result"] == 5 and conn.pending == {}
        assert conn.stderr_now() == "early err"
    finally:
        loop.close()

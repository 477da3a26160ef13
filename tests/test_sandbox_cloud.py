"""The cloud VM backends (E2B, Modal) against local fakes of their SDKs (tests/fakes/cloud.py).

The shared suite in test_sandbox.py also runs on both (``e2b-fake``, ``modal-fake``); this file
covers what is particular to a kernel in a remote VM: the channel over the provider's process
API, losing the kernel or the whole VM, interrupts, files, limits handed to the provider,
credentials, and that every SDK call the adapters make exists in the real SDK.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
from typing import Any

import pytest
from fakes.cloud import (
    FAKE_BACKENDS,
    FAKE_CREDENTIALS,
    FakeModal,
    fake_e2b,
)
from helpers.sandbox_host import FakeHost, ok, run

from rlmd.sandbox import create_sandbox, unavailable_reason
from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.limits import Limits, MiB


@pytest.fixture(params=["e2b-fake", "modal-fake"])
async def make(request, tmp_path, monkeypatch):
    """``make(**options)``: a not yet started fake-backed cloud sandbox (closed at the end)."""
    made = []

    def factory(**options: Any):
        sb = FAKE_BACKENDS[request.param](tmp_path, monkeypatch, **options)
        made.append(sb)
        return sb

    yield factory
    for sb in made:
        await sb.close()


async def started(make, **options: Any):
    sb = make(timeout_s=30, **options)
    sb.host = FakeHost()
    await sb.start(sb.host)
    return sb


def vms(sb) -> list[Any]:
    """The fake VMs this sandbox's SDK created, oldest first."""
    if isinstance(sb.sdk, FakeModal):
        return sb.sdk.sandboxes
    return sb.sdk.instances


def sdk_calls(sb) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    return sb.sdk.calls


def vm_alive(vm) -> bool:
    return vm.vm.alive


def pid_exists(pid: int) -> bool:
    """A live process (not a zombie waiting to be reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def wait_for(predicate, what: str, attempts: int = 200) -> None:
    for _ in range(attempts):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


# --------------------------------------------------------------------------- channel


async def test_llm_query_travels_over_the_provider_stream(make):
    sb = await started(make)
    try:
        r = await ok(sb, "a = llm_query('over the API')\nprint(a)")
        assert r.stdout == "answer to over the API\n"
        assert sb.host.calls == [("llm_query", {"prompt": "over the API", "model": None})]
        names = [name for name, _, _ in sdk_calls(sb)]
        if isinstance(sb.sdk, FakeModal):
            # one exec for the kernel, its stdin/stdout carry the frames
            execs = [c for c in sdk_calls(sb) if c[0] == "Sandbox.exec"]
            assert any("--framing" in c[1] for c in execs)
        else:
            runs = [kw for name, _, kw in sdk_calls(sb) if name == "commands.run"]
            assert runs[0]["background"] is True and runs[0]["stdin"] is True
            assert "commands.send_stdin" in names  # requests and the call's reply went in here
    finally:
        await sb.close()


async def test_kernel_files_are_uploaded_and_the_kernel_runs_in_the_vm_folder(make):
    sb = await started(make)
    try:
        r = await ok(sb, "import os\nprint(os.getcwd())\nprint(os.environ['HOME'])")
        assert r.stdout == f"{sb.workdir}\n{sb.workdir}\n"
        health = await sb.health()
        assert health["alive"] and health["pid"] == sb.pid and health["restarts"] == 0
        assert health["sandbox_id"] == sb.isolation["sandbox_id"] is not None
    finally:
        await sb.close()


# --------------------------------------------------------------------------- losing the kernel


async def test_kernel_exit_mid_cell_restarts_and_rebinds(make):
    sb = await started(make)
    try:
        await sb.load_context("ctx survives")
        await sb.define_tools(["search"], {"LIMIT": 7})
        await ok(sb, "a = 1\nb = 2")
        old = sb.pid
        r = await run(sb, "import os\nos._exit(3)")
        assert r.kernel_restarted and r.lost_variables == ["a", "b"]
        assert "exit code 3" in r.error and "variables lost: a, b" in r.error
        assert sb.pid != old
        await wait_for(lambda: _gone(old), "the old kernel process ends")
        r = await ok(sb, "print(context, LIMIT, search('q')['tool'])")
        assert r.stdout == "ctx survives 7 search\n"
        assert len(vms(sb)) == 1  # same VM, new kernel
    finally:
        await sb.close()


async def test_kernel_killed_between_cells_is_reported_in_the_next_cell(make):
    sb = await started(make)
    try:
        await ok(sb, "kept = 1")
        os.kill(sb.pid, signal.SIGKILL)  # the fake VM's processes are local ones
        await wait_for(lambda: _dead(sb), "the host notices the kernel died")
        r = await ok(sb, "print('fresh')")
        assert r.stdout == "fresh\n"
        assert r.kernel_restarted and r.lost_variables == ["kept"]
        assert "killed by SIGKILL" in r.stderr  # via the launcher's 128 + N
    finally:
        await sb.close()


async def _gone(pid: int) -> bool:
    return not pid_exists(pid)


async def _dead(sb) -> bool:
    return not (await sb.health())["alive"]


async def test_lost_vm_is_replaced_by_a_new_one(make):
    sb = await started(make)
    try:
        await sb.load_context(["still", "here"])
        await ok(sb, "x = 1")
        first = sb.isolation["sandbox_id"]
        vms(sb)[0].vm.crash()  # the provider ended the VM (timeout, failure)
        await wait_for(lambda: _dead(sb), "the host notices the VM is gone")
        r = await ok(sb, "print(context)")
        assert r.stdout == "['still', 'here']\n"
        assert r.kernel_restarted and r.lost_variables == ["x"]
        assert len(vms(sb)) == 2 and sb.isolation["sandbox_id"] not in (None, first)
    finally:
        await sb.close()


async def test_restart_returns_lost_variables(make):
    sb = await started(make)
    try:
        await sb.set_variable("history", ["turn 1"])
        await ok(sb, "p = 1\nq = 2")
        assert await sb.restart() == ["p", "q"]
        r = await ok(sb, "print(history)")
        assert r.stdout == "['turn 1']\n"
        assert (await sb.health())["restarts"] == 1
    finally:
        await sb.close()


# --------------------------------------------------------------------------- time


async def test_timeout_interrupts_and_keeps_the_repl(make):
    sb = await started(make)
    try:
        await ok(sb, "a = 1")
        r = await run(sb, "b = 2\nprint('working')\nwhile True:\n    pass", timeout_s=0.5)
        assert r.timed_out and not r.kernel_restarted
        assert "wall-clock time limit 0.5 s exceeded" in r.error and "KeyboardInterrupt" in r.error
        assert r.stdout == "working\n"
        assert (await ok(sb, "print(a, b)")).stdout == "1 2\n"
    finally:
        await sb.close()


async def test_timeout_of_a_cell_that_ignores_interrupts_restarts(make):
    sb = await started(make, interrupt_grace_s=0.5)
    try:
        await sb.load_context("ctx")
        await ok(sb, "a = 1")
        stubborn = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
        r = await run(sb, stubborn, timeout_s=0.5)
        assert r.timed_out and r.kernel_restarted and r.lost_variables == ["a"]
        assert "timed out after 0.5 s" in r.error and "did not stop when interrupted" in r.error
        assert (await ok(sb, "print(context)")).stdout == "ctx\n"
    finally:
        await sb.close()


async def _cell_started(sb) -> bool:
    try:
        await sb.download("started")
    except FileNotFoundError:
        return False
    return True


async def test_interrupt_keeps_the_repl(make):
    sb = await started(make)
    try:
        assert await sb.interrupt() is False  # nothing running
        await ok(sb, "kept = 'yes'")
        cell = asyncio.create_task(
            sb.execute(
                "open('started', 'w').close()\nimport time\nwhile True:\n    time.sleep(0.01)"
            )
        )
        await wait_for(lambda: _cell_started(sb), "the cell is running")
        assert await sb.interrupt() is True
        r = await cell
        assert "KeyboardInterrupt" in r.error and not r.kernel_restarted
        assert (await ok(sb, "print(kept)")).stdout == "yes\n"
    finally:
        await sb.close()


async def test_interrupt_that_is_ignored_ends_in_a_restart(make):
    sb = await started(make, interrupt_grace_s=0.5)
    try:
        await ok(sb, "kept = 1")
        code = (
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "open('started', 'w').close()\nwhile True:\n    time.sleep(0.01)"
        )
        cell = asyncio.create_task(sb.execute(code))
        await wait_for(lambda: _cell_started(sb), "the cell is running")
        assert await sb.interrupt() is True
        r = await cell
        assert r.kernel_restarted and r.lost_variables == ["kept"]
        assert "did not stop within 0.5 s of an interrupt" in r.error
        assert (await ok(sb, "print('alive')")).stdout == "alive\n"
    finally:
        await sb.close()


# --------------------------------------------------------------------------- files


async def test_upload_and_download(make):
    sb = await started(make)
    try:
        await sb.upload("data/in.bin", b"\x00\x01binary\xff")
        r = await ok(
            sb,
            "raw = open('data/in.bin', 'rb').read()\nprint(len(raw))\n"
            "open('out.txt', 'w').write('made in the VM')",
        )
        assert r.stdout.startswith("9\n")
        assert await sb.download("out.txt") == b"made in the VM"
        assert await sb.download("./data/../data/in.bin") == b"\x00\x01binary\xff"
        with pytest.raises(FileNotFoundError):
            await sb.download("missing.txt")
        for bad in ("../escape", "/etc/passwd", "", "a/../../b"):
            with pytest.raises(ValueError):
                await sb.upload(bad, b"x")
            with pytest.raises(ValueError):
                await sb.download(bad)
    finally:
        await sb.close()


# --------------------------------------------------------------------------- lifecycle


async def test_close_kills_the_vm(make):
    sb = await started(make)
    pid = sb.pid
    vm = vms(sb)[0]
    await sb.close()
    assert not vm_alive(vm)
    if isinstance(sb.sdk, FakeModal):
        assert vm.terminated
    else:
        assert vm.killed
    await wait_for(lambda: _gone(pid), "the kernel process ends with the VM")
    await sb.close()  # twice is fine
    with pytest.raises(SandboxError):
        await sb.execute("1")
    with pytest.raises(SandboxError):
        await sb.upload("x", b"")
    assert (await sb.health())["alive"] is False


async def test_provider_failure_is_a_sandbox_error_and_nothing_is_left(tmp_path, monkeypatch):
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    sdk = fake_e2b()
    sdk.fail_create = RuntimeError("quota exceeded")
    sb = create_sandbox("e2b", sdk=sdk, root=str(tmp_path / "vm"))
    with pytest.raises(SandboxError, match="e2b: could not create the sandbox: quota exceeded"):
        await sb.start(FakeHost())
    assert sdk.instances == []


async def test_kernel_that_cannot_start_is_a_sandbox_error_and_the_vm_is_killed(
    tmp_path, monkeypatch
):
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    sdk = fake_e2b()
    sb = create_sandbox("e2b", sdk=sdk, root=str(tmp_path / "vm"), python="/nonexistent/python3")
    with pytest.raises(SandboxError, match="could not start the kernel"):
        await sb.start(FakeHost())
    assert sdk.instances[0].killed


# --------------------------------------------------------------------------- credentials


async def test_credentials_never_reach_the_vm(make):
    sb = await started(make)
    try:
        await ok(sb, "import json, os\nenv = dict(os.environ)")
        env = await sb.get_variable("env")
        secrets = set(FAKE_CREDENTIALS.values())
        assert not secrets & set(env.values())
        assert not set(FAKE_CREDENTIALS) & set(env)
        # Nor in anything handed to the SDK (create arguments, commands, envs, files).
        sent = repr(sdk_calls(sb))
        for secret in secrets:
            assert secret not in sent
    finally:
        await sb.close()


@pytest.mark.parametrize("backend", ["e2b", "modal"])
async def test_missing_credentials_is_a_clear_error(backend, tmp_path, monkeypatch):
    for name in [*FAKE_CREDENTIALS, "E2B_DEBUG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-such.toml"))
    if backend == "e2b":
        sdk = fake_e2b()
        sb = create_sandbox("e2b", sdk=sdk, root=str(tmp_path / "vm"))
        match = "no E2B_API_KEY set"
    else:
        sdk = FakeModal()
        sb = create_sandbox("modal", sdk=sdk, root=str(tmp_path / "vm"))
        match = "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
    with pytest.raises(SandboxError, match=match):
        await sb.start(FakeHost())
    assert sdk.calls == []  # the provider was never contacted
    reason = unavailable_reason(backend)
    assert reason is not None  # the shared suite skips the real backend, saying why
    assert match in reason or "not installed" in reason


# --------------------------------------------------------------------------- limits


async def test_limits_go_to_the_provider_and_the_launcher(make):
    limits = Limits(memory_bytes=512 * MiB, open_files=64, network=False)
    sb = await started(make, limits=limits)
    try:
        create = next(kw for name, _, kw in sdk_calls(sb) if name.endswith("create"))
        if isinstance(sb.sdk, FakeModal):
            assert create["block_network"] is True and create["memory"] == 512
            assert sb.isolation["memory_mib"] == 512
        else:
            assert create["allow_internet_access"] is False
        assert sb.isolation["network"] == "none"
        assert "RLIMIT_NOFILE" in sb.isolation["rlimits"]["applied"]
        enforced = sb.isolation["enforced"]
        assert enforced["open_files"] == "RLIMIT_NOFILE" and enforced["network"]
        assert enforced["cpu_s"] is None  # no CPU limit was asked for
        # The record holds the limits really applied: ``timeout_s=30`` (see ``started``) is
        # the wall-clock limit, as on every transport.
        assert sb.isolation["limits"] == {**limits.to_dict(), "wall_s": 30}
        r = await ok(sb, "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))")
        assert r.stdout == "(64, 64)\n"
        r = await run(sb, "big = bytearray(1024 * 1024 * 1024)")
        assert "MemoryError" in r.error and not r.kernel_restarted
    finally:
        await sb.close()


async def test_cpu_limit_names_the_limit(make):
    sb = await started(make, limits=Limits(cpu_s=1))
    try:
        await ok(sb, "a = 1")
        r = await run(sb, "while True:\n    pass")
        assert "CPU time limit 1 s exceeded" in r.error
        assert r.kernel_restarted and r.lost_variables == ["a"]
    finally:
        await sb.close()


async def test_network_allowed_is_passed_on(make):
    sb = await started(make, limits=Limits(network=True))
    try:
        create = next(kw for name, _, kw in sdk_calls(sb) if name.endswith("create"))
        assert create.get("block_network", False) is False
        assert create.get("allow_internet_access", True) is True
        assert sb.isolation["network"] == "internet"
    finally:
        await sb.close()


def test_registry_names_the_transports():
    from rlmd.sandbox.cloud.e2b import E2BTransport
    from rlmd.sandbox.cloud.modal import ModalTransport
    from rlmd.sandbox.session import SandboxSession

    e2b, modal = create_sandbox("e2b"), create_sandbox("modal")
    assert type(e2b) is SandboxSession and type(e2b.transport) is E2BTransport
    assert type(modal) is SandboxSession and type(modal.transport) is ModalTransport
    assert e2b.kind == "e2b" and modal.kind == "modal"


# --------------------------------------------------------------------------- the real SDKs


def _bind(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, method: bool) -> None:
    sig = inspect.signature(fn)
    if method and "self" in sig.parameters:
        sig.bind(None, *args, **kwargs)
    else:
        sig.bind(*args, **kwargs)


async def test_e2b_calls_exist_in_the_real_sdk(tmp_path, monkeypatch):
    """Every call the adapter made to the fake is valid against e2b's real signatures."""
    e2b = pytest.importorskip("e2b", reason="the e2b extra is not installed")
    from e2b.sandbox_async.commands.command import Commands
    from e2b.sandbox_async.filesystem.filesystem import Filesystem

    real = {
        "create": (e2b.AsyncSandbox.create, False),
        "kill": (e2b.AsyncSandbox.kill, True),
        "commands.run": (Commands.run, True),
        "commands.send_stdin": (Commands.send_stdin, True),
        "commands.kill": (Commands.kill, True),
        "files.write": (Filesystem.write, True),
        "files.read": (Filesystem.read, True),
    }
    sb = FAKE_BACKENDS["e2b-fake"](tmp_path, monkeypatch, timeout_s=30)
    await sb.start(FakeHost())
    await ok(sb, "x = llm_query('q')")
    await sb.upload("f", b"1")
    await sb.download("f")
    await run(sb, "while True: pass", timeout_s=0.3)
    await sb.close()
    seen = set()
    for name, args, kwargs in sb.sdk.calls:
        fn, method = real[name]
        _bind(fn, args, kwargs, method=method)
        seen.add(name)
    assert seen == set(real)
    assert hasattr(e2b, "CommandExitException") and hasattr(e2b, "NotFoundException")
    assert "NotFoundException" in {c.__name__ for c in e2b.NotFoundException.__mro__}


async def test_modal_calls_exist_in_the_real_sdk(tmp_path, monkeypatch):
    """Every call the adapter made to the fake is valid against modal's real signatures."""
    modal = pytest.importorskip("modal", reason="the modal extra is not installed")
    from modal.sandbox._filesystem import _SandboxFilesystem

    real = {
        "App.lookup": (modal.App.lookup, False),
        "Sandbox.create": (modal.Sandbox.create, False),
        "Sandbox.exec": (modal.Sandbox.exec, True),
        "Sandbox.terminate": (modal.Sandbox.terminate, True),
        "filesystem.write_bytes": (_SandboxFilesystem.write_bytes, True),
        "filesystem.read_bytes": (_SandboxFilesystem.read_bytes, True),
    }
    sb = FAKE_BACKENDS["modal-fake"](tmp_path, monkeypatch, timeout_s=30)
    await sb.start(FakeHost())
    await ok(sb, "x = llm_query('q')")
    await sb.upload("f", b"1")
    await sb.download("f")
    await sb.close()
    seen = set()
    for name, args, kwargs in sb.sdk.calls:
        fn, method = real[name]
        _bind(fn, args, kwargs, method=method)
        seen.add(name)
    assert seen == set(real)
    # What the adapter uses on the objects those calls return.
    for attr in ("write", "write_eof", "drain"):
        assert hasattr(modal.io_streams.StreamWriter, attr)
    assert hasattr(modal.container_process.ContainerProcess, "wait")
    assert hasattr(modal.Sandbox, "filesystem") and hasattr(modal.Image, "debian_slim")
    inspect.signature(modal.Image.from_registry).bind("python:3.12-slim")
    assert hasattr(modal.exception, "SandboxFilesystemNotFoundError")


# --------------------------------------------------------------------------- real e2b SDK


@pytest.fixture
async def real_e2b(tmp_path, monkeypatch):
    """An ``e2b`` sandbox on the real e2b SDK against the fake envd, started."""
    sb = FAKE_BACKENDS["e2b-envd"](tmp_path, monkeypatch, timeout_s=30, interrupt_grace_s=1)
    from fakes.envd import shared_envd

    sb.envd = shared_envd()
    sb.host = FakeHost()
    await sb.start(sb.host)
    yield sb
    await sb.close()


async def test_real_e2b_sdk_runs_the_kernel_through_envd(real_e2b):
    sb = real_e2b
    r = await ok(sb, "import sys\nx = llm_query('via envd')\nprint(x)\nprint('e', file=sys.stderr)")
    assert (r.stdout, r.stderr) == ("answer to via envd\n", "e\n")
    service = sb.envd.service
    kernel_argv = next(a for a in reversed(service.started) if "--framing" in a[-1])
    assert kernel_argv[:3] == ["/bin/bash", "-l", "-c"]  # what the SDK really sends envd
    # Neither the environment of any process nor the command lines carry a credential.
    sent = repr(service.started) + repr(service.envs)
    for secret in FAKE_CREDENTIALS.values():
        assert secret not in sent
    await sb.upload("in.txt", b"payload")
    r = await ok(sb, "print(open('in.txt').read())\nopen('out.bin', 'wb').write(b'\\x00\\xff')")
    assert r.stdout.startswith("payload\n")
    assert await sb.download("out.bin") == b"\x00\xff"
    with pytest.raises(FileNotFoundError):
        await sb.download("missing")


async def test_real_e2b_sdk_restart_interrupt_and_close(real_e2b):
    sb = real_e2b
    await sb.load_context("ctx")
    await ok(sb, "a = 1")
    r = await run(sb, "import os\nos.kill(os.getpid(), 9)")
    assert r.kernel_restarted and "killed by SIGKILL" in r.error and r.lost_variables == ["a"]
    await ok(sb, "b = 2")
    cell = asyncio.create_task(
        sb.execute("open('started', 'w').close()\nimport time\nwhile True:\n    time.sleep(0.01)")
    )
    await wait_for(lambda: _cell_started(sb), "the cell is running")
    assert await sb.interrupt() is True
    r = await cell
    assert "KeyboardInterrupt" in r.error and not r.kernel_restarted
    assert (await ok(sb, "print(context, b)")).stdout == "ctx 2\n"
    pid = sb.pid
    await sb.close()
    await wait_for(lambda: _gone(pid), "the kernel ends when the sandbox closes")


async def test_real_e2b_sdk_without_a_key_is_refused_before_any_request(tmp_path, monkeypatch):
    pytest.importorskip("e2b", reason="the e2b extra is not installed")
    for name in ("E2B_API_KEY", "E2B_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("E2B_API_URL", "http://127.0.0.1:9")  # would fail loudly if used
    sb = create_sandbox("e2b", root=str(tmp_path / "vm"))
    with pytest.raises(SandboxError, match="no E2B_API_KEY set"):
        await sb.start(FakeHost())


def test_limits_from_a_config_table():
    sb = create_sandbox("modal", limits={"memory_bytes": 256 * MiB, "network": True})
    assert sb.limits == Limits(memory_bytes=256 * MiB, network=True)
    with pytest.raises(ValueError, match="unknown sandbox limit"):
        create_sandbox("e2b", limits={"gpus": 1})


async def test_modal_template_is_a_registry_image(tmp_path, monkeypatch):
    sb = FAKE_BACKENDS["modal-fake"](tmp_path, monkeypatch, template="python:3.12-slim")
    await sb.start(FakeHost())
    try:
        create = next(kw for name, _, kw in sb.sdk.calls if name == "Sandbox.create")
        assert create["image"] == "registry:python:3.12-slim"
        assert sb.isolation["template"] == "python:3.12-slim"
    finally:
        await sb.close()


async def test_an_e2b_write_reset_once_is_sent_again_and_a_second_failure_is_raised():
    """A keep-alive connection reset as a kernel file is uploaded failed the whole sandbox
    start (CI, against the local envd); the idempotent write is sent once more."""
    from types import SimpleNamespace

    from rlmd.sandbox.cloud.e2b import E2BProvider

    written: list[tuple[str, bytes]] = []
    failures = [ConnectionResetError(104, "Connection reset by peer")]

    async def write(path: str, data: bytes) -> None:
        if failures:
            raise failures.pop()
        written.append((path, data))

    provider = E2BProvider()
    provider._vm = SimpleNamespace(files=SimpleNamespace(write=write))
    await provider.write_file("/k/serve.py", b"code")
    assert written == [("/k/serve.py", b"code")]
    failures[:] = [ConnectionResetError(104, "second"), ConnectionResetError(104, "first")]
    with pytest.raises(ConnectionResetError, match="second"):  # popped from the end
        await provider.write_file("/k/serve.py", b"code")
    assert written == [("/k/serve.py", b"code")] and failures == []
    # Not a dropped connection: raised at once, not sent again.
    failures[:] = [OSError("second try"), OSError("disk full")]
    with pytest.raises(OSError, match="disk full"):
        await provider.write_file("/k/serve.py", b"code")
    assert len(failures) == 1  # the "second try" was never needed

    class ReadError(Exception):  # httpx's transport error, by name, under the SDK's wrapper
        pass

    class TransportError(Exception):
        pass

    class ReadErrorChild(ReadError, TransportError):
        pass

    wrapped = RuntimeError("envd write failed")
    wrapped.__cause__ = ReadErrorChild("reset")
    failures[:] = [wrapped]
    await provider.write_file("/k/b.py", b"x")
    assert written[-1] == ("/k/b.py", b"x")

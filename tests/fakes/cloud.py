"""Local fakes of the E2B and Modal SDK surfaces that rlmd's cloud adapters use.

No cloud is reachable from the test machines, so each fake plays the provider: a "VM" is a
set of local child processes (each in its own session, with a minimal environment, never the
test process's) and a folder tree. The fakes mirror the SDKs' method names, argument names and
behaviour that the adapters rely on (text stream callbacks, ``send_stdin`` by pid, exit
exceptions carrying ``exit_code``, ``.aio`` async variants, not-found errors by class name);
``tests/test_sandbox_cloud.py`` checks every recorded call against the real SDK's signature
when the SDK is installed.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import itertools
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_ids = itertools.count(1)

Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def recorded(name: str) -> Callable[[Any], Any]:
    """Log each call of an async fake method exactly as made (``name``, args, kwargs) in
    ``self._log()``, so a test can replay it against the real SDK's signature."""

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            self._log().append((name, args, kwargs))
            return await fn(self, *args, **kwargs)

        return wrapper

    return decorate


def vm_environ(extra: dict[str, str] | None) -> dict[str, str]:
    """A fresh VM's environment plus what the caller asked for (never the host's)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    env.update({k: v for k, v in (extra or {}).items() if v is not None})
    return env


class LocalProcess:
    """One process of a fake VM: a local child in its own session, its streams decoded as
    UTF-8 text and handed to sinks."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.pid = proc.pid
        self._pumps: list[asyncio.Task[None]] = []

    @classmethod
    async def start(
        cls,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str] | None,
        on_stdout: Callable[[Any], Any] | None,
        on_stderr: Callable[[Any], Any] | None,
        text: bool = True,
    ) -> LocalProcess:
        """Start ``argv``; the sinks get text chunks (``text``) or raw bytes."""
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=vm_environ(env),
            start_new_session=True,
        )
        self = cls(proc)
        loop = asyncio.get_running_loop()
        self._pumps = [
            loop.create_task(self._pump(proc.stdout, on_stdout, text)),
            loop.create_task(self._pump(proc.stderr, on_stderr, text)),
        ]
        return self

    @staticmethod
    async def _pump(stream: Any, sink: Callable[[Any], Any] | None, text: bool) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while chunk := await stream.read(1 << 16):
            out = decoder.decode(chunk) if text else chunk
            if out and sink is not None:
                sink(out)

    async def write(self, data: bytes | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data.encode() if isinstance(data, str) else data)
        await self.proc.stdin.drain()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(Exception):
            self.proc.stdin.close()

    async def wait(self) -> int:
        """The exit code once the process has ended and its output is delivered."""
        await asyncio.gather(*self._pumps, return_exceptions=True)
        code = await self.proc.wait()
        self.close_stdin()  # lets asyncio close the transport (not left to the GC)
        return code

    async def go_exit_code(self) -> int:
        """The exit code as envd (Go's ``ProcessState.ExitCode``) reports it: -1 when a
        signal ended the process."""
        code = await self.wait()
        return -1 if code < 0 else code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


class FakeVM:
    """What both fakes share: processes, files, and being killed or crashing."""

    def __init__(self) -> None:
        self.id = f"fake-{next(_ids)}"
        self.processes: dict[int, LocalProcess] = {}
        self.alive = True

    def check(self) -> None:
        if not self.alive:
            raise RuntimeError(f"sandbox {self.id} is not running")

    async def start(self, argv: list[str], **kw: Any) -> LocalProcess:
        self.check()
        process = await LocalProcess.start(argv, **kw)
        self.processes[process.pid] = process
        return process

    async def run(self, argv: list[str], *, cwd: str | None, env: dict[str, str] | None) -> int:
        process = await self.start(argv, cwd=cwd, env=env, on_stdout=None, on_stderr=None)
        process.close_stdin()
        return await process.wait()

    def write(self, path: str, data: bytes) -> None:
        self.check()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def read(self, path: str) -> bytes | None:
        self.check()
        try:
            return Path(path).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def crash(self) -> None:
        """The VM ends on its own (provider timeout, host failure): everything in it dies."""
        self.alive = False
        for process in self.processes.values():
            process.kill()

    async def shut_down(self) -> None:
        """Killed through the API: everything in it dies and is reaped."""
        self.crash()
        for process in self.processes.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 10)


# --------------------------------------------------------------------------- E2B


class NotFoundException(Exception):
    """Stands in for ``e2b.exceptions.NotFoundException``."""


class CommandExitException(Exception):
    """Stands in for ``e2b.CommandExitException``: a command ended with a non-zero code."""

    def __init__(self, exit_code: int):
        super().__init__(f"command exited with code {exit_code}")
        self.exit_code = exit_code


class _E2BHandle:
    def __init__(self, process: LocalProcess):
        self._process = process
        self.pid = process.pid

    async def wait(self) -> Any:
        code = await self._process.go_exit_code()
        if code != 0:
            raise CommandExitException(code)
        return SimpleNamespace(exit_code=0, stdout="", stderr="")


class _E2BCommands:
    def __init__(self, sandbox: FakeE2BSandbox):
        self._sb = sandbox

    def _log(self) -> list[Call]:
        return type(self._sb).calls

    @recorded("commands.run")
    async def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[str], Any] | None = None,
        on_stderr: Callable[[str], Any] | None = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
    ) -> Any:
        vm = self._sb.vm
        argv = shlex.split(cmd)
        if background:
            process = await vm.start(
                argv, cwd=cwd, env=envs, on_stdout=on_stdout, on_stderr=on_stderr
            )
            if not stdin:
                process.close_stdin()
            return _E2BHandle(process)
        code = await vm.run(argv, cwd=cwd, env=envs)
        if code != 0:
            raise CommandExitException(code)
        return SimpleNamespace(exit_code=0, stdout="", stderr="")

    @recorded("commands.send_stdin")
    async def send_stdin(self, pid: int, data: str | bytes, request_timeout: float | None = None):
        self._sb.vm.check()
        process = self._sb.vm.processes.get(pid)
        if process is None:
            raise NotFoundException(f"process {pid} not found")
        await process.write(data)

    @recorded("commands.kill")
    async def kill(self, pid: int, request_timeout: float | None = None) -> bool:
        process = self._sb.vm.processes.get(pid)
        if process is None or not self._sb.vm.alive:
            return False
        process.kill()
        return True


class _E2BFiles:
    def __init__(self, sandbox: FakeE2BSandbox):
        self._sb = sandbox

    def _log(self) -> list[Call]:
        return type(self._sb).calls

    @recorded("files.write")
    async def write(
        self, path: str, data: str | bytes, user: str | None = None, request_timeout=None
    ) -> Any:
        self._sb.vm.write(path, data.encode() if isinstance(data, str) else bytes(data))
        return SimpleNamespace(path=path)

    @recorded("files.read")
    async def read(
        self, path: str, format: str = "text", user: str | None = None, request_timeout=None
    ) -> Any:
        data = self._sb.vm.read(path)
        if data is None:
            raise NotFoundException(f"path {path} does not exist")
        return bytearray(data) if format == "bytes" else data.decode()


class FakeE2BSandbox:
    """Stands in for ``e2b.AsyncSandbox`` (use :func:`fake_e2b` for a fresh class)."""

    instances: list[FakeE2BSandbox] = []
    calls: list[Call] = []
    fail_create: Exception | None = None

    def __init__(self, create_kwargs: dict[str, Any]):
        self.create_kwargs = create_kwargs
        self.vm = FakeVM()
        self.sandbox_id = self.vm.id
        self.commands = _E2BCommands(self)
        self.files = _E2BFiles(self)
        self.killed = False

    def _log(self) -> list[Call]:
        return type(self).calls

    @classmethod
    async def create(
        cls,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        secure: bool | None = None,
        allow_internet_access: bool | None = None,
        **opts: Any,
    ) -> FakeE2BSandbox:
        kwargs = {
            "template": template,
            "timeout": timeout,
            "metadata": metadata,
            "envs": envs,
            "allow_internet_access": allow_internet_access,
            **opts,
        }
        if cls.fail_create is not None:
            raise cls.fail_create
        sandbox = cls(kwargs)
        cls.instances.append(sandbox)
        return sandbox

    @recorded("kill")
    async def kill(self, request_timeout: float | None = None) -> bool:
        self.killed = True
        await self.vm.shut_down()
        return True


def fake_e2b() -> type[FakeE2BSandbox]:
    """A fresh fake ``AsyncSandbox`` class with its own records (``calls``, ``instances``)."""
    cls = type("FakeAsyncSandbox", (FakeE2BSandbox,), {"instances": [], "calls": []})
    create = cls.__dict__.get("create") or FakeE2BSandbox.__dict__["create"]

    @functools.wraps(create.__func__)  # keeps the signature the adapter inspects
    async def logged_create(klass: Any, *args: Any, **kwargs: Any) -> Any:
        klass.calls.append(("create", args, kwargs))
        return await create.__func__(klass, *args, **kwargs)

    cls.create = classmethod(logged_create)  # type: ignore[method-assign]
    return cls


# --------------------------------------------------------------------------- Modal


def _aio(fn: Callable[..., Any]) -> SimpleNamespace:
    """Modal's wrapped methods expose their async form as ``.aio``."""
    return SimpleNamespace(aio=fn)


class SandboxFilesystemNotFoundError(Exception):
    """Stands in for ``modal.exception.SandboxFilesystemNotFoundError``."""


class _ModalStream:
    """``process.stdout``: async iteration yields text chunks until the stream ends."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()

    def put(self, text: str) -> None:
        self.queue.put_nowait(text)

    def __aiter__(self) -> _ModalStream:
        return self

    async def __anext__(self) -> str:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


class _ModalStdin:
    def __init__(self) -> None:
        self.buffer = bytearray()
        self.process: LocalProcess | None = None
        self.eof = False
        self.drain = _aio(self._drain)

    def write(self, data: bytes | str) -> None:
        self.buffer += data.encode() if isinstance(data, str) else data

    def write_eof(self) -> None:
        self.eof = True

    async def _drain(self) -> None:
        assert self.process is not None
        data, self.buffer = bytes(self.buffer), bytearray()
        if data:
            await self.process.write(data)
        if self.eof:
            self.process.close_stdin()


class _ModalProcess:
    def __init__(self) -> None:
        self.stdout = _ModalStream()
        self.stderr = _ModalStream()
        self.stdin = _ModalStdin()
        self.local: LocalProcess | None = None
        self.wait = _aio(self._wait)

    async def _wait(self) -> int:
        assert self.local is not None
        code = await self.local.wait()
        self.stdout.put(None)  # type: ignore[arg-type]
        self.stderr.put(None)  # type: ignore[arg-type]
        return code


class FakeModalSandbox:
    def __init__(self, module: FakeModal, kwargs: dict[str, Any]):
        self.module = module
        self.create_kwargs = kwargs
        self.vm = FakeVM()
        self.object_id = "sb-" + self.vm.id
        self.terminated = False
        self.exec = _aio(self._exec)
        self.terminate = _aio(self._terminate)
        self.filesystem = SimpleNamespace(
            write_bytes=_aio(self._write_bytes), read_bytes=_aio(self._read_bytes)
        )

    def _log(self) -> list[Call]:
        return self.module.calls

    @recorded("Sandbox.exec")
    async def _exec(
        self,
        *args: str,
        timeout: int | None = None,
        workdir: str | None = None,
        env: dict[str, str | None] | None = None,
        text: bool = True,
        bufsize: int = -1,
    ) -> _ModalProcess:
        process = _ModalProcess()
        local = await self.vm.start(
            list(args),
            cwd=workdir,
            env=env,  # type: ignore[arg-type]
            on_stdout=process.stdout.put,
            on_stderr=process.stderr.put,
        )
        process.local = local
        process.stdin.process = local
        # The streams end when the process does, even if nobody waits for it.
        asyncio.get_running_loop().create_task(process._wait())
        return process

    @recorded("filesystem.write_bytes")
    async def _write_bytes(self, data: bytes, remote_path: str) -> None:
        self.vm.write(remote_path, bytes(data))

    @recorded("filesystem.read_bytes")
    async def _read_bytes(self, remote_path: str) -> bytes:
        data = self.vm.read(remote_path)
        if data is None:
            raise SandboxFilesystemNotFoundError(f"{remote_path} not found")
        return data

    @recorded("Sandbox.terminate")
    async def _terminate(self, *, wait: bool = False) -> None:
        self.terminated = True
        await self.vm.shut_down()


class FakeModal:
    """Stands in for the ``modal`` module: ``App.lookup``, ``Image.debian_slim`` and
    ``Sandbox.create`` with their ``.aio`` forms."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.sandboxes: list[FakeModalSandbox] = []
        self.apps: list[str] = []
        self.App = SimpleNamespace(lookup=_aio(self._lookup))
        self.Image = SimpleNamespace(
            debian_slim=lambda python_version=None: "debian_slim",
            from_registry=lambda tag, **kw: f"registry:{tag}",
        )
        self.Sandbox = SimpleNamespace(create=_aio(self._create))

    def _log(self) -> list[Call]:
        return self.calls

    @recorded("App.lookup")
    async def _lookup(self, name: str, *, create_if_missing: bool = False) -> Any:
        self.apps.append(name)
        return SimpleNamespace(name=name)

    @recorded("Sandbox.create")
    async def _create(self, *args: str, **kwargs: Any) -> FakeModalSandbox:
        sandbox = FakeModalSandbox(self, kwargs)
        self.sandboxes.append(sandbox)
        return sandbox


# --------------------------------------------------------------------------- backends


FAKE_CREDENTIALS = {
    "E2B_API_KEY": "fake-e2b-credential-for-tests",
    "MODAL_TOKEN_ID": "fake-modal-id-for-tests",
    "MODAL_TOKEN_SECRET": "fake-modal-secret-for-tests",
}
"""Values the tests put in the host environment; none may ever reach a VM."""


def e2b_fake_sandbox(root: Path, monkeypatch: Any, **options: Any) -> Any:
    """An ``e2b`` sandbox whose SDK is a fresh :func:`fake_e2b` (``.sdk`` on the result),
    its VM files under ``root``; fake credentials are set in the environment."""
    from rlmd.sandbox import create_sandbox

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    sdk = fake_e2b()
    sb = create_sandbox("e2b", sdk=sdk, root=str(root / "e2b-vm"), python=sys.executable, **options)
    sb.sdk = sdk  # type: ignore[attr-defined]
    return sb


def modal_fake_sandbox(root: Path, monkeypatch: Any, **options: Any) -> Any:
    """A ``modal`` sandbox whose SDK is a fresh :class:`FakeModal` (``.sdk``)."""
    from rlmd.sandbox import create_sandbox

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)

    sdk = FakeModal()
    sb = create_sandbox(
        "modal", sdk=sdk, root=str(root / "modal-vm"), python=sys.executable, **options
    )
    sb.sdk = sdk  # type: ignore[attr-defined]
    return sb


def e2b_envd_sandbox(root: Path, monkeypatch: Any, **options: Any) -> Any:
    """An ``e2b`` sandbox on the *real* e2b SDK, in debug mode, talking to the shared
    fake envd (:mod:`tests.fakes.envd`); skips when the SDK or uvicorn is not installed."""
    import pytest

    pytest.importorskip("e2b", reason="the e2b extra is not installed")
    pytest.importorskip("uvicorn", reason="uvicorn (to serve the fake envd) is not installed")
    from rlmd.sandbox import create_sandbox

    from .envd import shared_envd

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("E2B_DEBUG", "true")  # AsyncSandbox.create skips E2B's API
    monkeypatch.setenv("E2B_SANDBOX_URL", shared_envd().url)
    monkeypatch.setenv("E2B_HTTP_VERSION", "1.1")
    return create_sandbox("e2b", root=str(root / "envd-vm"), python=sys.executable, **options)


FAKE_BACKENDS: dict[str, Callable[..., Any]] = {
    "e2b-fake": e2b_fake_sandbox,
    "modal-fake": modal_fake_sandbox,
    "e2b-envd": e2b_envd_sandbox,
}
"""Backend name -> ``factory(tmp_path, monkeypatch, **options)`` for the shared conformance
suite."""

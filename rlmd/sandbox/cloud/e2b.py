"""E2B cloud VMs (``pip install 'rlmd[e2b]'``, an ``E2B_API_KEY`` in the environment).

One Firecracker microVM per sandbox (``e2b.AsyncSandbox``). The kernel runs as a background
command with stdin enabled: frames go in with ``commands.send_stdin`` and come back through
the ``on_stdout`` callback of the same authenticated envd stream. See
``docs/sandboxes-cloud.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shlex
from typing import Any

from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.cloud.provider import ExitSink, Provider, RemoteProcess, TextSink
from rlmd.sandbox.cloud.transport import CloudTransport
from rlmd.sandbox.limits import Limits

API_KEY_ENV = "E2B_API_KEY"


def _load_sdk() -> Any:
    try:
        from e2b import AsyncSandbox
    except ImportError as exc:
        raise SandboxError(
            f"the e2b SDK is not installed ({exc}); install its extra: pip install -e '.[e2b]' (or pip install 'rlmd[e2b]')"
        ) from exc
    return AsyncSandbox


def _debug_mode() -> bool:
    return os.environ.get("E2B_DEBUG", "").lower() in ("1", "true", "yes")


def _is_not_found(exc: BaseException) -> bool:
    # e2b.exceptions.NotFoundException (or a fake's), matched by name so a test double needs
    # no import of the SDK.
    return any(cls.__name__ == "NotFoundException" for cls in type(exc).__mro__)


class _E2BProcess(RemoteProcess):
    def __init__(self, vm: Any, handle: Any):
        self._vm = vm
        self._handle = handle

    async def write(self, data: bytes) -> None:
        await self._vm.commands.send_stdin(self._handle.pid, data)

    async def kill(self) -> None:
        with contextlib.suppress(Exception):
            await self._vm.commands.kill(self._handle.pid)


class E2BProvider(Provider):
    """One E2B sandbox.

    Args:
        template: E2B template name or id (default: E2B's base template, which has
            ``python3``); build one with your libraries for faster starts.
        vm_timeout_s: how long E2B keeps the VM alive, seconds (E2B kills it after that;
            Hobby plans cap it at 1 h, Pro at 24 h). The sandbox makes a new VM on the next
            cell if the old one is gone, with the variables lost.
        root: folder in the VM for rlmd's files.
        python: interpreter in the VM.
        sdk: the ``AsyncSandbox`` class to use (tests pass a fake); default ``e2b.AsyncSandbox``.
    """

    kind = "e2b"

    def __init__(
        self,
        *,
        template: str | None = None,
        vm_timeout_s: int = 3600,
        root: str = "/home/user/.rlmd",
        python: str = "python3",
        sdk: Any = None,
    ):
        self.template = template
        self.vm_timeout_s = int(vm_timeout_s)
        self.root = root
        self.python = python
        self._sdk = sdk
        self._vm: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def sandbox_id(self) -> str | None:
        return getattr(self._vm, "sandbox_id", None)

    async def create(self, limits: Limits) -> dict[str, Any]:
        if not os.environ.get(API_KEY_ENV) and not _debug_mode():
            raise SandboxError(
                f"e2b: no {API_KEY_ENV} set; create a key in the E2B dashboard and export it"
            )
        sdk = self._sdk or _load_sdk()
        kwargs: dict[str, Any] = {
            "template": self.template,
            "timeout": self.vm_timeout_s,
            "metadata": {"created_by": "rlmd"},
        }
        network = "internet"
        # allow_internet_access arrived in e2b 1.x; older SDKs would reject the keyword.
        if "allow_internet_access" in inspect.signature(sdk.create).parameters:
            kwargs["allow_internet_access"] = limits.network
            network = "internet" if limits.network else "none"
        self._vm = await sdk.create(**kwargs)
        return {
            "network": network,
            "template": self.template or "base",
            "vm_timeout_s": self.vm_timeout_s,
            "memory_cpu": "set by the template",
        }

    def _need_vm(self) -> Any:
        if self._vm is None:
            raise SandboxError("e2b: the VM is not running")
        return self._vm

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` in the VM; a failed write is sent once more.

        A pooled keep-alive connection that the server closes just as a write goes out is
        reset ("Connection reset by peer": seen once in CI against the local envd, while
        the kernel's files were uploaded in parallel). The write is idempotent (same path,
        same bytes), so one more attempt is safe; a second failure, or any failure that is
        not a dropped connection (a full disk, a refused path), is raised.
        """
        files = self._need_vm().files
        try:
            await files.write(path, data)
        except Exception as exc:  # noqa: BLE001 - the SDK's HTTP errors come in many classes
            if not _is_dropped_connection(exc):
                raise
            await files.write(path, data)

    async def read_file(self, path: str) -> bytes:
        try:
            data = await self._need_vm().files.read(path, format="bytes")
        except Exception as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(path) from None
            raise
        return bytes(data)

    async def spawn(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        on_stdout: TextSink,
        on_stderr: TextSink,
        on_exit: ExitSink,
    ) -> RemoteProcess:
        vm = self._need_vm()
        handle = await vm.commands.run(
            shlex.join(argv),
            background=True,
            stdin=True,
            cwd=cwd,
            envs=env,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            timeout=0,  # the kernel lives as long as the VM: no limit on the stream
        )
        task = asyncio.get_running_loop().create_task(self._watch(handle, on_exit))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return _E2BProcess(vm, handle)

    @staticmethod
    async def _watch(handle: Any, on_exit: ExitSink) -> None:
        code: int | None = None
        try:
            result = await handle.wait()
            code = getattr(result, "exit_code", None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - CommandExitException carries the code
            code = getattr(exc, "exit_code", None)
        on_exit(code)

    async def run(self, argv: list[str], *, timeout_s: float = 30.0) -> int:
        try:
            result = await self._need_vm().commands.run(shlex.join(argv), timeout=timeout_s)
        except Exception as exc:
            code = getattr(exc, "exit_code", None)
            if code is None:
                raise
            return int(code)
        return int(result.exit_code)

    async def destroy(self) -> None:
        vm, self._vm = self._vm, None
        for task in list(self._tasks):
            task.cancel()
        if vm is not None:
            with contextlib.suppress(Exception):
                await vm.kill()


class E2BTransport(CloudTransport):
    """Kernels in one E2B microVM. Takes :class:`E2BProvider`'s arguments (``template``,
    ``vm_timeout_s``, ``root``, ``python``, ``sdk``) and the sandbox's ``limits``."""

    kind = "e2b"

    def __init__(self, *, limits: Limits, **provider_options: Any):
        super().__init__(E2BProvider(**provider_options), limits=limits)

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why no E2B sandbox can start here (the SDK or the key is missing), or ``None``."""
        try:
            _load_sdk()
        except SandboxError as exc:
            return str(exc)
        if not os.environ.get(API_KEY_ENV) and not _debug_mode():
            return f"no {API_KEY_ENV} set"
        return None


def _is_dropped_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a connection the peer dropped: an
    :class:`ConnectionError` or an httpx/httpcore transport error, matched by class name so
    the check needs neither library imported (the SDK wraps them in its own classes)."""
    if type(exc).__name__ == "SandboxNotRunningException":  # the SDK probed it: the VM is gone
        return False
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; the bound guards a cycle
        if seen is None:
            return False
        if isinstance(seen, ConnectionError):
            return True
        names = {cls.__name__ for cls in type(seen).__mro__}
        if names & {"TransportError", "NetworkError", "RemoteProtocolError"}:
            return True
        seen = seen.__cause__ or seen.__context__
    return False

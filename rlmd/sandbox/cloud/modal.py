"""Modal sandboxes (``pip install 'rlmd[modal]'``, a Modal token: ``modal token new`` or
``MODAL_TOKEN_ID`` + ``MODAL_TOKEN_SECRET``).

One gVisor container per sandbox (``modal.Sandbox.create``). The kernel is started with
``sb.exec``; frames go in through ``process.stdin`` and come back by iterating
``process.stdout``, both carried by Modal's authenticated API. ``block_network=True`` unless
the limits allow the network; the memory limit is also requested from Modal. See
``docs/sandboxes-cloud.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from typing import Any

from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.cloud.provider import ExitSink, Provider, RemoteProcess, TextSink
from rlmd.sandbox.cloud.transport import CloudTransport
from rlmd.sandbox.limits import Limits, MiB

TOKEN_ENV = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")


def _load_sdk() -> Any:
    try:
        import modal
    except ImportError as exc:
        raise SandboxError(
            f"the modal SDK is not installed ({exc}); install its extra: pip install -e '.[modal]' (or pip install 'rlmd[modal]')"
        ) from exc
    return modal


def _credentials_missing() -> str | None:
    if all(os.environ.get(name) for name in TOKEN_ENV):
        return None
    config = os.environ.get("MODAL_CONFIG_PATH") or os.path.expanduser("~/.modal.toml")
    if os.path.isfile(config):
        return None
    return "no Modal token: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET or run `modal token new`"


def _is_not_found(exc: BaseException) -> bool:
    # modal.exception.SandboxFilesystemNotFoundError (or a fake's), matched by name.
    return any(cls.__name__.endswith("NotFoundError") for cls in type(exc).__mro__)


class _ModalProcess(RemoteProcess):
    def __init__(self, provider: ModalProvider, process: Any):
        self._provider = provider
        self._process = process

    async def write(self, data: bytes) -> None:
        self._process.stdin.write(data)
        await self._process.stdin.drain.aio()

    async def kill(self) -> None:
        # An exec'd process has no kill call: closing stdin ends an idle kernel; a busy one
        # is killed by the sandbox (kill -- -PID) or with the VM.
        with contextlib.suppress(Exception):
            self._process.stdin.write_eof()
            await self._process.stdin.drain.aio()


class ModalProvider(Provider):
    """One Modal sandbox.

    Args:
        app_name: the Modal app the sandboxes are grouped under (created if missing).
        image: a ``modal.Image`` with ``python3`` (default ``modal.Image.debian_slim()``).
        template: instead of ``image``, a registry image name with ``python3`` (``rlmd run
            --template``), used as ``modal.Image.from_registry(template)``.
        vm_timeout_s: the sandbox's maximum lifetime, seconds (Modal allows up to 24 h).
        cpu: physical cores to reserve (``None``: Modal's default).
        root: folder in the VM for rlmd's files.
        python: interpreter in the VM.
        sdk: the ``modal`` module to use (tests pass a fake).
    """

    kind = "modal"

    def __init__(
        self,
        *,
        app_name: str = "rlmd-sandboxes",
        image: Any = None,
        template: str | None = None,
        vm_timeout_s: int = 3600,
        cpu: float | None = None,
        root: str = "/tmp/rlmd",
        python: str = "python3",
        sdk: Any = None,
    ):
        self.app_name = app_name
        self.image = image
        self.template = template
        self.vm_timeout_s = int(vm_timeout_s)
        self.cpu = cpu
        self.root = root
        self.python = python
        self._sdk = sdk
        self._sb: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def sandbox_id(self) -> str | None:
        return getattr(self._sb, "object_id", None)

    async def create(self, limits: Limits) -> dict[str, Any]:
        missing = _credentials_missing()
        if missing is not None:
            raise SandboxError(f"modal: {missing}")
        modal = self._sdk or _load_sdk()
        app = await modal.App.lookup.aio(self.app_name, create_if_missing=True)
        if self.image is not None:
            image = self.image
        elif self.template:
            image = modal.Image.from_registry(self.template)
        else:
            image = modal.Image.debian_slim()
        kwargs: dict[str, Any] = {
            "app": app,
            "image": image,
            "timeout": self.vm_timeout_s,
            "block_network": not limits.network,
        }
        applied: dict[str, Any] = {
            "network": "internet" if limits.network else "none",
            "vm_timeout_s": self.vm_timeout_s,
            "runtime": "gVisor",
            "template": self.template or ("custom image" if self.image else "debian_slim"),
        }
        if limits.memory_bytes is not None:
            kwargs["memory"] = math.ceil(limits.memory_bytes / MiB)  # Modal takes MiB
            applied["memory_mib"] = kwargs["memory"]
        if self.cpu is not None:
            kwargs["cpu"] = self.cpu
            applied["cpu"] = self.cpu
        self._sb = await modal.Sandbox.create.aio(**kwargs)
        return applied

    def _need_sb(self) -> Any:
        if self._sb is None:
            raise SandboxError("modal: the sandbox is not running")
        return self._sb

    async def write_file(self, path: str, data: bytes) -> None:
        await self._need_sb().filesystem.write_bytes.aio(data, path)

    async def read_file(self, path: str) -> bytes:
        try:
            return bytes(await self._need_sb().filesystem.read_bytes.aio(path))
        except Exception as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(path) from None
            raise

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
        # Text, not line-buffered: the stderr sentinel after a cell ends without a newline.
        process = await self._need_sb().exec.aio(*argv, workdir=cwd, env=env, text=True)
        task = asyncio.get_running_loop().create_task(
            self._pump(process, on_stdout, on_stderr, on_exit)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return _ModalProcess(self, process)

    @staticmethod
    async def _pump(
        process: Any, on_stdout: TextSink, on_stderr: TextSink, on_exit: ExitSink
    ) -> None:
        async def forward(stream: Any, sink: TextSink) -> None:
            async for chunk in stream:
                sink(chunk)

        code: int | None = None
        try:
            await asyncio.gather(
                forward(process.stdout, on_stdout), forward(process.stderr, on_stderr)
            )
            code = await process.wait.aio()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the stream broke: the sandbox treats it as dead
            code = None
        on_exit(code)

    async def run(self, argv: list[str], *, timeout_s: float = 30.0) -> int:
        process = await self._need_sb().exec.aio(*argv, timeout=math.ceil(timeout_s))
        return int(await process.wait.aio())

    async def destroy(self) -> None:
        sb, self._sb = self._sb, None
        for task in list(self._tasks):
            task.cancel()
        if sb is not None:
            with contextlib.suppress(Exception):
                await sb.terminate.aio()


class ModalTransport(CloudTransport):
    """Kernels in one Modal sandbox. Takes :class:`ModalProvider`'s arguments (``app_name``,
    ``image``, ``template``, ``vm_timeout_s``, ``cpu``, ``root``, ``python``, ``sdk``) and
    the sandbox's ``limits``."""

    kind = "modal"

    def __init__(self, *, limits: Limits, **provider_options: Any):
        super().__init__(ModalProvider(**provider_options), limits=limits)

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why no Modal sandbox can start here (the SDK or a token is missing), or ``None``."""
        try:
            _load_sdk()
        except SandboxError as exc:
            return str(exc)
        return _credentials_missing()

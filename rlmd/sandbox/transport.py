"""What a transport gives the sandbox session: how a kernel is started somewhere, talked
to, interrupted, killed and asked why it died.

:class:`~rlmd.sandbox.session.SandboxSession` is the whole REPL lifecycle (cells under the
wall limit, interrupts, restarts, re-binding, the messages to the model); a backend is one
:class:`Transport` (``process/``, ``docker/``, ``cloud/``) whose :meth:`Transport.spawn`
returns a :class:`KernelHandle`: one running kernel, the channel to it and the few things
only the transport knows about it.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from rlmd.sandbox.base import CallHandler, SandboxError
from rlmd.sandbox.channel import KernelChannel, KernelDied
from rlmd.sandbox.files import ContextFile
from rlmd.sandbox.limits import Limits

#: bytes asked of a kernel's pipe or socket per read. asyncio's transports ask 256 KiB and
#: shrink the bytes to what came; at or above glibc's mmap threshold (128 KiB until a large
#: block happens to be freed) that is an mmap, an mremap and a munmap for every frame: ~30 us
#: of system time per warm cell, a quarter of the host's CPU (session 23, strace of 5,000
#: cells; bench/RESULTS.md). Below the threshold the buffer comes from the heap.
READ_BYTES = 64 * 1024


def small_reads(transport: asyncio.BaseTransport) -> None:
    """Make ``transport`` (asyncio's read-pipe or socket transport) read at most
    :data:`READ_BYTES` per call. Their ``max_size`` is a class attribute read through the
    instance on every read (CPython 3.10-3.14); any other transport is left as it is."""
    if isinstance(getattr(type(transport), "max_size", None), int):
        transport.max_size = READ_BYTES  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Death:
    """Why a kernel ended.

    Attributes:
        how: a phrase for the model (``"killed by SIGKILL"``, ``"exit code 1"``,
            ``"its container was removed"``).
        limit: the :class:`Limits` field whose enforcement killed it, if one did.
    """

    how: str
    limit: str | None = None


class KernelHandle(KernelChannel):
    """One started kernel (a process, a container, a process in a VM) and its channel.

    Attributes:
        pid: the kernel's process id as the transport reports it (``None`` until known).
        kill_reason: set by the session before it kills the kernel (``"timeout"``,
            ``"interrupt"``); ``None`` if something else ended it.
    """

    pid: int | None = None
    kill_reason: str | None = None

    async def drained(self) -> None:
        """Wait until the transport can take more bytes (default: it always can)."""

    @abc.abstractmethod
    async def interrupt(self) -> None:
        """Fail the host calls in flight and deliver ``SIGINT`` to the kernel
        (``KeyboardInterrupt`` in a running cell).

        Raises:
            Exception: the signal could not be delivered (the session then kills it).
        """

    @abc.abstractmethod
    async def kill(self) -> None:
        """End the kernel now and wait (briefly) until it is gone. Idempotent; never raises
        for a kernel already dead."""

    @abc.abstractmethod
    async def death(self, limits: Limits) -> Death:
        """Why the (dead) kernel ended, waiting briefly for its exit and last output."""

    async def exit_phrase(self) -> str | None:
        """How a kernel that failed to start ended (``"exit code 1"``), after waiting
        briefly for its exit and last output; ``None`` if unknown."""
        return None

    async def wait_hello(self, timeout_s: float, name: str = "the kernel") -> dict[str, Any]:
        """The kernel's hello frame.

        Raises:
            SandboxError: no hello within ``timeout_s`` seconds, or the kernel ended first
                (it is killed; the message, starting with ``name``, says how, with the end
                of its stderr).
        """
        try:
            hello: dict[str, Any] = await asyncio.wait_for(asyncio.shield(self.hello), timeout_s)
            return hello
        except (TimeoutError, KernelDied) as exc:
            how = await self.exit_phrase()
            detail = self.stderr_now().strip()
            await self.kill()
            if isinstance(exc, TimeoutError):
                what = "did not start in time"
            else:
                what = "exited" + (f" at start-up ({how})" if how else "")
            tail = f":\n{detail[-4000:]}" if detail else ""
            raise SandboxError(f"{name} {what}{tail}") from None

    async def facts(self) -> dict[str, Any]:
        """Health facts beyond ``alive``/``pid``/``restarts`` (``health()`` merges them)."""
        return {}


Cleanup = Callable[[], None]


class Transport(abc.ABC):
    """Where kernels run for one sandbox (one working folder, container series or VM).

    Class attributes give the session's defaults for this kind of kernel.
    """

    #: backend name recorded in the trajectory (``"subprocess"``, ``"container"``, ...)
    kind: ClassVar[str] = "abstract"
    #: seconds an interrupted cell has to stop before the kernel is killed
    interrupt_grace_s: ClassVar[float] = 1.0
    #: seconds a kernel may take to start and say hello
    start_timeout_s: ClassVar[float] = 30.0
    #: seconds the session waits for a finished cell's fd-level output
    stderr_wait_s: ClassVar[float] = 5.0

    limits: Limits

    def __init__(self, *, limits: Limits) -> None:
        self.limits = limits

    @staticmethod
    def unavailable_reason() -> str | None:
        """``None`` if this transport can start here, else why not (one line)."""
        return None

    def warm(self) -> None:  # noqa: B027 (optional hook)
        """Begin making the first kernel in the background (see ``Sandbox.warm``)."""

    def after_cell(self) -> None:  # noqa: B027 (optional hook)
        """A cell has ended (called by the session soon after each one, on the event
        loop): background work held back while it ran may start now."""

    @abc.abstractmethod
    async def spawn(self, handler: CallHandler, cap: int, start_timeout_s: float) -> KernelHandle:
        """Start a kernel that has said hello (the first call sets up the working folder,
        container image or VM; later calls are restarts in the same place). ``cap`` is the
        stderr bytes kept per cell.

        Raises:
            SandboxError: it could not start (the message says why, with its stderr).
        """

    async def context_request(self, value: Any, codebase: bool) -> tuple[dict[str, Any], Cleanup]:
        """The request that binds ``value`` as ``context``, and what to do after it (a large
        text may travel through a file; default: inline)."""
        return {"op": "bind_context", "value": value, "codebase": codebase}, _nothing

    def new_context_file(self) -> ContextFile | None:
        """A new codebase file in the kernel's working folder (see
        :meth:`rlmd.sandbox.base.Sandbox.new_context_file`); ``None`` (the default) when
        the kernel reads no files the host writes, or its folder is not made yet."""
        return None

    @abc.abstractmethod
    def isolation(self, kernel: KernelHandle | None) -> dict[str, Any]:
        """The isolation record (see :attr:`rlmd.sandbox.base.Sandbox.isolation`)."""

    @property
    def uncontained(self) -> frozenset[str]:
        """Hostile-code cases this transport cannot contain (see ``Sandbox.uncontained``)."""
        return frozenset()

    @property
    def workdir(self) -> str | None:
        """The kernel's working folder (a host path, or a path in the VM)."""
        return None

    @abc.abstractmethod
    async def upload(self, path: str, data: bytes) -> None:
        """See :meth:`rlmd.sandbox.base.Sandbox.upload`."""

    @abc.abstractmethod
    async def download(self, path: str, max_bytes: int | None = None) -> bytes:
        """See :meth:`rlmd.sandbox.base.Sandbox.download`."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Free everything the transport made (the working folder, the VM). The session
        has killed the current kernel already."""


def _nothing() -> None:
    return None

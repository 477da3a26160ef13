"""What a cloud provider adapter must offer :class:`~rlmd.sandbox.cloud.transport.CloudTransport`.

An adapter knows how to create and destroy one VM, move files in and out of it, start a
process whose stdin/stdout/stderr travel over the provider's authenticated API, and run a
short command (to send a signal). Everything else (the kernel channel, host calls, restarts,
limits, lost variables) is the session and ``transport.py``. Adding a provider is adding one file.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from rlmd.sandbox.limits import Limits

TextSink = Callable[[str], None]
"""Receives a chunk of a process stream, decoded as UTF-8 text (chunks need not end at a line)."""

ExitSink = Callable[[int | None], None]
"""Receives a process's exit code once it has ended (``None``: unknown, e.g. the VM is gone)."""


class RemoteProcess(abc.ABC):
    """A process started in the VM by :meth:`Provider.spawn`."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Send ``data`` (ASCII) to the process's stdin, in order with earlier writes.

        Raises:
            Exception: the provider could not deliver it (the caller treats the process as dead).
        """

    @abc.abstractmethod
    async def kill(self) -> None:
        """Kill the process (best effort; never raises)."""


class Provider(abc.ABC):
    """One VM at a provider. Not thread-safe; used from one event loop.

    Attributes:
        kind: backend name (``"e2b"``, ``"modal"``).
        root: absolute folder inside the VM for rlmd's files (``root/kernel``, ``root/work``).
        python: the interpreter inside the VM (a name on the VM's ``PATH`` or a path).
    """

    kind: str = "abstract"
    root: str = "/tmp/rlmd"
    python: str = "python3"

    @property
    @abc.abstractmethod
    def sandbox_id(self) -> str | None:
        """The provider's id of the VM (``None`` before :meth:`create`)."""

    @abc.abstractmethod
    async def create(self, limits: Limits) -> dict[str, Any]:
        """Create the VM, applying what ``limits`` the provider can (network, memory, ...).

        Returns:
            What was really applied, merged into the sandbox's ``isolation`` record
            (e.g. ``{"network": "none", "memory_mib": 2048}``).

        Raises:
            SandboxError: no credentials, or the provider refused or failed.
        """

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``data`` to the absolute VM ``path``, creating parent folders."""

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """The bytes of the absolute VM ``path``.

        Raises:
            FileNotFoundError: no such file.
        """

    @abc.abstractmethod
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
        """Start ``argv`` in the VM in ``cwd`` with ``env`` added to the VM's own environment
        (never the host's), its streams delivered to the sinks on this event loop."""

    @abc.abstractmethod
    async def run(self, argv: list[str], *, timeout_s: float = 30.0) -> int:
        """Run a short command in the VM and return its exit code (stdout/stderr dropped).

        Raises:
            Exception: the provider failed (the caller decides how bad that is).
        """

    @abc.abstractmethod
    async def destroy(self) -> None:
        """Kill the VM and release it (never raises; safe to call twice)."""

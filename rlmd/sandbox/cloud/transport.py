"""The kernel in a cloud VM, driven through a provider's authenticated process API.

:class:`CloudTransport` is the transport over any provider adapter (``provider.py``): it
creates the VM, uploads the stdlib kernel (``rlmd/kernel``) and ``launcher.py``, and starts
``python3 -I launcher.py ... main.py --framing lines``. The kernel's stdin/stdout, carried as
text by the provider's API, are the channel (one JSON frame per line, see
:mod:`rlmd.kernel.protocol`); its stderr is the fd-level output. So ``llm_query`` and the
other host calls travel back over the same authenticated stream that started the process:
the VM needs no open port, and the host holds every API key.

Limits: ``wall_s`` is enforced by the session (interrupt, then kill and restart);
``cpu_s``, ``memory_bytes``, ``processes``, ``open_files`` and ``file_size_bytes`` become
rlimits set by the launcher before the kernel starts; ``network`` and the VM's size go to the
provider. ``isolation`` records what was really applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import posixpath
import signal
from typing import Any

from rlmd.kernel import KERNEL_DIR, protocol
from rlmd.sandbox.base import CallHandler, SandboxError
from rlmd.sandbox.channel import StderrDrain
from rlmd.sandbox.cloud.provider import Provider, RemoteProcess
from rlmd.sandbox.files import check_size
from rlmd.sandbox.limits import Limits
from rlmd.sandbox.transport import Death, KernelHandle, Transport

log = logging.getLogger(__name__)

_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
_WRITE_CHUNK = 1 << 20  # provider APIs cap one message; 1 MiB stays well under their caps

_RLIMITS = {
    "cpu_s": "RLIMIT_CPU",
    "memory_bytes": "RLIMIT_AS",
    "processes": "RLIMIT_NPROC",
    "open_files": "RLIMIT_NOFILE",
    "file_size_bytes": "RLIMIT_FSIZE",
}


def rlimits_for(limits: Limits) -> dict[str, int]:
    """The ``RLIMIT_*`` values the launcher sets for ``limits`` (seconds and bytes, rounded up)."""
    return {
        name: math.ceil(getattr(limits, field))
        for field, name in _RLIMITS.items()
        if getattr(limits, field) is not None
    }


def _signal_argv(python: str, pid: int, sig: int, *, group: bool) -> list[str]:
    """A command for the VM that sends ``sig`` to ``pid`` (``group``: to its process group,
    the launcher's session). Python rather than kill(1): every image that runs the kernel
    has it."""
    target = "os.getpgid(p)" if group else "p"
    fn = "killpg" if group else "kill"
    code = (
        "import os,sys\np=int(sys.argv[1])\n"
        f"try: os.{fn}({target}, int(sys.argv[2]))\nexcept OSError: pass"
    )
    return [python, "-I", "-c", code, str(pid), str(sig)]


class CloudKernel(KernelHandle):
    """One kernel process in the VM: its line channel over the provider's process stream
    (the protocol itself is :class:`~rlmd.sandbox.channel.KernelChannel`)."""

    # A cancelled host call gets no reply: the cell is stopped by a signal sent through the
    # provider, or the kernel is killed.
    reply_on_cancel = False
    pid: int = 0  # inside the VM, from the hello frame

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int, provider: Provider
    ):
        super().__init__(loop, handler, cap)
        self.provider = provider
        self.process: RemoteProcess | None = None
        self.pid = 0  # inside the VM, from the hello frame
        self._parts: list[str] = []
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"remote kernel {self.pid}"

    def encode(self, obj: dict[str, Any]) -> bytes:
        return protocol.encode_line(obj)

    def attach(self, process: RemoteProcess) -> None:
        self.process = process
        self._writer = self.loop.create_task(self._write_loop())

    # -- streams from the provider ------------------------------------------------------------

    def on_stdout(self, text: str) -> None:
        if "\n" not in text:
            self._parts.append(text)
            return
        *complete, rest = text.split("\n")
        complete[0] = "".join(self._parts) + complete[0]
        self._parts = [rest] if rest else []
        for line in complete:
            if not line.strip():
                continue
            try:
                msg = protocol.decode(line.encode("utf-8"))
            except ValueError:
                log.error("remote kernel %s sent a malformed frame; killing it", self.pid)
                self.protocol_error = "the kernel sent a message that is not valid JSON"
                self._mark_dead()
                return
            self._dispatch(msg)

    def on_stderr(self, text: str) -> None:
        self.feed_stderr(text.encode("utf-8", "replace"))

    def on_exit(self, code: int | None) -> None:
        if not self.exited.done():
            self.exited.set_result(code)
        self._mark_dead()

    @property
    def returncode(self) -> int | None:
        return self.exited.result() if self.exited.done() else None

    # -- the channel --------------------------------------------------------------------------

    def _on_hello(self, msg: dict[str, Any]) -> None:
        self.pid = int(msg.get("pid") or 0)
        self.drain = StderrDrain(str(msg.get("token", "")), self.cap)
        # What came before the hello is the VM's login noise (a shell's profile), not
        # any cell's output.
        if self._early_stderr:
            log.debug("remote kernel start-up stderr: %r", b"".join(self._early_stderr))
        self._early_stderr.clear()

    def send(self, data: bytes) -> None:
        if not self.dead:
            self._queue.put_nowait(data)

    async def _write_loop(self) -> None:
        """Deliver queued frames in order (a provider write is an API call: one at a time)."""
        assert self.process is not None
        while True:
            data = await self._queue.get()
            try:
                for i in range(0, len(data), _WRITE_CHUNK):
                    await self.process.write(data[i : i + _WRITE_CHUNK])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: the stream is gone
                log.warning("writing to remote kernel %s failed: %r", self.pid, exc)
                self._mark_dead()
                return

    def _mark_dead(self) -> None:
        if not self.dead and self._writer is not None:
            self._writer.cancel()
        super()._mark_dead()

    def describe_exit(self) -> str:
        code = self.returncode
        if code is None:
            return "the stream to it closed"
        if code == -1:  # E2B's envd (Go) reports every death by a signal as -1
            return "killed by a signal"
        number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
        if number:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(number).name}"
        return f"exit code {code}"

    async def interrupt(self) -> None:
        """``SIGINT`` to the kernel, sent by a short command through the provider (a host
        call in flight gets no reply: the signal stops the cell).

        Raises:
            Exception: the provider could not deliver it.
        """
        if self.dead or not self.pid:
            return
        argv = _signal_argv(self.provider.python, self.pid, signal.SIGINT, group=False)
        await asyncio.wait_for(self.provider.run(argv), 10)

    async def kill(self) -> None:
        """Kill the kernel's process group in the VM, then its process (best effort): the
        VM's end takes the kernel with it, but a kill may fail or (E2B's debug mode) do
        nothing."""
        self._mark_dead()
        if self.pid:
            argv = _signal_argv(self.provider.python, self.pid, signal.SIGKILL, group=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.provider.run(argv), 10)
        if self.process is not None:
            await self.process.kill()

    async def exit_phrase(self) -> str | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 1.0)
        return self.describe_exit()

    async def facts(self) -> dict[str, Any]:
        return {"sandbox_id": self.provider.sandbox_id}

    async def death(self, limits: Limits) -> Death:
        """How it exited; ``SIGXCPU`` under a CPU limit is that limit."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 2)
        how = self.describe_exit()
        if how == "killed by SIGXCPU" and limits.cpu_s is not None:
            return Death(how, "cpu_s")
        return Death(how)


_TOO_LARGE = 3
_SIZE_CHECK = '[ -f "$1" ] || exit 0; n=$(wc -c < "$1") || exit 0; [ "$n" -le "$2" ] || exit 3'
"""Exit status 3 when the regular file ``$1`` in the VM is longer than ``$2`` bytes (run
before a bounded download; anything else is left to the read)."""


class CloudTransport(Transport):
    """Kernels in one cloud VM (see the module docstring); a provider module subclasses it
    to build its :class:`~rlmd.sandbox.cloud.provider.Provider`.

    Args:
        provider: the VM adapter.
        limits: resource limits (see the module docstring).
    """

    kind = "remote"
    interrupt_grace_s = 3.0
    start_timeout_s = 180.0
    stderr_wait_s = 10.0

    def __init__(self, provider: Provider, *, limits: Limits):
        self.provider = provider
        self.limits = limits
        self._applied: dict[str, Any] = {}
        self._rlimits: dict[str, Any] = {}
        self._booted = False

    # -- paths in the VM ----------------------------------------------------------------------

    @property
    def kernel_dir(self) -> str:
        return posixpath.join(self.provider.root, "kernel")

    @property
    def workdir(self) -> str:
        """The kernel's working folder in the VM (``upload``/``download`` paths are under it)."""
        return posixpath.join(self.provider.root, "work")

    def _vm_path(self, path: str) -> str:
        norm = posixpath.normpath(path) if path else ""
        if not path or "\x00" in path or path.startswith("/") or norm in (".", ".."):
            raise ValueError(f"path {path!r} must be relative to the working folder")
        if norm.startswith("../"):
            raise ValueError(f"path {path!r} escapes the working folder")
        return posixpath.join(self.workdir, norm)

    # -- the record ---------------------------------------------------------------------------

    @property
    def uncontained(self) -> frozenset[str]:
        """The VM's disk is the provider's: rlmd does not cap the working folder."""
        return frozenset({"fill_disk"})

    def isolation(self, kernel: KernelHandle | None) -> dict[str, Any]:
        return {
            "backend": self.kind,
            "isolated": True,
            "process": True,
            "vm": True,
            "network": "none" if not self.limits.network else "internet",
            "filesystem": "vm",
            "env": "clean",
            "namespaces": False,
            "seccomp": False,
            "rlimits": self._rlimits or False,
            "host_channel": "provider API stream (authenticated), no open port",
            "workdir": self.workdir,
            "sandbox_id": self.provider.sandbox_id,
            "limits": self.limits.to_dict(),
            "enforced": self._enforced(),
            **self._applied,
        }

    def _enforced(self) -> dict[str, str | None]:
        """How each limit is really enforced (``None``: it is not), from what the provider
        accepted and the launcher's report (all ``None`` but the host's own before start)."""
        lim = self.limits
        applied = set((self._rlimits or {}).get("applied", []))
        out: dict[str, str | None] = {
            "wall_s": "host timer, SIGINT, then a kernel restart" if lim.wall_s else None
        }
        for field, name in _RLIMITS.items():
            out[field] = name if getattr(lim, field) is not None and name in applied else None
        if out["memory_bytes"] and "memory_mib" in self._applied:
            out["memory_bytes"] += f" + {self.kind} memory {self._applied['memory_mib']} MiB"
        out["disk_bytes"] = None  # the provider's disk; not limited by rlmd
        out["output_bytes"] = "host cap" if lim.output_bytes else None
        blocked = self._applied.get("network") == "none"
        out["network"] = f"{self.kind}: no internet access" if blocked else None
        return out

    # -- kernels ------------------------------------------------------------------------------

    async def spawn(self, handler: CallHandler, cap: int, start_timeout_s: float) -> KernelHandle:
        """A kernel in the VM (created first), or in a new VM if the old one is gone.

        Raises:
            SandboxError: no credentials, the provider failed, or the kernel did not start.
        """
        if not self._booted:
            await self._boot()
            kernel = await self._start_kernel(handler, cap, start_timeout_s)
            with contextlib.suppress(FileNotFoundError, ValueError):
                report = await self.provider.read_file(posixpath.join(self.kernel_dir, "rl.json"))
                self._rlimits = json.loads(report)
            return kernel
        try:
            return await self._start_kernel(handler, cap, start_timeout_s)
        except SandboxError as exc:
            # The VM itself may have ended (provider timeout, crash): one new VM.
            log.warning("%s: restarting the kernel failed (%s); creating a new VM", self.kind, exc)
            await self.provider.destroy()
            await self._boot()
            return await self._start_kernel(handler, cap, start_timeout_s)

    async def _boot(self) -> None:
        """Create the VM and upload the kernel files."""
        try:
            self._applied = dict(await self.provider.create(self.limits))
            # Every module of the stdlib-only kernel package, whatever it grows to hold.
            names = sorted(n for n in os.listdir(KERNEL_DIR) if n.endswith(".py"))
            files = {name: os.path.join(KERNEL_DIR, name) for name in names}
            files["launcher.py"] = _LAUNCHER
            blobs = {}
            for name, local in files.items():
                with open(local, "rb") as f:
                    blobs[posixpath.join(self.kernel_dir, name)] = f.read()
            # In parallel: each write is a round trip to the provider.
            await asyncio.gather(*(self.provider.write_file(p, d) for p, d in blobs.items()))
            self._booted = True
        except SandboxError:
            raise
        except Exception as exc:  # noqa: BLE001 - provider SDK errors come in many classes
            raise SandboxError(f"{self.kind}: could not create the sandbox: {exc}") from exc

    @property
    def _tmpdir(self) -> str:
        return posixpath.join(self.provider.root, "tmp")

    async def _start_kernel(
        self, handler: CallHandler, cap: int, start_timeout_s: float
    ) -> CloudKernel:
        """Start a kernel in the VM and wait for its hello.

        Raises:
            SandboxError: it could not be started or did not say hello in time.
        """
        kernel = CloudKernel(asyncio.get_running_loop(), handler, cap, self.provider)
        kdir = self.kernel_dir
        argv = [
            self.provider.python,
            "-I",
            posixpath.join(kdir, "launcher.py"),
            json.dumps(
                {
                    "dirs": [self.workdir, self._tmpdir],
                    "cwd": self.workdir,
                    "rlimits": rlimits_for(self.limits),
                    "report": posixpath.join(kdir, "rl.json"),
                }
            ),
            posixpath.join(kdir, "main.py"),
            "--framing",
            "lines",
        ]
        # Only these are added to the VM's own environment: no host variable (API keys
        # included) ever reaches the sandbox.
        env = {
            "HOME": self.workdir,
            "TMPDIR": self._tmpdir,
            "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
        }
        try:
            process = await self.provider.spawn(
                argv,
                cwd=kdir,  # exists already; the launcher makes the working folder and enters it
                env=env,
                on_stdout=kernel.on_stdout,
                on_stderr=kernel.on_stderr,
                on_exit=kernel.on_exit,
            )
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"{self.kind}: could not start the kernel: {exc}") from exc
        kernel.attach(process)
        await kernel.wait_hello(start_timeout_s, f"{self.kind}: the kernel")
        return kernel

    # -- files --------------------------------------------------------------------------------

    async def upload(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` under the kernel's working folder in the VM.

        Raises:
            ValueError: ``path`` is absolute or escapes the working folder.
            SandboxError: the provider failed.
        """
        target = self._vm_path(path)
        try:
            await self.provider.write_file(target, data)
        except Exception as exc:  # noqa: BLE001 - provider errors come in many classes
            raise SandboxError(f"{self.kind}: upload of {path!r} failed: {exc}") from exc

    async def download(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of ``path`` under the kernel's working folder in the VM. The providers'
        APIs read a file whole, so with ``max_bytes`` its size is checked in the VM first (a
        file of gigabytes would fill the daemon) and again after (it may have grown).

        Raises:
            FileNotFoundError: no such file. ValueError: ``path`` escapes the working folder,
            or the file is over ``max_bytes``. SandboxError: the provider failed.
        """
        target = self._vm_path(path)
        if max_bytes is not None:
            try:
                code = await self.provider.run(
                    ["sh", "-c", _SIZE_CHECK, "sh", target, str(max_bytes)]
                )
            except Exception as exc:  # noqa: BLE001
                raise SandboxError(f"{self.kind}: size check of {path!r} failed: {exc}") from exc
            if code == _TOO_LARGE:
                raise ValueError(f"{path} is larger than the {max_bytes:,} bytes allowed")
        try:
            data = await self.provider.read_file(target)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from None
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"{self.kind}: download of {path!r} failed: {exc}") from exc
        return check_size(data, path, max_bytes)

    async def close(self) -> None:
        """Destroy the VM."""
        await self.provider.destroy()

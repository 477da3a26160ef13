"""The kernel in a cloud VM, driven through a provider's authenticated process API.

:class:`RemoteSandbox` is the whole backend except the provider calls (``provider.py``): it
creates the VM, uploads the stdlib kernel (``rlmd/kernel``) and ``launcher.py``, and starts
``python3 -I launcher.py ... main.py --framing lines``. The kernel's stdin/stdout, carried as
text by the provider's API, are the channel (one JSON frame per line, see
:mod:`rlmd.kernel.protocol`); its stderr is the fd-level output. So ``llm_query`` and the
other host calls travel back over the same authenticated stream that started the process:
the VM needs no open port, and the host holds every API key.

Limits: ``wall_s`` is enforced here (the cell is abandoned, the kernel killed and restarted);
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
import time
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox._channel import KernelChannel, StderrDrain
from rlmd.sandbox._channel import KernelDied as _KernelDied
from rlmd.sandbox._common import (
    note_stop,
    restarted_text,
    result_from_kernel,
    timed_out_text,
    wait,
    with_notice,
)
from rlmd.sandbox._ops import KernelOps, kernel_error
from rlmd.sandbox.base import CallHandler, CellResult, Sandbox, SandboxError
from rlmd.sandbox.cloud.provider import Provider, RemoteProcess
from rlmd.sandbox.limits import Limits, limit_hint, limit_message

log = logging.getLogger(__name__)

_KERNEL_SRC = os.path.dirname(os.path.abspath(protocol.__file__))
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
_WRITE_CHUNK = 1 << 20  # provider APIs cap one message; 1 MiB stays well under their caps

_RLIMITS = {
    "cpu_s": "RLIMIT_CPU",
    "memory_bytes": "RLIMIT_AS",
    "processes": "RLIMIT_NPROC",
    "open_files": "RLIMIT_NOFILE",
    "file_size_bytes": "RLIMIT_FSIZE",
}

_DEFAULT = object()


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


class _RemoteKernel(KernelChannel):
    """One kernel process in the VM: its line channel over the provider's process stream
    (the protocol itself is :class:`~rlmd.sandbox._channel.KernelChannel`)."""

    # A cancelled host call gets no reply: the cell is stopped by a signal sent through the
    # provider, or the kernel is killed.
    reply_on_cancel = False

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: CallHandler, cap: int):
        super().__init__(loop, handler, cap)
        self.process: RemoteProcess | None = None
        self.pid = 0  # inside the VM, from the hello frame
        self._parts: list[str] = []
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self.why: str | None = None  # set when rlmd itself ended the kernel
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
                self.why = "it sent a malformed frame"
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


class RemoteSandbox(KernelOps, Sandbox):
    """The kernel in a cloud VM (see the module docstring); providers subclass or wrap it.

    Args:
        provider: the VM adapter (:class:`~rlmd.sandbox.cloud.provider.Provider`).
        limits: resource limits, a :class:`Limits` or its dict form (default
            :class:`Limits()`); see the module docstring.

    Raises:
        ValueError: an unknown or invalid limit.
        timeout_s: default wall-clock limit per cell in seconds (default ``limits.wall_s``;
            ``None``: no limit).
        op_timeout_s: limit for the other operations (binding, variables), seconds.
        start_timeout_s: how long creating the VM and starting the kernel may take, seconds.
        max_output_chars: cap per stream per cell (default ``limits.output_bytes``).
        interrupt_grace_s: how long an interrupted cell may take to stop before the kernel is
            killed and restarted, seconds.

    The :data:`CallHandler` must not call back into this sandbox (that would deadlock on the
    sandbox's lock while the cell waits for the handler).
    """

    kind = "remote"

    def __init__(
        self,
        provider: Provider,
        *,
        limits: Limits | dict[str, Any] | None = None,
        timeout_s: float | None | object = _DEFAULT,
        op_timeout_s: float = 120.0,
        start_timeout_s: float = 180.0,
        max_output_chars: int | None = None,
        interrupt_grace_s: float = 3.0,
    ):
        self.provider = provider
        # A dict is a config file's [sandbox_options.limits] table.
        self.limits = limits if isinstance(limits, Limits) else Limits.from_dict(limits)
        self.timeout_s: float | None = (
            self.limits.wall_s if timeout_s is _DEFAULT else timeout_s  # type: ignore[assignment]
        )
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        cap = max_output_chars or self.limits.output_bytes or protocol.DEFAULT_MAX_OUTPUT
        self.max_output_chars = int(cap)
        self.interrupt_grace_s = interrupt_grace_s
        self._handler: CallHandler | None = None
        self._kernel: _RemoteKernel | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._running: tuple[_RemoteKernel, int] | None = None
        self._interrupted = False
        self._applied: dict[str, Any] = {}
        self._rlimits: dict[str, Any] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._init_rebind_state()
        self.restarts = 0

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

    # -- public -------------------------------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
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
        out["output_bytes"] = "host cap" if lim.output_bytes else None
        blocked = self._applied.get("network") == "none"
        out["network"] = f"{self.kind}: no internet access" if blocked else None
        return out

    @property
    def pid(self) -> int | None:
        """The current kernel's process id inside the VM (changes on restart)."""
        return self._kernel.pid if self._kernel is not None else None

    async def start(self, handler: CallHandler) -> None:
        """Create the VM and start the kernel. On a started sandbox: keep the REPL and serve
        calls with ``handler`` from now on.

        Raises:
            SandboxError: no credentials, the provider failed, or the kernel did not start
                (the VM is destroyed again).
        """
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is not None:
            if asyncio.get_running_loop() is not self._kernel.loop:
                raise SandboxError("the sandbox was started on another event loop")
            self._handler = handler
            self._kernel.handler = handler
            return
        self._handler = handler
        try:
            await self._boot()
            self._kernel = await self._spawn()
            with contextlib.suppress(FileNotFoundError, ValueError):
                report = await self.provider.read_file(posixpath.join(self.kernel_dir, "rl.json"))
                self._rlimits = json.loads(report)
        except BaseException:
            await self.close()
            raise

    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        async with self._lock:
            await self._op({"op": "bind_context", "value": value, "codebase": codebase})
            self._context = (value, codebase)

    async def execute(self, code: str, *, timeout_s: float | None = None) -> CellResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        async with self._lock:
            t0 = time.perf_counter()
            kernel = await self._live_kernel()
            notice, self._notice = self._notice, None
            timed_out = False
            try:
                rid, fut = kernel.request(
                    {"op": "exec", "code": code, "max_output": self.max_output_chars}
                )
                self._running, self._interrupted = (kernel, rid), False
                try:
                    msg = await wait(asyncio.shield(fut), timeout)
                except TimeoutError:
                    # Past the wall-clock limit: interrupt, then kill if it will not stop.
                    timed_out = True
                    await self._stop_cell(kernel)
                    msg = await fut  # answered by now (requests are served in order) or dead
            except asyncio.CancelledError:
                # Nobody waits for this cell any more: interrupt it (killing the kernel if it
                # does not stop); the next operation finds out which happened.
                self._in_background(self._stop_cell(kernel))
                raise
            except _KernelDied:
                if self._closed:
                    raise SandboxError("the sandbox was closed while the cell ran") from None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(kernel.exited), 2)
                what = (
                    timed_out_text(timeout, stopped=False)
                    if timed_out and timeout is not None
                    else self._death_message(kernel)
                )
                return with_notice(await self._after_death(kernel, t0, what, timed_out), notice)
            finally:
                self._running = None
            if not msg.get("ok"):
                raise self._error(msg)
            result = await self._result(kernel, rid, msg["result"], t0)
            note_stop(result, timeout, timed_out=timed_out, interrupted=self._interrupted)
            return with_notice(result, notice)

    async def _result(
        self, kernel: _RemoteKernel, rid: int, res: dict[str, Any], t0: float
    ) -> CellResult:
        """A finished cell's result, with its fd-level stderr and a hint naming the limit
        an error shows was hit (``MemoryError`` under the memory limit, ...)."""
        fd_text = await kernel.cell_stderr(rid, res, 10.0)
        self._user_names = list(res.get("names") or [])
        result = result_from_kernel(res, time.perf_counter() - t0, fd_text)
        hint = limit_hint(result.error, self.limits)
        if hint:
            result.error = (result.error or "") + hint + "\n"
        return result

    async def interrupt(self) -> bool:
        """Send ``SIGINT`` to the kernel (``KeyboardInterrupt`` in the running cell, state
        kept); if the cell has not stopped after ``interrupt_grace_s`` the kernel is killed
        and the running :meth:`execute` reports the restart. Returns ``True`` if a cell was
        running."""
        running = self._running
        if running is None or running[0].dead:
            return False
        self._interrupted = True
        await self._stop_cell(running[0])
        return True

    async def restart(self) -> list[str]:
        """Replace the kernel with a fresh one (same VM), binding context, tools and
        ``history`` again. Returns the user variables that were lost.

        Raises:
            SandboxError: closed, not started, or the new kernel failed.
        """
        async with self._lock:
            await self._live_kernel()
            lost = list(self._user_names)
            await self._restart()
            return lost

    async def upload(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` under the kernel's working folder in the VM.

        Raises:
            ValueError: ``path`` is absolute or escapes the working folder.
            SandboxError: the sandbox is not running, or the provider failed.
        """
        target = self._vm_path(path)
        self._check_open()
        try:
            await self.provider.write_file(target, bytes(data))
        except Exception as exc:  # noqa: BLE001 - provider errors come in many classes
            raise SandboxError(f"{self.kind}: upload of {path!r} failed: {exc}") from exc

    async def download(self, path: str) -> bytes:
        """The bytes of ``path`` under the kernel's working folder in the VM.

        Raises:
            FileNotFoundError: no such file. ValueError: ``path`` escapes the working folder.
            SandboxError: the sandbox is not running, or the provider failed.
        """
        target = self._vm_path(path)
        self._check_open()
        try:
            return await self.provider.read_file(target)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from None
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"{self.kind}: download of {path!r} failed: {exc}") from exc

    async def health(self) -> dict[str, Any]:
        kernel = self._kernel
        return {
            "alive": kernel is not None and not kernel.dead and not self._closed,
            "pid": kernel.pid if kernel is not None else None,
            "restarts": self.restarts,
            "backend": self.kind,
            "sandbox_id": self.provider.sandbox_id,
        }

    async def close(self) -> None:
        """Kill the kernel and destroy the VM. Safe to call twice."""
        self._closed = True
        kernel, self._kernel = self._kernel, None
        for task in list(self._background):
            task.cancel()
        if kernel is not None:
            # The VM's end takes the kernel with it, but the kill may fail or (E2B's debug
            # mode) do nothing: end the kernel's process group first.
            await self._kill(kernel)
        await self.provider.destroy()

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._kernel is None:
            raise SandboxError("the sandbox is not started")

    def _in_background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _boot(self) -> None:
        """Create the VM and upload the kernel files."""
        try:
            self._applied = dict(await self.provider.create(self.limits))
            # Every module of the stdlib-only kernel package, whatever it grows to hold.
            names = sorted(n for n in os.listdir(_KERNEL_SRC) if n.endswith(".py"))
            files = {name: os.path.join(_KERNEL_SRC, name) for name in names}
            files["launcher.py"] = _LAUNCHER
            blobs = {}
            for name, local in files.items():
                with open(local, "rb") as f:
                    blobs[posixpath.join(self.kernel_dir, name)] = f.read()
            # In parallel: each write is a round trip to the provider.
            await asyncio.gather(*(self.provider.write_file(p, d) for p, d in blobs.items()))
        except SandboxError:
            raise
        except Exception as exc:  # noqa: BLE001 - provider SDK errors come in many classes
            raise SandboxError(f"{self.kind}: could not create the sandbox: {exc}") from exc

    @property
    def _tmpdir(self) -> str:
        return posixpath.join(self.provider.root, "tmp")

    async def _spawn(self) -> _RemoteKernel:
        """Start a kernel in the VM and wait for its hello.

        Raises:
            SandboxError: it could not be started or did not say hello in time.
        """
        assert self._handler is not None
        kernel = _RemoteKernel(asyncio.get_running_loop(), self._handler, self.max_output_chars)
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
        try:
            await asyncio.wait_for(asyncio.shield(kernel.hello), self.start_timeout_s)
        except (TimeoutError, _KernelDied) as exc:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(kernel.exited), 1.0)
            detail = kernel.stderr_now().strip()
            await self._kill(kernel)
            what = (
                "did not start in time"
                if isinstance(exc, TimeoutError)
                else f"exited at start-up ({kernel.describe_exit()})"
            )
            raise SandboxError(
                f"{self.kind}: the kernel {what}" + (f":\n{detail[-4000:]}" if detail else "")
            ) from None
        return kernel

    async def _kill(self, kernel: _RemoteKernel) -> None:
        """Kill the kernel's process group in the VM, then its process (best effort)."""
        kernel._mark_dead()
        if kernel.pid:
            argv = _signal_argv(self.provider.python, kernel.pid, signal.SIGKILL, group=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.provider.run(argv), 10)
        if kernel.process is not None:
            await kernel.process.kill()

    async def _stop_cell(self, kernel: _RemoteKernel) -> None:
        """Interrupt the running cell (SIGINT to the kernel); kill the kernel if it is still
        busy ``interrupt_grace_s`` later."""
        if kernel.dead or not kernel.pid:
            return
        argv = _signal_argv(self.provider.python, kernel.pid, signal.SIGINT, group=False)
        try:
            await asyncio.wait_for(self.provider.run(argv), self.interrupt_grace_s + 10)
            # Requests are served in order: the ping is answered once the cell has ended.
            _, fut = kernel.request({"op": "ping"})
            await wait(fut, self.interrupt_grace_s)
        except (TimeoutError, _KernelDied):
            kernel.why = f"it did not stop within {self.interrupt_grace_s:g} s of an interrupt"
            await self._kill(kernel)
        except Exception as exc:  # noqa: BLE001 - the provider failed: do not leave it running
            kernel.why = f"the interrupt could not be delivered ({exc})"
            await self._kill(kernel)

    def _death_message(self, kernel: _RemoteKernel) -> str:
        if kernel.why:
            return f"the kernel was stopped because {kernel.why}"
        how = kernel.describe_exit()
        if how == "killed by SIGXCPU" and self.limits.cpu_s is not None:
            return limit_message("cpu_s", self.limits.cpu_s, restarted=False).rstrip(".")
        return f"the kernel process died while running the cell ({how})"

    async def _after_death(
        self, kernel: _RemoteKernel, t0: float, what: str, timed_out: bool
    ) -> CellResult:
        """Restart after the running cell was lost and say so in its result."""
        partial = kernel.stderr_now()
        lost = list(self._user_names)
        await self._restart()
        return CellResult(
            stderr=partial,
            error=restarted_text(what, lost),
            timed_out=timed_out,
            kernel_restarted=True,
            lost_variables=lost,
            duration_s=time.perf_counter() - t0,
        )

    async def _drop_kernel(self) -> None:
        old, self._kernel = self._kernel, None
        if old is not None:
            await self._kill(old)

    async def _new_kernel(self) -> None:
        """A fresh kernel in the VM, or in a new VM if the old one is gone."""
        try:
            self._kernel = await self._spawn()
        except SandboxError as exc:
            # The VM itself may have ended (provider timeout, crash): one new VM.
            log.warning("%s: restarting the kernel failed (%s); creating a new VM", self.kind, exc)
            await self.provider.destroy()
            await self._boot()
            self._kernel = await self._spawn()

    async def _live_kernel(self) -> _RemoteKernel:
        """The current kernel, restarted first if it died between operations."""
        self._check_open()
        kernel = self._kernel
        assert kernel is not None
        if kernel.dead:
            how = kernel.why or kernel.describe_exit()
            log.warning("remote kernel %s died between cells (%s); restarting", kernel.pid, how)
            await self._restart_noting(
                f"the kernel died before this cell ({how}) and was restarted"
            )
            assert self._kernel is not None
            kernel = self._kernel
        return kernel

    async def _live(self) -> _RemoteKernel:
        return await self._live_kernel()

    async def _op_died(self, kernel: _RemoteKernel) -> str:
        return f"the kernel died ({kernel.describe_exit()})"

    async def _op_raw(self, obj: dict[str, Any]) -> Any:
        assert self._kernel is not None
        _, fut = self._kernel.request(obj)
        msg = await wait(fut, self.op_timeout_s)
        if not msg.get("ok"):
            raise self._error(msg)
        return msg.get("result")

    _error = staticmethod(kernel_error)

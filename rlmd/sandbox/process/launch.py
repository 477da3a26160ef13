"""Starting kernel processes, and one spare started ahead.

One ``python -I -S rlmd/kernel/main.py --site-packages ...`` per sandbox (``-I`` without
``-S`` for an interpreter other than the host's own: see :mod:`rlmd.kernel.serve`), in its
own session (process group), with a private temporary working folder and a clean
environment, under the isolation of :mod:`rlmd.sandbox.process.isolate`.

Starting a Python process costs tens of milliseconds, and every run and child run starts a
kernel. So once a process has started a second kernel with the same interpreter and
environment, it keeps one spare kernel process started ahead (:data:`SPARES`): the next
start takes it (its start-up is then already done or under way) and a new spare is started
in the background. Spares are killed at exit or by :func:`close_spare_kernels`;
``create_sandbox("subprocess", spare_kernel=False)`` neither takes nor keeps one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from rlmd.kernel import KERNEL_DIR, KERNEL_MAIN
from rlmd.sandbox import workdirs
from rlmd.sandbox.base import SandboxError
from rlmd.sandbox.process import isolate
from rlmd.sandbox.spares import SparePool

log = logging.getLogger(__name__)


def killpg(pid: int) -> None:
    """SIGKILL the process group of ``pid`` and, when ``pid`` is a namespace wrapper, its
    children: the kernel runs in a session of its own there (``bwrap --new-session``), and
    killing it, PID 1 of its namespace, ends everything in the namespace."""
    for child in children(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """Process ids of ``pid``'s children, forked by any of its threads (empty if it is gone
    or has none)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


@dataclass(frozen=True)
class LaunchSpec:
    """How to start a kernel process; processes started from equal specs are
    interchangeable (the working folder aside: ``HOME`` and ``TMPDIR`` point at it)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # before HOME / TMPDIR
    extra_env: tuple[tuple[str, str], ...]  # after them (may override them)
    isolation: isolate.IsolationConfig | None = None

    def environ(self, workdir: str) -> dict[str, str]:
        return {**dict(self.env), "HOME": workdir, "TMPDIR": workdir, **dict(self.extra_env)}


OWN_EDITABLE_PTH = "__editable__.rlmd-"
"""Name prefix of the ``.pth`` file of an editable install of rlmd (setuptools): the kernel
leaves it out (see :mod:`rlmd.kernel.serve`)."""


@functools.cache
def _host_site_args() -> tuple[str, ...]:
    """What ``site`` gives this interpreter, as arguments for the kernel (see
    :mod:`rlmd.kernel.serve`): its site-packages folders (not the user's: ``-I`` never let the
    kernel see them) and its prefixes."""
    import site

    args: list[str] = []
    for folder in site.getsitepackages():
        args += ["--site-packages", folder]
    args += ["--skip-pth", OWN_EDITABLE_PTH]
    return (*args, "--prefix", sys.prefix, "--exec-prefix", sys.exec_prefix)


def kernel_argv(python: str) -> tuple[str, ...]:
    if python == sys.executable:  # the host's own site-packages are the right ones
        return (python, "-I", "-S", KERNEL_MAIN, *_host_site_args())
    return (python, "-I", KERNEL_MAIN)


def _fresh(source: str, cache: str) -> bool:
    """``cache`` is bytecode ``import`` takes for ``source`` as it is: this interpreter's
    magic number, and the source's modification time and size recorded (a hash-based
    ``.pyc``, which an installer may write, is left to ``import`` to check)."""
    import importlib.util

    try:
        with open(cache, "rb") as f:
            head = f.read(16)
        st = os.stat(source)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") != 0:
        return True
    return head[8:16] == (
        (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )


@functools.cache
def compile_kernel() -> list[str]:
    """Write the kernel modules' bytecode cache (``__pycache__``) where it is missing or
    stale, once per process; returns the modules compiled.

    The hardened kernel cannot write it itself (the folder is read-only inside the sandbox,
    and the kernel runs as another uid), so without this every start compiled ~2,000 lines
    of source again (~50 ms here), e.g. in a fresh checkout or after an edit when the host
    runs with ``PYTHONDONTWRITEBYTECODE`` (which the kernel's ``-I`` would have ignored).
    ``main.py`` is a script, compiled at every start whatever is cached. A folder this
    process may not write (a system-wide install, where the installer compiled it) is left
    as it is."""
    import py_compile

    done: list[str] = []
    tag = sys.implementation.cache_tag
    try:
        names = sorted(os.listdir(KERNEL_DIR))
    except OSError:
        return done
    for name in names:
        if not name.endswith(".py") or name == "main.py" or tag is None:
            continue
        source = os.path.join(KERNEL_DIR, name)
        # Where the kernel looks (``-I``, no ``-O``): not where this process would, which
        # ``-O``, ``PYTHONOPTIMIZE`` or ``PYTHONPYCACHEPREFIX`` move.
        cache = os.path.join(KERNEL_DIR, "__pycache__", f"{name[:-3]}.{tag}.pyc")
        if _fresh(source, cache):
            continue
        try:
            py_compile.compile(
                source,
                cfile=cache,
                doraise=True,
                optimize=0,
                invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
            )
        except (OSError, py_compile.PyCompileError) as exc:
            log.debug("cannot write the kernel's bytecode cache %s: %s", cache, exc)
            continue
        done.append(name)
    return done


@functools.cache
def isolation_of(config: isolate.IsolationConfig) -> isolate.Isolation:
    """The (cached) isolation builder of ``config``: detection runs once per process."""
    return isolate.Isolation(config)


class KernelProcess:
    """A started kernel process (pipes on stdin/stdout/stderr, its own session) not yet
    attached to an event loop, with its isolation (``launch``: cgroups to read and remove)."""

    def __init__(self, popen: subprocess.Popen[bytes], workdir: str, launch: isolate.Launch):
        self.popen = popen
        self.workdir = workdir
        self.launch = launch

    def discard(self) -> None:
        """Kill its process group, reap it and remove its working folder."""
        killpg(self.popen.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.launch.remove_cgroups()
        workdirs.remove(self.workdir)


def launch(spec: LaunchSpec, workdir: str | None = None) -> KernelProcess:
    """Start a kernel process (returns once it is forked, ~1 ms; its start-up goes on), in
    ``workdir``, or in a new private folder.

    Raises:
        SandboxError: the interpreter cannot be executed.
    """
    if spec.argv[0] == sys.executable:  # the cache is this interpreter's
        compile_kernel()
    owned = workdir is None
    size = spec.isolation.limits.disk_bytes if spec.isolation is not None else None
    folder = workdirs.make("sandbox", size) if workdir is None else workdir
    plan: isolate.Launch | None = None
    try:
        if spec.isolation is not None:
            iso = isolation_of(spec.isolation)
            if owned and iso.sandbox_uid is not None:
                # The kernel's uid owns its folder; 0o711: bwrap (root without
                # capabilities) must still enter it, nobody else may list it.
                os.chown(folder, iso.sandbox_uid, iso.sandbox_uid)
                os.chmod(folder, 0o711)
            plan = iso.launch([*spec.argv, *iso.kernel_args()], folder)
        else:
            plan = isolate.Launch(argv=list(spec.argv))
        popen = subprocess.Popen(
            plan.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=folder,
            env=spec.environ(folder),
            start_new_session=True,
            pass_fds=plan.pass_fds,
        )
    except (OSError, ValueError) as exc:
        if plan is not None:
            plan.close_fds()
            plan.close_info()
            plan.remove_cgroups()
        if owned:
            workdirs.remove(folder)
        raise SandboxError(f"cannot start the kernel with {spec.argv[0]!r}: {exc}") from exc
    plan.close_fds()
    plan.join_early()  # the cgroup move's wait overlaps the sandbox's set-up
    return KernelProcess(popen, folder, plan)


def _close_pipes(spare: KernelProcess) -> None:
    """In a forked child: close the child's copies of a parent's spare's pipes."""
    for pipe in (spare.popen.stdin, spare.popen.stdout, spare.popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class KernelSpares(SparePool[LaunchSpec, KernelProcess]):
    """At most one spare kernel process, started ahead of need for the last launch spec.

    :meth:`take` counts the kernels started per spec; from the second on (a process that
    starts one kernel, such as a single run without child runs, never pays for a spare it
    would not use) it starts a new spare from a background thread after handing out the
    current one. Spares are killed at exit (:func:`atexit`), by :meth:`close`, and when a
    spare is found dead. Thread-safe; not tied to any event loop.
    """

    def __init__(self) -> None:
        super().__init__(
            launch,
            KernelProcess.discard,
            errors=SandboxError,
            what="kernel",
            join_s=5.0,  # it is only forking (~1 ms)
            alive=lambda spare: spare.popen.poll() is None,
            forget_item=_close_pipes,
        )

    def after_fork_in_child(self) -> None:
        """In a forked child the spares are the parent's: forget them (closing the copies of
        their pipes) and start afresh."""
        self.forget()


SPARES = KernelSpares()
atexit.register(functools.partial(SPARES.close, final=True))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SPARES.after_fork_in_child)


def close_spare_kernels() -> None:
    """Kill the spare kernel processes kept for the next sandboxes (also done at exit); new
    ones are started as sandboxes start again."""
    SPARES.close()


def site_args(python: str) -> tuple[str, ...]:
    return _host_site_args() if python == sys.executable else ()

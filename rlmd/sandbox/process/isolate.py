"""Isolation for the subprocess kernel: namespaces, rlimits, cgroups and seccomp.

Everything here is decided and set up by the host, before model code runs:

* **namespaces** through ``bwrap`` (preferred) or ``unshare`` (fallback), detected once per
  process by starting a trivial sandbox. ``bwrap`` gives new PID, IPC, UTS and cgroup
  namespaces (and a network namespace with only loopback when ``limits.network`` is false), a
  fresh ``/proc``, all capabilities dropped, the host file system read-only with the user's
  home, ``/run`` and ``/tmp`` hidden (the interpreter, its site-packages and the kernel bound
  back read-only) and only the working folder writable. The kernel is PID 1 of its namespace,
  so it cannot signal host processes and everything it starts dies with it. When the host is
  root, ``setpriv`` drops the kernel to uid/gid 65534 (root without capabilities still owns,
  and reads, every root-only file) and the working folder is given to that uid.
* **rlimits** (address space, CPU, open files, file size, no core dumps) are passed to the
  kernel, which sets them on itself before it reads its first request.
* **cgroup v1** memory and pids controllers (where this process may create groups, i.e. as
  root on a cgroup-v1 host): one group per kernel process; the kernel joins it through a
  descriptor the host opened, so model code never sees the cgroup file system writable.
* **seccomp** (x86-64 only): a small BPF filter, built here and loaded by ``bwrap``, makes
  ``ptrace``, ``mount``, ``unshare``, ``bpf``, ``keyctl``, module loading and similar calls
  fail with ``EPERM``.

:meth:`Isolation.record` says what a kernel really got; nothing is claimed that was not set.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import shutil
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rlmd.kernel import KERNEL_DIR
from rlmd.sandbox.limits import Limits

log = logging.getLogger(__name__)


MODES = ("auto", "bwrap", "unshare", "none")
"""``isolation=`` choices: ``auto`` picks bwrap, else unshare, else none."""

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PARENT = "rlmd"

# -------------------------------------------------------------------------- detection


def _works(argv: list[str]) -> str | None:
    """``None`` if ``argv`` runs and exits 0 within 5 s, else why not (one line)."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc}"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{argv[0]} exits {done.returncode}: {detail[-1] if detail else 'no message'}"
    return None


@functools.cache
def bwrap_problem() -> str | None:
    """``None`` if ``bwrap`` can make the sandbox the kernel uses, else why not (e.g. not
    installed, or AppArmor blocking user namespaces on Ubuntu 24.04+)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (apt install bubblewrap)"
    true = shutil.which("true") or "/bin/true"
    return _works([exe, *_bwrap_base(network=False), *_bwrap_mounts(), "--", true])


@functools.cache
def unshare_problem() -> str | None:
    """``None`` if ``unshare`` can make PID and network namespaces here, else why not."""
    exe = shutil.which("unshare")
    if exe is None:
        return "unshare is not installed"
    true = shutil.which("true") or "/bin/true"
    return _works([exe, *_unshare_args(network=False), true])


@functools.cache
def cgroup_controllers() -> tuple[str, ...]:
    """The cgroup-v1 controllers (of ``memory``, ``pids``) this process can create groups
    in, under ``/sys/fs/cgroup/<controller>/rlmd``. Empty on cgroup v2 or without rights."""
    found = []
    for controller in ("memory", "pids"):
        base = os.path.join(CGROUP_ROOT, controller)
        if not os.path.exists(os.path.join(base, "cgroup.procs")):
            continue
        parent = os.path.join(base, CGROUP_PARENT)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError:
            continue
        _reap_stale_groups(parent)
        found.append(controller)
    return tuple(found)


STALE_AFTER_S = 120.0
"""An empty group older than this was left by a host process that died: removed. Younger
ones may belong to a kernel another host process is starting right now."""


def _reap_stale_groups(parent: str) -> None:
    """Remove empty groups left by host processes that died (rmdir fails on busy ones)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            path = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                if now - os.stat(path).st_mtime > STALE_AFTER_S:
                    os.rmdir(path)


# -------------------------------------------------------------------------- seccomp

_X86_64_DENY = {
    "ptrace": 101, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "unshare": 272, "setns": 308, "bpf": 321, "keyctl": 250,
    "add_key": 248, "request_key": 249, "perf_event_open": 298, "userfaultfd": 323,
    "process_vm_readv": 310, "process_vm_writev": 311, "open_by_handle_at": 304,
    "io_uring_setup": 425, "acct": 163, "quotactl": 179, "iopl": 172, "ioperm": 173,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442,
}  # fmt: skip
"""System calls denied (``EPERM``) to model code on x86-64."""


@functools.cache
def seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter (``struct sock_filter[]`` bytes, as ``bwrap --seccomp``
    reads it) that returns ``EPERM`` for :data:`_X86_64_DENY`, for x32 and for 32-bit
    system calls, and allows the rest. ``None`` on other architectures."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = 0x7FFF0000, 0x00050000 | 1

    def ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    nrs = sorted(_X86_64_DENY.values())
    n = len(nrs)
    # Layout: [0] load arch, [1] arch check, [2] load nr, [3] x32 check, [4..4+n) denies,
    # [4+n] allow, [5+n] eperm. Jump offsets count from the next instruction.
    prog = [
        ins(ld_abs, 4),
        ins(jeq, 0xC000003E, 0, n + 3),  # AUDIT_ARCH_X86_64, else -> eperm
        ins(ld_abs, 0),
        ins(jge, 0x40000000, n + 1, 0),  # x32 ABI -> eperm
    ]
    for i, nr in enumerate(nrs):
        prog.append(ins(jeq, nr, n - i, 0))  # -> eperm
    prog += [ins(ret, allow), ins(ret, eperm)]
    return b"".join(prog)


# -------------------------------------------------------------------------- wrappers


def _bwrap_base(*, network: bool) -> list[str]:
    # --new-session: kill(0, ...) from inside must not reach bwrap's process group in the
    # host namespace (uid 0 may signal it even without capabilities). No --die-with-parent:
    # its parent-death signal fires when the *thread* that started bwrap ends (spare kernels
    # start from short-lived threads); the kernel exits on channel EOF instead, and the host
    # kills it directly (see subprocess._killpg).
    args = ["--as-pid-1", "--new-session", "--cap-drop", "ALL"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        args.append("--unshare-net")
    if os.geteuid() != 0:  # unprivileged bwrap needs a user namespace
        args.append("--unshare-user")
    return args


def _bwrap_mounts() -> list[str]:
    """The host root read-only, then a fresh /dev and /proc on top (order matters: a later
    mount covers an earlier one)."""
    return ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]


def _unshare_args(*, network: bool) -> list[str]:
    args = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if not network:
        args.append("--net")
    if os.geteuid() != 0:
        args += ["--user", "--map-root-user"]
    return args


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _parents_below(path: str, roots: list[str]) -> list[str]:
    """The folders between the hidden root that holds ``path`` and ``path``, top down."""
    root = next((r for r in roots if _under(path, r) and path != r), None)
    if root is None:
        return []
    out = []
    parent = os.path.dirname(path)
    while parent != root and _under(parent, root):
        out.append(parent)
        parent = os.path.dirname(parent)
    return out[::-1]


def _hidden_roots() -> list[str]:
    """Folders replaced by empty tmpfs mounts: the user's home and other places where
    secrets and host sockets live."""
    roots = {"/tmp", "/run", "/root", "/home", "/var/tmp", "/dev/shm"}
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        roots.add(os.path.realpath(home))
    return sorted(r for r in roots if os.path.isdir(r))


@dataclass(frozen=True)
class IsolationConfig:
    """What isolation to build (hashable: equal configs make interchangeable kernels).

    Attributes:
        limits: the resource limits.
        mode: one of :data:`MODES`.
        keep: folders that must stay readable inside (interpreter, site-packages, kernel).
        project_dir: a folder bound read-only at its own path (``None``: none).
        seccomp: load the seccomp filter where possible.
    """

    limits: Limits
    mode: str = "auto"
    keep: tuple[str, ...] = ()
    project_dir: str | None = None
    seccomp: bool = True
    drop_uid: bool = True


NOBODY = 65534
"""The uid and gid the kernel runs as under bwrap when the host is root (see
:attr:`Isolation.sandbox_uid`): root without capabilities still owns, and can read, every
root-only file of the host (``/etc/shadow``, host keys)."""


@dataclass
class Launch:
    """One kernel launch's isolation: the full command line, the descriptors the child
    inherits (close them in the parent after ``Popen``), and the cgroups to remove later."""

    argv: list[str]
    pass_fds: list[int] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    wrapper: str | None = None

    def close_fds(self) -> None:
        """Close the parent's copies of the inherited descriptors."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = []

    def memory_oom_kills(self) -> int:
        """OOM kills counted by this launch's memory cgroup (0 without one)."""
        for path in self.cgroups:
            if "/memory/" not in path:
                continue
            try:
                with open(os.path.join(path, "memory.oom_control")) as f:
                    for line in f:
                        if line.startswith("oom_kill "):
                            return int(line.split()[1])
            except (OSError, ValueError):
                return 0
        return 0

    def memory_usage(self) -> int | None:
        """Bytes charged to this launch's memory cgroup now (``None`` without one)."""
        for path in self.cgroups:
            if "/memory/" in path:
                try:
                    with open(os.path.join(path, "memory.usage_in_bytes")) as f:
                        return int(f.read())
                except (OSError, ValueError):
                    return None
        return None

    def remove_cgroups(self, *, defer: bool = True) -> bool:
        """Remove the cgroups; whether all are gone. One still busy (a killed process not
        yet reaped) stays in :attr:`cgroups`, or with ``defer`` is handed to a list retried
        at the next launch (and by the next host process's start-up sweep)."""
        left = []
        for path in self.cgroups:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(path)
        if defer:
            _DEFERRED.update(left)
            left = []
        self.cgroups = left
        return not left


_DEFERRED: set[str] = set()
"""Cgroups that were busy when their kernel went; retried at each launch."""


def _retry_deferred() -> None:
    for path in list(_DEFERRED):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        _DEFERRED.discard(path)


class Isolation:
    """Builds kernel command lines for one :class:`IsolationConfig` and records what they
    really get.

    Raises (constructor):
        ValueError: unknown mode, or a mode that cannot work here was asked for explicitly
            (the message says why).
    """

    def __init__(self, config: IsolationConfig):
        if config.mode not in MODES:
            raise ValueError(f"isolation must be one of {', '.join(MODES)}, not {config.mode!r}")
        self.config = config
        self.problems: dict[str, str] = {}
        self.wrapper = self._choose(config.mode)
        lim = config.limits
        self.controllers = cgroup_controllers() if (lim.memory_bytes or lim.processes) else ()
        self.controllers = tuple(
            c
            for c in self.controllers
            if (c == "memory" and lim.memory_bytes) or (c == "pids" and lim.processes)
        )
        self.seccomp = self.wrapper == "bwrap" and config.seccomp and seccomp_program() is not None
        self.setpriv = shutil.which("setpriv")
        self.rlimits = self._rlimits()

    @property
    def sandbox_uid(self) -> int | None:
        """The uid the kernel runs as when it is not this process's (bwrap, as root, with
        ``setpriv`` installed: :data:`NOBODY`); the host then hands it the working folder."""
        if (
            self.wrapper == "bwrap"
            and self.config.drop_uid
            and os.geteuid() == 0
            and self.setpriv is not None
        ):
            return NOBODY
        return None

    def _choose(self, mode: str) -> str | None:
        if mode in ("auto", "bwrap"):
            problem = bwrap_problem()
            if problem is None:
                return "bwrap"
            self.problems["bwrap"] = problem
            if mode == "bwrap":
                raise ValueError(f"isolation 'bwrap' cannot work here: {problem}")
        if mode in ("auto", "unshare"):
            problem = unshare_problem()
            if problem is None:
                return "unshare"
            self.problems["unshare"] = problem
            if mode == "unshare":
                raise ValueError(f"isolation 'unshare' cannot work here: {problem}")
        return None

    def _rlimits(self) -> dict[str, int]:
        lim = self.config.limits
        out: dict[str, int] = {"CORE": 0}
        if lim.memory_bytes:
            out["AS"] = int(lim.memory_bytes)
        if lim.cpu_s:
            out["CPU"] = max(1, int(-(-lim.cpu_s // 1)))  # whole seconds, rounded up
        if lim.open_files:
            out["NOFILE"] = int(lim.open_files)
        if lim.file_size_bytes:
            out["FSIZE"] = int(lim.file_size_bytes)
        return out

    @property
    def pid_namespace(self) -> bool:
        """The kernel is PID 1 of its own PID namespace."""
        return self.wrapper is not None

    def kernel_args(self) -> list[str]:
        """Arguments for the kernel script: its rlimits, and ``--reap`` (kill the processes
        a cell leaves behind) when it is PID 1 of a namespace."""
        args: list[str] = []
        for name, value in self.rlimits.items():
            args += ["--rlimit", f"{name}={value}"]
        if self.pid_namespace:
            args += ["--reap", "1"]
        return args

    def launch(self, kernel_argv: list[str], workdir: str) -> Launch:
        """The command line (and inherited descriptors, cgroups) that starts ``kernel_argv``
        isolated, working in ``workdir``.

        Raises:
            OSError: a cgroup or pipe could not be made (rare; the caller reports it).
        """
        launch = Launch(argv=[], wrapper=self.wrapper)
        if _DEFERRED:
            _retry_deferred()
        try:
            extra = self._cgroups(launch)
            argv = [*kernel_argv, *extra]
            if self.wrapper == "bwrap":
                argv = self._bwrap(argv, workdir, launch)
            elif self.wrapper == "unshare":
                exe = shutil.which("unshare") or "unshare"
                argv = [exe, *_unshare_args(network=self.config.limits.network), *argv]
        except BaseException:
            launch.close_fds()
            launch.remove_cgroups()
            raise
        launch.argv = argv
        return launch

    def _cgroups(self, launch: Launch) -> list[str]:
        lim = self.config.limits
        args: list[str] = []
        name = uuid.uuid4().hex[:16]
        for controller in self.controllers:
            path = os.path.join(CGROUP_ROOT, controller, CGROUP_PARENT, name)
            os.mkdir(path)
            launch.cgroups.append(path)
            if controller == "memory":
                assert lim.memory_bytes
                _write(path, "memory.limit_in_bytes", lim.memory_bytes)
                # Swap counts too, where the kernel accounts it: otherwise the limit only
                # moves memory to swap.
                with contextlib.suppress(OSError):
                    _write(path, "memory.memsw.limit_in_bytes", lim.memory_bytes)
            else:
                assert lim.processes
                _write(path, "pids.max", lim.processes)
            fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            launch.pass_fds.append(fd)
            args += ["--cgroup-fd", str(fd)]
        return args

    def _bwrap(self, argv: list[str], workdir: str, launch: Launch) -> list[str]:
        exe = shutil.which("bwrap") or "bwrap"
        base = _bwrap_base(network=self.config.limits.network)
        uid = self.sandbox_uid
        if uid is not None:  # setpriv needs these two to drop to the uid, then drops them
            base += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        args = [exe, *base, *_bwrap_mounts()]
        hidden = _hidden_roots()
        for root in hidden:
            perms = ["--perms", "1777"] if root in ("/tmp", "/var/tmp", "/dev/shm") else []
            args += [*perms, "--tmpfs", root]
        binds = [p for p in self.config.keep if any(_under(p, r) for r in hidden)]
        if self.config.project_dir:
            binds.append(self.config.project_dir)
        made: set[str] = set()
        for path in sorted(set(binds), key=len):
            if not os.path.exists(path):
                continue
            # bwrap makes missing parents 0700 (root's); the kernel's uid must pass them.
            for parent in _parents_below(path, hidden):
                if parent not in made:
                    made.add(parent)
                    args += ["--perms", "0755", "--dir", parent]
            args += ["--ro-bind", path, path]
        args += ["--bind", workdir, workdir, "--chdir", workdir]
        if self.seccomp:
            program = seccomp_program()
            assert program is not None
            r, w = os.pipe()
            try:
                os.write(w, program)  # a few hundred bytes: fits in the pipe buffer
            finally:
                os.close(w)
            launch.pass_fds.append(r)
            args += ["--seccomp", str(r)]
        if uid is not None:
            assert self.setpriv is not None
            argv = [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                *argv,
            ]
        return [*args, "--", *argv]

    def record(self) -> dict[str, Any]:
        """What a kernel launched from this config really gets (recorded per run)."""
        lim = self.config.limits
        namespaces: list[str] = []
        if self.wrapper is not None:
            namespaces = ["pid", "mount", "ipc", "uts"]
            if self.wrapper == "bwrap":
                namespaces.append("cgroup")
            if not lim.network:
                namespaces.append("net")
            if os.geteuid() != 0:
                namespaces.append("user")
        if self.wrapper == "bwrap":
            filesystem = "host read-only; home, /tmp and /run hidden; working folder writable"
        else:
            filesystem = "host (proc hidden)" if self.wrapper else "host"
        record: dict[str, Any] = {
            "wrapper": self.wrapper,
            "namespaces": namespaces,
            "network": "none" if (self.wrapper and not lim.network) else "host",
            "filesystem": filesystem,
            "project_dir": self.config.project_dir if self.wrapper == "bwrap" else None,
            "capabilities": "none" if self.wrapper == "bwrap" else "inherited",
            "uid": self.sandbox_uid if self.sandbox_uid is not None else os.geteuid(),
            "rlimits": dict(self.rlimits),
            "cgroup": (
                {"version": 1, "controllers": list(self.controllers)} if self.controllers else None
            ),
            "seccomp": self.seccomp,
            "background_processes": (
                "killed after each cell" if self.pid_namespace else "killed with the kernel"
            ),
            "enforced": self.enforced(),
        }
        if self.problems:
            record["unavailable"] = dict(self.problems)
        return record

    def enforced(self) -> dict[str, str | None]:
        """Per :class:`Limits` field, how it is enforced (``None``: not enforced)."""
        lim = self.config.limits
        mem = []
        if lim.memory_bytes:
            mem.append("RLIMIT_AS")
            if "memory" in self.controllers:
                mem.append("cgroup memory")
        return {
            "wall_s": "host timer" if lim.wall_s else None,
            "cpu_s": "RLIMIT_CPU" if lim.cpu_s else None,
            "memory_bytes": " + ".join(mem) or None,
            "processes": "cgroup pids" if "pids" in self.controllers else None,
            "open_files": "RLIMIT_NOFILE" if lim.open_files else None,
            "file_size_bytes": "RLIMIT_FSIZE" if lim.file_size_bytes else None,
            "output_bytes": "host cap" if lim.output_bytes else None,
            "network": (
                "network namespace"
                if self.wrapper and not lim.network
                else ("host network" if lim.network else None)
            ),
        }


def _write(folder: str, name: str, value: int) -> None:
    with open(os.path.join(folder, name), "w") as f:
        f.write(str(value))


@functools.cache
def keep_paths(python: str, site_args: tuple[str, ...]) -> tuple[str, ...]:
    """Folders the kernel needs to stay readable: the interpreter's prefixes, its real
    location, the site-packages folders passed to the kernel, and the kernel itself."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, KERNEL_DIR}
    real = os.path.realpath(python)
    paths.add(os.path.dirname(os.path.dirname(real)))
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(python))))
    for flag, value in zip(site_args[::2], site_args[1::2], strict=False):
        if flag == "--site-packages":
            paths.add(value)
            paths.update(_pth_folders(value))
    return tuple(sorted(p for p in paths if p and p != "/"))


def _pth_folders(folder: str) -> list[str]:
    """Folders listed in ``folder``'s ``.pth`` files (editable installs live there)."""
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if not name.endswith(".pth"):
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    for line in f:
                        line = line.strip()
                        if line and not line.startswith(("#", "import")):
                            path = os.path.abspath(os.path.join(folder, line))
                            if os.path.isdir(path):
                                out.append(path)
    return out

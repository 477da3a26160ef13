"""Isolation for the subprocess kernel: namespaces, rlimits, cgroups and seccomp.

Everything here is decided and set up by the host, before model code runs:

* **namespaces** through ``bwrap`` (preferred) or ``unshare`` (fallback), detected once per
  process by starting a trivial sandbox. ``bwrap`` gives new PID, IPC, UTS and cgroup
  namespaces (and a network namespace with only loopback when ``limits.network`` is false), a
  fresh ``/proc``, all capabilities dropped, the host file system read-only with the user's
  home, ``/run`` and ``/tmp`` hidden (the interpreter, its site-packages and the kernel bound
  back read-only), the rlmd home, the daemon socket's folder and ``$XDG_RUNTIME_DIR`` hidden
  wherever they are (even inside a folder bound back), and only the working folder writable. The kernel is PID 1 of its namespace,
  so it cannot signal host processes and everything it starts dies with it. When the host is
  root, ``setpriv`` drops the kernel to uid/gid 65534 (root without capabilities still owns,
  and reads, every root-only file) and the working folder is given to that uid.
* **rlimits** (address space, CPU, open files, file size, no core dumps) are passed to the
  kernel, which sets them on itself before it reads its first request.
* **cgroup v1** memory and pids controllers (where this process may create groups, i.e. as
  root on a cgroup-v1 host): one group per kernel process. Under bwrap the host moves the
  sandboxed process in right after bwrap's ``clone`` (:meth:`Launch.join_early`); the kernel
  checks before its hello and joins any group it is not in through a descriptor the host
  opened, so model code never sees the cgroup file system writable.
* **seccomp** (x86-64 only): a small BPF filter, built here and loaded by ``bwrap``, makes
  ``ptrace``, ``mount``, ``unshare``, ``bpf``, ``keyctl``, module loading and similar calls,
  and ``clone`` asking for any new namespace, fail with ``EPERM``, and ``clone3`` with
  ``ENOSYS`` (glibc then uses ``clone``): model code cannot make a user namespace.

:meth:`Isolation.record` says what a kernel really got; nothing is claimed that was not set.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rlmd import paths
from rlmd.kernel import KERNEL_DIR
from rlmd.sandbox import workdirs
from rlmd.sandbox.limits import MINIMUM, Limits

log = logging.getLogger(__name__)


MODES = ("auto", "bwrap", "unshare", "none")
"""``isolation=`` choices: ``auto`` picks bwrap, else unshare, else none."""

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PARENT = "rlmd"
"""The parent group of root's kernels; another user's is ``rlmd-<uid>`` (see
:func:`cgroup_parent`): a parent root made is not writable by anyone else."""

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


def cgroup_parent() -> str:
    """This user's parent group name: ``rlmd`` for root, ``rlmd-<uid>`` for anyone else (an
    administrator may delegate one: ``mkdir /sys/fs/cgroup/{memory,pids}/rlmd-<uid>`` and
    ``chown -R <uid>`` them)."""
    uid = os.geteuid()
    return CGROUP_PARENT if uid == 0 else f"{CGROUP_PARENT}-{uid}"


_CGROUP_PROBLEMS: dict[str, str] = {}
"""Why a cgroup-v1 controller cannot be used here (filled by :func:`cgroup_controllers`)."""


@functools.cache
def cgroup_controllers() -> tuple[str, ...]:
    """The cgroup-v1 controllers (of ``memory``, ``pids``) this process can create groups
    in, under ``/sys/fs/cgroup/<controller>/<cgroup_parent()>``: tried by making and
    removing a probe group, so a parent someone else owns is not used (it failed every run
    of another user with ``Permission denied``). Empty on cgroup v2 or without rights; the
    reasons are in :func:`cgroup_problems`."""
    found = []
    for controller in ("memory", "pids"):
        base = os.path.join(CGROUP_ROOT, controller)
        if not os.path.exists(os.path.join(base, "cgroup.procs")):
            _CGROUP_PROBLEMS[controller] = f"no cgroup-v1 {controller} controller at {base}"
            continue
        parent = os.path.join(base, cgroup_parent())
        probe = os.path.join(parent, f"probe-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.makedirs(parent, exist_ok=True)
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as exc:
            _CGROUP_PROBLEMS[controller] = (
                f"cannot make groups under {parent} ({exc.strerror or exc}); an administrator "
                f"can delegate one: mkdir {parent} && chown -R {os.geteuid()} {parent}"
            )
            continue
        _reap_stale_groups(parent)
        found.append(controller)
    return tuple(found)


def cgroup_problems() -> dict[str, str]:
    """Controller → why it cannot be used here (after :func:`cgroup_controllers`)."""
    cgroup_controllers()
    return dict(_CGROUP_PROBLEMS)


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


_CLONE_NEW_NAMESPACES = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
"""``clone`` flags that make namespaces: denied (``EPERM``). A user namespace gives model
code every capability over its own namespaces (nf_tables, mounts): the kernel surface most
unprivileged-userns privilege escalations go through. All fit in the flags' low 32 bits."""

_X86_64_CLONE, _X86_64_CLONE3 = 56, 435
_ENOSYS = 38


@functools.cache
def seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter (``struct sock_filter[]`` bytes, as ``bwrap --seccomp``
    reads it) that returns ``EPERM`` for :data:`_X86_64_DENY`, for ``clone`` with any of
    :data:`_CLONE_NEW_NAMESPACES`, for x32 and for 32-bit system calls; ``ENOSYS`` for
    ``clone3`` (its flags sit in memory a filter cannot read; on ``ENOSYS`` glibc falls back
    to ``clone``, as under Docker's default profile, so threads and subprocesses still
    work); and allows the rest. ``None`` on other architectures."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return None
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | _ENOSYS
    # Each instruction is (code, k, true label, false label); labels are resolved to jump
    # offsets (counted from the next instruction) at the end. None: fall through.
    denies = sorted(_X86_64_DENY.values())
    prog: list[tuple[int, int, str | None, str | None]] = [
        (ld_abs, 4, None, None),  # seccomp_data.arch
        (jeq, 0xC000003E, None, "eperm"),  # AUDIT_ARCH_X86_64, else deny
        (ld_abs, 0, None, None),  # seccomp_data.nr
        (jge, 0x40000000, "eperm", None),  # x32 ABI
        (jeq, _X86_64_CLONE3, "enosys", None),
        (jeq, _X86_64_CLONE, None, "denies"),
        (ld_abs, 16, None, None),  # low 32 bits of args[0] (clone's flags)
        (jset, _CLONE_NEW_NAMESPACES, "eperm", "allow"),
    ]
    labels = {"denies": len(prog)}
    prog += [(jeq, nr, "eperm", None) for nr in denies]
    labels.update(allow=len(prog), eperm=len(prog) + 1, enosys=len(prog) + 2)
    prog += [(ret, allow, None, None), (ret, eperm, None, None), (ret, enosys, None, None)]

    def offset(at: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - at - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, k, jt, jf) in enumerate(prog)
    )


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


def _outermost(roots: list[str]) -> list[str]:
    """``roots`` without those inside another (a tmpfs over the outer one hides them)."""
    return sorted(r for r in set(roots) if not any(_under(r, o) and r != o for o in roots))


def _rlmd_roots() -> list[str]:
    """Folders hidden whatever their paths, even inside a folder bound back: the rlmd home
    (the store, the config with its keys, the daemon's socket), the socket's folder when
    it lies elsewhere, and ``$XDG_RUNTIME_DIR`` (the user's sockets). Model code that could
    connect to the daemon's socket could ask it to run code unsandboxed."""
    roots = set()
    for where in (paths.home, lambda: paths.socket_path().parent):
        with contextlib.suppress(OSError):  # one that cannot be made holds nothing
            roots.add(str(where()))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        roots.add(runtime)
    real = {os.path.realpath(r) for r in roots} - {"/"}
    return sorted(r for r in real if os.path.isdir(r))


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


_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
"""Hidden folders that stay writable scratch space (mode 1777) inside the sandbox."""

_HIDDEN_TMPFS_BYTES = 1024 * 1024
"""Size of the tmpfs over each other hidden folder (it holds only the folders bwrap makes)."""

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
    info_fd: int | None = None
    """The read end of ``bwrap --info-fd`` (the sandboxed process's host pid), kept by the
    host for :meth:`join_early`; ``None`` without cgroups or bwrap."""

    def close_fds(self) -> None:
        """Close the parent's copies of the inherited descriptors (the info descriptor's
        read end is :meth:`join_early`'s, or :meth:`close_info`'s when the launch failed)."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = []

    def close_info(self) -> None:
        """Close the info descriptor without using it (a launch that failed)."""
        fd, self.info_fd = self.info_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def join_early(self) -> None:
        """Once ``Popen`` has started bwrap: move the sandboxed process into this launch's
        cgroups from the host, in a background thread (returns at once).

        bwrap writes its child's host pid to the info descriptor right after the ``clone``,
        before the child's mount set-up; the first move into a cgroup-v1 group waits for an
        RCU grace period of the host's kernel (6-20 ms), which then passes while bwrap sets
        up the sandbox and the interpreter starts, instead of after. The groups and the
        guarantee are the kernel's as before: it reads which groups it is in before its
        hello and joins any it is not in itself through the descriptors it was given (exit
        71 if that fails; see :mod:`rlmd.kernel.serve`), so a move that fails or comes late
        here is only logged (debug). Nothing without an info descriptor."""
        fd, self.info_fd = self.info_fd, None
        if fd is None:
            return
        procs = [os.path.join(path, "cgroup.procs") for path in self.cgroups]
        threading.Thread(
            target=_move_sandboxed, args=(fd, procs), name="rlmd-cgroup-move", daemon=True
        ).start()

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


def _move_sandboxed(info_fd: int, procs: list[str]) -> None:
    """Read bwrap's info (one JSON object, written at once after the ``clone``; up to its
    closing brace or EOF, when bwrap ends without writing it) and write the child's pid to
    each ``cgroup.procs`` in ``procs``."""
    data = b""
    try:
        while b"}" not in data and (chunk := os.read(info_fd, 4096)):
            data += chunk
    except OSError as exc:
        log.debug("cannot read bwrap's info: %s", exc)
    finally:
        os.close(info_fd)
    try:
        pid = json.loads(data)["child-pid"]
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
            raise ValueError(f"not a process id: {pid!r}")
    except (ValueError, KeyError, TypeError) as exc:  # bwrap failed: the caller sees it
        log.debug("no child pid in bwrap's info %r: %s", data[:200], exc)
        return
    for path in procs:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)
        except OSError as exc:  # e.g. the kernel died already; it joins itself otherwise
            log.debug("cannot move pid %d into %s: %s", pid, path, exc)
            return


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

    @property
    def own_userns(self) -> bool:
        """The kernel runs in a user namespace of its own (a normal user's bwrap/unshare):
        ``RLIMIT_NPROC`` then counts its processes only."""
        return self.wrapper is not None and os.geteuid() != 0

    @property
    def nproc_rlimit(self) -> str | None:
        """How ``RLIMIT_NPROC`` bounds the process count (``None``: it is not set): in the
        kernel's own user namespace, or under uid 65534 (shared by every kernel running as
        it) where no pids cgroup could be made."""
        if not self.config.limits.processes or "pids" in self.controllers:
            return None
        if self.own_userns:
            return "RLIMIT_NPROC in the sandbox's own user namespace"
        if self.sandbox_uid is not None:
            return f"RLIMIT_NPROC of uid {self.sandbox_uid} (shared by every sandbox)"
        return None

    def tmpfs_sizes(self) -> dict[str, int]:
        """Bytes of each tmpfs the bwrap sandbox mounts (a quarter of the memory limit, in
        all, for ``/tmp``, ``/var/tmp`` and ``/dev/shm``; 1 MiB for each hidden folder),
        empty without a memory limit. Without a memory cgroup to charge them to, they come
        off the address-space limit: memory plus tmpfs stays within ``memory_bytes``."""
        lim = self.config.limits
        if self.wrapper != "bwrap" or not lim.memory_bytes:
            return {}
        roots = _outermost([*_hidden_roots(), *_rlmd_roots()])
        scratch = int(lim.memory_bytes) // (4 * len(_SCRATCH))
        return {r: scratch if r in _SCRATCH else _HIDDEN_TMPFS_BYTES for r in roots}

    def _rlimits(self) -> dict[str, int]:
        lim = self.config.limits
        out: dict[str, int] = {"CORE": 0}
        if lim.memory_bytes:
            tmpfs = 0 if "memory" in self.controllers else sum(self.tmpfs_sizes().values())
            out["AS"] = max(int(lim.memory_bytes) - tmpfs, MINIMUM["memory_bytes"])
        if self.nproc_rlimit is not None:
            assert lim.processes
            out["NPROC"] = int(lim.processes)
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
            launch.close_info()
            launch.remove_cgroups()
            raise
        launch.argv = argv
        return launch

    def _cgroups(self, launch: Launch) -> list[str]:
        lim = self.config.limits
        args: list[str] = []
        name = os.urandom(8).hex()  # not uuid: it imports platform (~5 ms at start-up)
        for controller in self.controllers:
            path = os.path.join(CGROUP_ROOT, controller, cgroup_parent(), name)
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
        if args:  # the kernel skips the join where the host moved it (Launch.join_early)
            args += ["--cgroup-name", name]
        return args

    def _bwrap(self, argv: list[str], workdir: str, launch: Launch) -> list[str]:
        exe = shutil.which("bwrap") or "bwrap"
        base = _bwrap_base(network=self.config.limits.network)
        uid = self.sandbox_uid
        if uid is not None:  # setpriv needs these two to drop to the uid, then drops them
            base += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        args = [exe, *base, *_bwrap_mounts()]
        secret = _rlmd_roots()
        hidden = _outermost([*_hidden_roots(), *secret])
        sizes = self.tmpfs_sizes()
        for root in hidden:
            perms = ["--perms", "1777"] if root in _SCRATCH else []
            size = ["--size", str(sizes[root])] if root in sizes else []
            args += [*perms, *size, "--tmpfs", root]
        keep = [p for p in self.config.keep if any(_under(p, r) for r in hidden)]
        binds = keep + ([self.config.project_dir] if self.config.project_dir else [])
        made: set[str] = set()

        def bind(paths: list[str]) -> None:
            nonlocal args
            for path in sorted(set(paths), key=len):
                if not os.path.exists(path):
                    continue
                # bwrap makes missing parents 0700 (root's); the kernel's uid must pass them.
                for parent in _parents_below(path, hidden):
                    if parent not in made:
                        made.add(parent)
                        args += ["--perms", "0755", "--dir", parent]
                args += ["--ro-bind", path, path]

        bind(binds)
        # A folder bound back (the project, an editable install) may hold the rlmd home:
        # hide it again, then bind back the interpreter's folders that lie inside it.
        again = [r for r in secret if any(_under(r, b) and r != b for b in binds)]
        for root in again:
            args += ["--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs", root]
        bind([p for p in keep if any(_under(p, r) for r in again)])
        for parent in _parents_below(workdir, hidden):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        args += ["--bind", workdir, workdir, "--chdir", workdir]
        if launch.cgroups:  # the child's host pid, for Launch.join_early
            r, w = os.pipe()
            launch.info_fd = r
            launch.pass_fds.append(w)
            args += ["--info-fd", str(w)]
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
            user, group = setpriv_ids(uid)
            argv = [
                self.setpriv,
                f"--reuid={user}",
                f"--regid={group}",
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
            filesystem = (
                "host read-only; home, /tmp, /run, the rlmd home and $XDG_RUNTIME_DIR hidden;"
                " working folder writable"
            )
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
        if self.tmpfs_sizes():
            record["tmpfs_bytes"] = self.tmpfs_sizes()
        problems = dict(self.problems)
        wanted = {"memory": lim.memory_bytes, "pids": lim.processes}
        for controller, reason in cgroup_problems().items():
            if wanted.get(controller):
                problems[f"cgroup {controller}"] = reason
        if problems:
            record["unavailable"] = problems
        return record

    def enforced(self) -> dict[str, str | None]:
        """Per :class:`Limits` field, how it is enforced (``None``: not enforced)."""
        lim = self.config.limits
        mem = []
        if lim.memory_bytes:
            mem.append("RLIMIT_AS")
            if "memory" in self.controllers:
                mem.append("cgroup memory")
            elif self.tmpfs_sizes():
                mem.append("tmpfs sizes taken off it")
        return {
            "wall_s": "host timer" if lim.wall_s else None,
            "cpu_s": "RLIMIT_CPU" if lim.cpu_s else None,
            "memory_bytes": " + ".join(mem) or None,
            "processes": "cgroup pids" if "pids" in self.controllers else self.nproc_rlimit,
            "open_files": "RLIMIT_NOFILE" if lim.open_files else None,
            "file_size_bytes": "RLIMIT_FSIZE" if lim.file_size_bytes else None,
            "disk_bytes": workdirs.enforcement(lim.disk_bytes),
            "output_bytes": "host cap" if lim.output_bytes else None,
            "network": (
                "network namespace"
                if self.wrapper and not lim.network
                else ("host network" if lim.network else None)
            ),
        }


def _files_name(table: str, ident: int, etc: str = "/etc") -> str | None:
    """The name ``getpwnam``/``getgrnam`` (``table``: ``"passwd"`` or ``"group"``) resolves
    to exactly ``ident`` from the host's ``/etc/<table>`` file, which the sandbox sees as it
    is (read-only), when ``files`` is the first source ``/etc/nsswitch.conf`` lists for it;
    else ``None``."""
    try:
        with open(os.path.join(etc, "nsswitch.conf"), encoding="utf-8") as f:
            sources = next(
                (line.split(":", 1)[1].split() for line in f if line.startswith(table + ":")),
                [],  # no line: left to the C library's default, not guessed here
            )
        if not sources or sources[0] != "files":
            return None
        first: dict[str, int] = {}  # a lookup by name takes the first line of that name
        with open(os.path.join(etc, table), encoding="utf-8") as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if len(fields) >= 3 and fields[0] and fields[2].isdigit():
                    first.setdefault(fields[0], int(fields[2]))
    except (OSError, UnicodeDecodeError):
        return None
    for name, number in first.items():
        if number == ident and not name.isdigit() and not name.startswith(("+", "-")):
            return name
    return None


@functools.cache
def setpriv_ids(uid: int) -> tuple[str, str]:
    """How ``setpriv --reuid/--regid`` are given ``uid`` (and the gid of the same number):
    by a name that the host's files map to exactly that number, else the number. setpriv
    looks every value up as a name first: a number is no name, so each kernel start went
    through every NSS source (libnss_systemd loaded, ~5-25 ms here under load); a name
    ``files`` knows ends the look-up at the first source. The same process ids either way."""
    user = _files_name("passwd", uid)
    group = _files_name("group", uid)
    return (user or str(uid), group or str(uid))


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

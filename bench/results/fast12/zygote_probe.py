"""What a zygote's per-sandbox work would cost here (a probe for a next pass, not rlmd code).

A process that imported the kernel's modules forks; the child makes the namespaces bwrap
makes (mount, PID, net, IPC, UTS, cgroup), makes its mounts private, forks the namespace's
PID 1, which mounts a fresh /proc and a tmpfs and exits; the parent waits. Timed against
starting ``bwrap`` with the same namespaces running ``true``. Root only.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWPID, NEWNET = (
    0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x20000000, 0x40000000,
)  # fmt: skip
MS_REC, MS_PRIVATE = 0x4000, 0x40000


def check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        os.write(2, f"{what}: {os.strerror(e)}\n".encode())
        os._exit(3)


def zygote_start() -> float:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        check(libc.unshare(NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWPID | NEWNET), "unshare")
        check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "private")
        inner = os.fork()
        if inner == 0:
            check(libc.mount(b"proc", b"/proc", b"proc", 0, None), "proc")
            check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=1m"), "tmpfs")
            os._exit(0)
        _, status = os.waitpid(inner, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return time.perf_counter() - t0


def bwrap_start() -> float:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-net", "--unshare-cgroup-try", "--as-pid-1", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/usr/bin/true"]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t0


def main() -> None:
    sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "..", "..")]
    import rlmd.kernel.core  # noqa: F401  (a zygote would hold these)

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    z, b = [], []
    for _ in range(n):
        z.append(zygote_start())
        b.append(bwrap_start())
    print(f"load {os.getloadavg()[0]:.1f}, n={n}")
    for name, s in (("fork + namespaces + /proc + tmpfs", z), ("bwrap ... true", b)):
        print(f"{name:34s} median {statistics.median(s) * 1e3:6.2f} ms  min {min(s) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()

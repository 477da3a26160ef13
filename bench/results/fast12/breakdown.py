"""Where the hardened no-spare cold start goes (issue 16 item 4, session 12).

Alternating, N rounds, each row timed once per round (medians printed):
  floor     python -I -S -c pass
  bwrap     the sandbox's real bwrap argv (mounts, namespaces, seccomp, setpriv) running `true`
  bwrap_py  the same running python -I -S -c pass
  plan      host side: working folder + cgroups + argv (Isolation.launch), then undone
  hello     launch() -> the kernel's hello frame on its stdout
  cold      create_sandbox(spare_kernel=False) + start + execute("x = 1") + (close not timed)
Run with PYTHONPATH at the checkout to time.
"""

import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from rlmd.sandbox import create_sandbox, workdirs
from rlmd.sandbox.process import launch as L
from rlmd.sandbox.process.transport import ProcessTransport  # noqa: F401  (import cost out)

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
CPU: dict[str, list[float]] = {}


def kids_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_run(key: str, argv: list[str], **kw) -> float:
    """Wall seconds of ``argv``; its CPU (with its waited-for descendants) goes to CPU[key]."""
    c0 = kids_cpu()
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, **kw)
    dt = time.perf_counter() - t0
    CPU.setdefault(key, []).append(kids_cpu() - c0)
    return dt


async def _host(fn, args):
    return "ok"


async def cold():
    t0 = time.perf_counter()
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(_host)
    r = await box.execute("x = 1")
    dt = time.perf_counter() - t0
    assert r.error is None, r.error
    await box.close()
    return dt


def wrapped(sp, cmd):
    iso = L.isolation_of(sp.isolation)
    folder = workdirs.make("sandbox", sp.isolation.limits.disk_bytes)
    if iso.sandbox_uid is not None:
        os.chown(folder, iso.sandbox_uid, iso.sandbox_uid)
        os.chmod(folder, 0o711)
    t0 = time.perf_counter()
    plan = iso.launch(list(cmd), folder)
    t_plan = time.perf_counter() - t0
    # strip the --cgroup-fd args for a non-kernel command
    argv = plan.argv
    if "--cgroup-fd" in argv:
        i = argv.index("--cgroup-fd")
        while i < len(argv) and argv[i] == "--cgroup-fd":
            del argv[i : i + 2]
    return plan, folder, argv, t_plan


def run_wrapped(key, sp, cmd):
    plan, folder, argv, t_plan = wrapped(sp, cmd)
    dt = timed_run(key, argv, pass_fds=plan.pass_fds, cwd=folder, env=sp.environ(folder))
    plan.close_fds()
    plan.remove_cgroups(defer=False)
    workdirs.remove(folder)
    return dt, t_plan


def hello(sp):
    t0 = time.perf_counter()
    p = L.launch(sp)
    out = p.popen.stdout.fileno()
    head = os.read(out, 4)
    n = int.from_bytes(head, "big")
    body = b""
    while len(body) < n:
        body += os.read(out, n - len(body))
    dt = time.perf_counter() - t0
    assert b"hello" in body, body
    ns = 0
    for pid in (p.popen.pid, *L.children(p.popen.pid)):  # bwrap, and the kernel (setpriv + python)
        with open(f"/proc/{pid}/schedstat") as f:
            ns += int(f.read().split()[0])
    CPU.setdefault("hello", []).append(ns / 1e9)
    p.discard()
    return dt


async def main():

    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(_host)
    sp = box.transport.spec()
    await box.close()
    rows = {k: [] for k in ("floor", "bwrap_true", "bwrap_py", "plan", "hello", "cold")}
    true = shutil.which("true")
    for _ in range(N):
        rows["floor"].append(timed_run("floor", [sys.executable, "-I", "-S", "-c", "pass"]))
        dt, tp = run_wrapped("bwrap_true", sp, [true])
        rows["bwrap_true"].append(dt)
        rows["plan"].append(tp)
        dt, _ = run_wrapped("bwrap_py", sp, [sys.executable, "-I", "-S", "-c", "pass"])
        rows["bwrap_py"].append(dt)
        rows["hello"].append(hello(sp))
        rows["cold"].append(await cold())
        await asyncio.sleep(0.05)
    print(f"load {os.getloadavg()[0]:.2f}  n={N}")
    for k, v in rows.items():
        cpu = f"   CPU median {statistics.median(CPU[k]) * 1e3:6.1f} ms" if k in CPU else ""
        print(
            f"{k:12s} median {statistics.median(v) * 1e3:7.1f} ms   min {min(v) * 1e3:7.1f} ms{cpu}"
        )


asyncio.run(main())

"""bwrap (the sandbox's real argv) + setpriv + true: setpriv given 65534 as a number
(before) or by name (after), alternating; wall and CPU (rusage of the waited-for tree)."""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from rlmd.sandbox import create_sandbox, workdirs
from rlmd.sandbox.process import isolate
from rlmd.sandbox.process import launch as L


def kids_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(sp, ids) -> tuple[float, float]:
    isolate.setpriv_ids = lambda uid: ids  # read at each launch
    iso = L.isolation_of(sp.isolation)
    folder = workdirs.make("sandbox", sp.isolation.limits.disk_bytes)
    os.chown(folder, isolate.NOBODY, isolate.NOBODY)
    os.chmod(folder, 0o711)
    plan = iso.launch([shutil.which("true") or "true"], folder)
    argv = plan.argv
    while "--cgroup-fd" in argv:
        i = argv.index("--cgroup-fd")
        del argv[i : i + 2]
    c0, t0 = kids_cpu(), time.perf_counter()
    subprocess.run(argv, pass_fds=plan.pass_fds, cwd=folder, env=sp.environ(folder), check=True)
    out = time.perf_counter() - t0, kids_cpu() - c0
    plan.close_fds()
    plan.remove_cgroups(defer=False)
    workdirs.remove(folder)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    sp = create_sandbox("subprocess", spare_kernel=False).transport.spec()
    named = isolate.setpriv_ids(isolate.NOBODY)
    got: dict[str, list[tuple[float, float]]] = {"number": [], "name": []}
    for i in range(n):
        for label in ("number", "name") if i % 2 == 0 else ("name", "number"):
            ids = named if label == "name" else (str(isolate.NOBODY),) * 2
            got[label].append(one(sp, ids))
    print(f"load {os.getloadavg()[0]:.1f}, n={n}, names {named}")
    for label, s in got.items():
        wall = statistics.median(w for w, _ in s)
        cpu = statistics.median(c for _, c in s)
        print(
            f"setpriv by {label:6s}: wall median {wall * 1e3:6.1f} ms, CPU median {cpu * 1e3:5.1f} ms"
        )


if __name__ == "__main__":
    main()

"""Sandbox speed: every backend side by side with the raw floors, in one run.

    .venv/bin/python bench/sandbox_speed.py [--quick] [--before OTHER_CHECKOUT]

Rows (bench/README.md, "Sandbox speed", says what each number means):

* **cell round trip** (warm): ``await sandbox.execute("x = sum(range(100)); print(x)")`` on a
  started sandbox, for ``inprocess``, ``subprocess`` hardened (the default: bwrap namespaces,
  rlimits, cgroups, seccomp), ``subprocess`` plain (``isolation="none"``, no limits) and
  ``container`` when :func:`rlmd.sandbox.unavailable_reason` says it can start; floors: a raw
  pipe round trip (a child echoing length-prefixed JSON, blocking reads; and the same child
  read through asyncio, as rlmd's host reads; and, for information, the raw pipe with both
  processes pinned to one CPU and to two: 20 against 50-80 us on the dev VM, and the
  unpinned floor is one or the other as the scheduler places them) and ``docker exec``
  into a running container (when docker and an ``rlmd/sandbox-base`` image are there);
* **cold start**: create + ``start`` + the first cell, per backend (subprocess with the spare
  kernel ready, as in a daemon that has started kernels before, and without one); floors: a
  fresh ``python -c pass`` (site on) and ``python -I -S -c pass``;
* **100 MB context**: ``load_context`` of a 100 MB string, per backend.

With ``--before DIR`` (another rlmd checkout, e.g. a worktree of the previous commit), the
warm round trips of both subprocess variants and the hardened cold starts (no spare, spare
ready) are also timed for that checkout and for this one, each in a child process,
alternating (before, after, then after, before, ...) ``--reps`` times (3), next to the pipe
floor and the
``python -I -S -c pass`` floor of the same run, with the CPU time per cell of the host process and of each kernel
process (``/proc``): the wall clock of a round trip on a loaded machine is mostly waiting for
a core, which CPU time does not count.

Ratios are against the issue's targets: warm subprocess round trip within 3x the pipe floor;
subprocess cold start under 50 ms; container round trip under 1 ms and cold start under 1 s;
a 100 MB context loaded in under 1 s. Results also go to ``bench/out/sandbox_speed.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlmd.sandbox import Sandbox, create_sandbox, unavailable_reason
from rlmd.sandbox.limits import Limits

OUT_FILE = Path(__file__).resolve().parent / "out" / "sandbox_speed.json"
CELL = "x = sum(range(100)); print(x)"
IMAGES = ("rlmd/sandbox-base:1", "rlmd/sandbox-base:latest")  # the first that exists
BIG = 100_000_000  # characters of the big context

PROFILES = {
    "default": {"rt_n": 400, "rt_warm": 50, "cold_n": 12, "big_n": 3, "floor_n": 20},
    "quick": {"rt_n": 120, "rt_warm": 20, "cold_n": 5, "big_n": 1, "floor_n": 6},
}

NO_LIMITS = Limits(
    wall_s=None,
    cpu_s=None,
    memory_bytes=None,
    processes=None,
    open_files=None,
    file_size_bytes=None,
)

# name -> (backend, options)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "inprocess": ("inprocess", {}),
    "subprocess hardened": ("subprocess", {}),
    "subprocess plain": ("subprocess", {"isolation": "none", "limits": NO_LIMITS}),
    "container": ("container", {}),
}


async def _host(fn: str, args: dict[str, Any]) -> Any:
    return "ok"


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, p95 (nearest rank), min and n of ``samples`` (seconds)."""
    s = sorted(samples)
    return {
        "n": len(s),
        "median": statistics.median(s),
        "p95": s[max(0, math.ceil(0.95 * len(s)) - 1)],
        "min": s[0],
    }


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


# --------------------------------------------------------------------------- floors

FLOOR_CHILD = r"""
import json, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    msg = json.loads(inp.read(int.from_bytes(head, "big")))
    body = json.dumps({"op": "done", "id": msg["id"], "ok": True, "result": msg}).encode()
    out.write(len(body).to_bytes(4, "big") + body)
    out.flush()
"""


FLOOR_EXEC_CHILD = r"""
import io, json, sys
inp, out, ns = sys.stdin.buffer, sys.stdout.buffer, {}
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    msg = json.loads(inp.read(int.from_bytes(head, "big")))
    sys.stdout = cap = io.StringIO()
    exec(compile(msg["code"], "<cell>", "exec"), ns)
    sys.stdout = sys.__stdout__
    body = json.dumps({"op": "done", "id": msg["id"], "ok": True, "stdout": cap.getvalue()})
    out.write(len(body).to_bytes(4, "big") + body.encode())
    out.flush()
"""


def pipe_floor(
    n: int, warm: int, child: str = FLOOR_CHILD, cpus: tuple[int, int] | None = None
) -> list[float]:
    """Round trips of one JSON frame through a persistent echoing child (blocking I/O);
    with ``FLOOR_EXEC_CHILD``, a child that also compiles and runs the cell, capturing its
    stdout (what any out-of-process REPL does at least). ``cpus``: this process and the
    child pinned to these CPUs meanwhile (the same one twice: every wake-up a switch on
    one core; two: each wake-up crosses to the other core)."""
    mask = os.sched_getaffinity(0) if cpus is not None else None
    if cpus is not None:
        os.sched_setaffinity(0, {cpus[0]})
    try:
        return _pipe_floor(n, warm, child, cpus)
    finally:
        if mask is not None:
            os.sched_setaffinity(0, mask)


def pinnable_cpus() -> list[int]:
    """The CPUs this process may run on, when it can pin itself to one (Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def _pipe_floor(n: int, warm: int, child: str, cpus: tuple[int, int] | None) -> list[float]:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", child],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdin is not None and proc.stdout is not None
    if cpus is not None:
        os.sched_setaffinity(proc.pid, {cpus[1]})
    w, r = proc.stdin.fileno(), proc.stdout.fileno()

    def read(k: int) -> bytes:
        buf = b""
        while len(buf) < k:
            chunk = os.read(r, k - len(buf))
            if not chunk:
                raise EOFError("the floor child closed its pipe")
            buf += chunk
        return buf

    samples = []
    for i in range(n + warm):
        body = json.dumps({"op": "exec", "id": i, "code": CELL}).encode()
        t0 = time.perf_counter()
        os.write(w, len(body).to_bytes(4, "big") + body)
        reply = json.loads(read(int.from_bytes(read(4), "big")))
        dt = time.perf_counter() - t0
        assert reply["id"] == i
        if i >= warm:
            samples.append(dt)
    proc.stdin.close()
    proc.wait(5)
    return samples


def fresh_python(n: int, *flags: str) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - t0)
    return samples


async def asyncio_pipe_floor(n: int, warm: int) -> list[float]:
    """The same echoing child driven through asyncio streams: the floor plus the event-loop
    wake-ups every asyncio host pays."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-c", FLOOR_CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    samples = []
    for i in range(n + warm):
        body = json.dumps({"op": "exec", "id": i, "code": CELL}).encode()
        t0 = time.perf_counter()
        proc.stdin.write(len(body).to_bytes(4, "big") + body)
        head = await proc.stdout.readexactly(4)
        reply = json.loads(await proc.stdout.readexactly(int.from_bytes(head, "big")))
        dt = time.perf_counter() - t0
        assert reply["id"] == i
        if i >= warm:
            samples.append(dt)
    proc.stdin.close()
    await proc.wait()
    return samples


def docker_exec_floor(n: int) -> tuple[list[float] | None, str]:
    """``docker exec CTR true`` into a running container of the first of :data:`IMAGES`
    that exists, or why not."""
    docker = shutil.which("docker")
    if docker is None:
        return None, "no docker CLI"
    inspect = [docker, "image", "inspect"]
    image = next(
        (i for i in IMAGES if subprocess.run([*inspect, i], capture_output=True).returncode == 0),
        None,
    )
    if image is None:
        return None, f"none of {', '.join(IMAGES)} (or no engine)"
    started = subprocess.run(
        [docker, "run", "-d", "--rm", "--network", "none", "--label", "rlmd.bench=1", image]
        + ["sleep", "600"],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        return None, f"docker run failed: {started.stderr.strip()[-200:]}"
    ctr = started.stdout.strip()
    try:
        subprocess.run([docker, "exec", ctr, "true"], check=True)  # warm-up
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([docker, "exec", ctr, "true"], check=True)
            samples.append(time.perf_counter() - t0)
        return samples, ""
    finally:
        subprocess.run([docker, "rm", "-f", ctr], capture_output=True)


# --------------------------------------------------------------------------- sandboxes


async def round_trips(boxes: dict[str, Sandbox], n: int, warm: int) -> dict[str, list[float]]:
    """Interleaved rounds over every started sandbox (order reversed each round)."""
    names = list(boxes)
    for name in names:
        for _ in range(warm):
            await boxes[name].execute(CELL)
    samples: dict[str, list[float]] = {name: [] for name in names}
    rounds = 5
    for k in range(rounds):
        order = names if k % 2 == 0 else names[::-1]
        for name in order:
            box = boxes[name]
            for _ in range(n // rounds):
                t0 = time.perf_counter()
                r = await box.execute(CELL)
                samples[name].append(time.perf_counter() - t0)
                assert r.stdout == "4950\n", (name, r)
    return samples


async def cold_starts(name: str, n: int, *, spare: bool) -> list[float]:
    """Create + start + first cell, ``n`` times (closing each; with ``spare``, waiting until
    the next spare kernel is ready, as a daemon between runs would)."""
    backend, options = VARIANTS[name]
    if backend == "subprocess":
        options = {**options, "spare_kernel": spare}
    samples = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        box = create_sandbox(backend, **options)
        await box.start(_host)
        r = await box.execute("x = 1")
        samples.append(time.perf_counter() - t0)
        assert r.error is None, r.error
        await box.close()
        await asyncio.sleep(0.5 if spare else 0.05)
    return samples[1:]  # the first pays for detection and imports


async def big_context(box: Sandbox, n: int) -> list[float]:
    text = "0123456789" * (BIG // 10)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await box.load_context(text)
        samples.append(time.perf_counter() - t0)
    r = await box.execute("print(len(context))")
    assert r.stdout == f"{BIG}\n", r
    await box.load_context("small again")
    return samples


async def timed(label: str, make: Callable[[], Awaitable[Any]]) -> Any:
    print(f"  {label} ...", file=sys.stderr, flush=True)
    return await make()


async def main_async(profile: dict[str, int]) -> dict[str, Any]:
    results: dict[str, Any] = {"skipped": {}}
    names = []
    for name, (backend, _) in VARIANTS.items():
        reason = unavailable_reason(backend)
        if reason is None:
            names.append(name)
        else:
            results["skipped"][name] = reason

    boxes: dict[str, Sandbox] = {}
    for name in names:
        backend, options = VARIANTS[name]
        box = create_sandbox(backend, **options)
        await box.start(_host)
        await box.load_context("The quick brown fox jumps over the lazy dog. " * 200)
        boxes[name] = box
    results["isolation"] = {name: box.isolation for name, box in boxes.items()}
    try:
        rt = await timed(
            "round trips", lambda: round_trips(boxes, profile["rt_n"], profile["rt_warm"])
        )
        big = {}
        for name in names:
            big[name] = await timed(
                f"100 MB context: {name}", lambda b=boxes[name]: big_context(b, profile["big_n"])
            )
    finally:
        for box in boxes.values():
            await box.close()
    rt["pipe floor"] = pipe_floor(profile["rt_n"], profile["rt_warm"])
    rt["pipe floor (asyncio)"] = await asyncio_pipe_floor(profile["rt_n"], profile["rt_warm"])
    rt["pipe + exec floor"] = pipe_floor(profile["rt_n"], profile["rt_warm"], FLOOR_EXEC_CHILD)
    cpus = pinnable_cpus()
    if len(cpus) >= 2:  # where the scheduler puts the floor's two processes moves it 3-4x
        pinned = {"same CPU": (cpus[0], cpus[0]), "two CPUs": (cpus[0], cpus[1])}
        for label, pair in pinned.items():
            rt[f"pipe floor, {label} (pinned)"] = pipe_floor(
                profile["rt_n"], profile["rt_warm"], cpus=pair
            )
    dex, why = docker_exec_floor(profile["floor_n"])
    if dex is not None:
        rt["docker exec (floor)"] = dex
    else:
        results["skipped"]["docker exec (floor)"] = why

    cold: dict[str, list[float]] = {}
    for name in names:
        n = (
            profile["cold_n"]
            if VARIANTS[name][0] != "container"
            else max(2, profile["cold_n"] // 3)
        )
        if VARIANTS[name][0] == "subprocess":
            cold[f"{name}, spare ready"] = await timed(
                f"cold: {name} (spare)", lambda nm=name, k=n: cold_starts(nm, k, spare=True)
            )
            cold[f"{name}, no spare"] = await timed(
                f"cold: {name}", lambda nm=name, k=n: cold_starts(nm, k, spare=False)
            )
        else:
            cold[name] = await timed(
                f"cold: {name}", lambda nm=name, k=n: cold_starts(nm, k, spare=False)
            )
    cold["python -c pass (floor)"] = fresh_python(profile["floor_n"])
    cold["python -I -S -c pass (floor)"] = fresh_python(profile["floor_n"], "-I", "-S")

    results["round_trip"] = {k: summarize(v) for k, v in rt.items()}
    results["cold_start"] = {k: summarize(v) for k, v in cold.items()}
    results["context_100mb"] = {k: summarize(v) for k, v in big.items()}
    return results


def targets(res: dict[str, Any]) -> list[list[str]]:
    rows = []
    rt, cold, big = res["round_trip"], res["cold_start"], res["context_100mb"]

    def add(what: str, value: float | None, target: str, ok: bool | None, vs: str = "") -> None:
        shown = "-" if value is None else fmt(value)
        rows.append([what, shown, vs, target, {True: "yes", False: "NO", None: "-"}[ok]])

    floor = rt["pipe floor"]["median"]
    for name in ("subprocess hardened", "subprocess plain"):
        if name in rt:
            v = rt[name]["median"]
            add(
                f"{name} round trip",
                v,
                "<= 3x pipe floor",
                v <= 3 * floor,
                f"{v / floor:.1f}x pipe",
            )
            afloor = rt["pipe floor (asyncio)"]["median"]
            add(f"{name} vs asyncio pipe", v, "-", None, f"{v / afloor:.1f}x asyncio pipe")
            efloor = rt["pipe + exec floor"]["median"]
            add(f"{name} vs pipe + exec", v, "-", None, f"{v / efloor:.1f}x pipe + exec")
            for label in ("same CPU", "two CPUs"):
                pinned = rt.get(f"pipe floor, {label} (pinned)")
                if pinned is not None:
                    x = v / pinned["median"]
                    add(f"{name} vs pipe, {label}", v, "-", None, f"{x:.1f}x pinned pipe")
    for name in ("subprocess hardened, spare ready", "subprocess hardened, no spare"):
        if name in cold:
            v = cold[name]["median"]
            add(f"{name}: cold start", v, "< 50 ms", v < 0.05, f"{v / 0.05:.2f}x target")
    if "container" in rt:
        v = rt["container"]["median"]
        add("container round trip", v, "< 1 ms", v < 1e-3, f"{v / 1e-3:.2f}x target")
        v = cold["container"]["median"]
        add("container cold start", v, "< 1 s", v < 1.0, f"{v:.2f}x target")
    else:
        add("container", None, "-", None, res["skipped"].get("container", ""))
    for name, s in big.items():
        add(
            f"{name}: load 100 MB context",
            s["median"],
            "< 1 s",
            s["median"] < 1.0,
            f"{s['median']:.2f}x target",
        )
    return rows


def report(res: dict[str, Any]) -> str:
    out = []
    for key, title in (
        ("round_trip", "cell round trip (warm)"),
        ("cold_start", "cold start: create + start + first cell"),
        ("context_100mb", "load_context of a 100 MB string"),
    ):
        rows = [
            [name, fmt(s["median"]), fmt(s["p95"]), fmt(s["min"]), str(s["n"])]
            for name, s in res[key].items()
        ]
        out.append(f"\n== {title}\n" + table(["implementation", "median", "p95", "min", "n"], rows))
    out.append(
        "\n== against the issue's targets\n"
        + table(["measure", "median", "ratio", "target", "met?"], targets(res))
    )
    if res["skipped"]:
        out.append("\nskipped: " + "; ".join(f"{k}: {v}" for k, v in res["skipped"].items()))
    iso = res["isolation"].get("subprocess hardened")
    if iso:
        out.append(
            f"\nsubprocess hardened isolation: wrapper={iso.get('wrapper')} "
            f"namespaces={iso.get('namespaces')} network={iso.get('network')} "
            f"cgroup={iso.get('cgroup')} seccomp={iso.get('seccomp')}"
        )
    return "\n".join(out)


ROOT = Path(__file__).resolve().parent.parent
COMPARED = ("subprocess hardened", "subprocess plain")
COLD = "subprocess hardened"
COLD_ROWS = {"cold start hardened, no spare": False, "cold start hardened, spare ready": True}


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def round_trips_only(profile: dict[str, int]) -> dict[str, Any]:
    """Warm round trips of the :data:`COMPARED` variants (the ``--before`` child's job), and
    the CPU time per cell of this host process and of each variant's kernel process: what
    the machine's load moves much less than the wall clock."""
    boxes: dict[str, Sandbox] = {}
    try:
        for name in COMPARED:
            backend, options = VARIANTS[name]
            boxes[name] = create_sandbox(backend, **options)
            await boxes[name].start(_host)
        pids = {name: box.kernel.kernel_pid() for name, box in boxes.items()}  # type: ignore[attr-defined]
        kernel0 = {name: _cpu_s(pid) for name, pid in pids.items()}
        host0 = time.process_time()
        samples = await round_trips(boxes, profile["rt_n"], profile["rt_warm"])
        cells = profile["rt_n"] // 5 * 5 + profile["rt_warm"]  # per variant
        host_s = (time.process_time() - host0) / (cells * len(boxes))
        cpu = {name: (_cpu_s(pid) - kernel0[name]) / cells for name, pid in pids.items()}
    finally:
        for box in boxes.values():
            await box.close()
    n = max(2, profile["cold_n"] // 2)
    cold = {name: await cold_starts(COLD, n, spare=spare) for name, spare in COLD_ROWS.items()}
    return {"samples": samples, "kernel_cpu_s": cpu, "host_cpu_s": host_s, "cold": cold}


def before_after(before: Path, quick: bool, reps: int = 3) -> dict[str, Any]:
    """Round trips of the :data:`COMPARED` variants and cold starts of :data:`COLD` (with
    and without a spare kernel) for checkout ``before`` and for this one, each in a child
    process with that checkout first on ``PYTHONPATH``, alternating ``reps`` times; medians,
    and ratios to the pipe floor and the ``python -I -S -c pass`` floor measured in
    between."""
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    cold: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    py_floor: list[float] = []
    kernel_cpu: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    host_cpu: dict[str, list[float]] = {"before": [], "after": []}
    floor: list[float] = []
    profile = PROFILES["quick" if quick else "default"]
    for rep in range(reps):
        # Each child's teardown (kernels killed, their mount namespaces freed) loads the
        # machine for the child after it: the order flips every repetition.
        pair = (("before", before), ("after", ROOT))
        for label, root in pair if rep % 2 == 0 else pair[::-1]:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tui")])}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--round-trips-only"]
            out = subprocess.run(
                cmd + (["--quick"] if quick else []),
                env=env,
                cwd=str(root),
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            got = json.loads(out)
            for name, rts in got["samples"].items():
                samples[label].setdefault(name, []).extend(rts)
                kernel_cpu[label].setdefault(name, []).append(got["kernel_cpu_s"][name])
            host_cpu[label].append(got["host_cpu_s"])
            for name, starts in got["cold"].items():
                cold[label].setdefault(name, []).extend(starts)
        floor += pipe_floor(profile["rt_n"], profile["rt_warm"])
        py_floor += fresh_python(profile["floor_n"] // 2, "-I", "-S")
    pipe = statistics.median(floor)
    rows = {}
    for name in COMPARED:
        rows[name] = {
            **_medians(samples, name, pipe, "pipe"),
            "kernel_cpu_before_s": statistics.median(kernel_cpu["before"][name]),
            "kernel_cpu_after_s": statistics.median(kernel_cpu["after"][name]),
        }
    py = statistics.median(py_floor)
    for name in COLD_ROWS:
        rows[name] = _medians(cold, name, py, "floor")
    return {
        "before_root": str(before),
        "pipe_floor_s": pipe,
        "python_floor_s": py,
        "load_after": os.getloadavg(),
        "reps": reps,
        "rows": rows,
        "host_cpu_before_s": statistics.median(host_cpu["before"]),
        "host_cpu_after_s": statistics.median(host_cpu["after"]),
    }


def _medians(
    times: dict[str, dict[str, list[float]]], name: str, floor: float, key: str
) -> dict[str, float]:
    """Median seconds of row ``name`` before and after, each over ``floor`` (seconds)."""
    b = statistics.median(times["before"][name])
    a = statistics.median(times["after"][name])
    return {
        "before_s": b,
        "after_s": a,
        f"before_x_{key}": b / floor,
        f"after_x_{key}": a / floor,
        "after_over_before": a / b,
    }


def before_after_report(cmp: dict[str, Any]) -> str:
    rows = [
        [
            name,
            fmt(r["before_s"]),
            f"{r['before_x_pipe']:.1f}x",
            fmt(r["after_s"]),
            f"{r['after_x_pipe']:.1f}x",
            f"{r['after_over_before']:.2f}",
            f"{fmt(r['kernel_cpu_before_s'])} -> {fmt(r['kernel_cpu_after_s'])}",
        ]
        for name, r in cmp["rows"].items()
        if name in COMPARED
    ]
    cold_rows = [
        [
            name,
            fmt(r["before_s"]),
            f"{r['before_x_floor']:.1f}x",
            fmt(r["after_s"]),
            f"{r['after_x_floor']:.1f}x",
            f"{r['after_over_before']:.2f}",
        ]
        for name, r in cmp["rows"].items()
        if name in COLD_ROWS
    ]
    cold_head = ["create + start + first cell", "before", "x floor", "after", "x floor"]
    head = ["round trip (warm)", "before", "x pipe", "after", "x pipe", "after/before"]
    head.append("kernel CPU/cell")
    return (
        f"\n== before ({cmp['before_root']}) / after, {cmp['reps']} alternations; pipe floor "
        f"{fmt(cmp['pipe_floor_s'])}\n"
        + table(head, rows)
        + f"\nhost CPU per cell (both variants): {fmt(cmp['host_cpu_before_s'])} -> "
        f"{fmt(cmp['host_cpu_after_s'])}\n"
        + table([*cold_head, "after/before"], cold_rows)
        + f"\npython -I -S -c pass floor {fmt(cmp['python_floor_s'])}; load average at the "
        f"end {cmp['load_after'][0]:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--before", type=Path, help="another rlmd checkout to compare round trips with"
    )
    parser.add_argument(
        "--reps", type=int, default=3, help="before/after alternations (with --before)"
    )
    parser.add_argument("--round-trips-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    profile = PROFILES["quick" if args.quick else "default"]
    if args.round_trips_only:
        print(json.dumps(asyncio.run(round_trips_only(profile))))
        return 0
    res = asyncio.run(main_async(profile))
    if args.before:
        res["before_after"] = before_after(args.before.resolve(), args.quick, args.reps)
    res["machine"] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "profile": "quick" if args.quick else "default",
    }
    print(report(res))
    if args.before:
        print(before_after_report(res["before_after"]))
    print(f"\nmachine: {res['machine']}")
    OUT_FILE.parent.mkdir(exist_ok=True)
    OUT_FILE.write_text(json.dumps(res, indent=2, default=str))
    missed = [row[0] for row in targets(res) if row[-1] == "NO"]
    if missed:
        print("MISSED TARGETS: " + "; ".join(missed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Daemon load: N clients x M short scripted tasks against one ``rlmd serve`` process.

Run: ``.venv/bin/python bench/daemon_load.py [--clients 10] [--tasks 50]`` (about a minute
on 2 cores). Prints a table and writes ``bench/out/daemon_load.json``; exits non-zero if a
task was lost, did not complete, or a client missed an event.

What is measured (each client has its own project folder, so its own workspace and kernel):

* **command latency**: wall time of every ``rlmd.task.start`` / ``rlmd.task.status`` /
  ``rlmd.health`` round trip from the client, p50/p99 (nearest rank), under full load.
* **fan-out**: every run event goes to every client (full detail); we check each client got
  every ``rlmd/event`` seq exactly once, and report events/s delivered and the delay from the
  engine's event timestamp to its arrival at the client (p50/p99).
* **memory**: the daemon's RSS idle (no client), with the N workspaces open and idle, the
  difference per workspace, and the kernels' own RSS per workspace (``/proc``).
* **health while a big workspace loads** (issue 16): a client starts one task in a big
  workspace (a copy of this interpreter's standard library without ``site-packages``:
  2,450 files, 104 MB; ``--big-files N``: N generated ~3 KB files), and ``rlmd.health`` is sent every 20 ms from another client until
  that task's first model request; p50/p99/max against health on the idle daemon measured
  just before (the floor). **Target:** p99 <= 50 ms. ``--big-only`` runs just this part.
* **a question in a warm workspace over a big folder** (issue 16): the same one-cell
  question, alternately in a warm workspace over ``--warm-files`` generated files (30,000;
  or ``--warm-folder DIR``) and in one over 150 generated files (the peer), each from
  ``rlmd.task.start`` to the first model request (what the daemon does before the model
  sees the question: the folder's changes brought in) and to the task's end (checkpoint,
  store). **Target:** the big folder's median adds <= 0.1 s to the peer's. ``--before
  CHECKOUT`` times a daemon of another checkout in the same alternating rounds;
  ``--warm-only`` runs just this part.
* **a question after one edited file in that warm workspace** (issue 16): before it, one
  file of the big folder is rewritten (a generated module; with ``--warm-folder``, a file
  ``_rlmd_bench_edit.py`` the bench puts at the folder's top and removes at the end), and
  the question returns that file's text from ``context`` (checked: the edit must be seen).
  Timed in the same rounds as the no-change question and the 150-file peer. **Target:** its
  median adds <= 0.1 s to the no-change question's. The daemons run the code of
  ``--daemon-root`` (default: the checkout this file is in).
* **peer**: the same task run by the engine directly in this process, in a warm sandbox,
  no daemon, no store, one at a time: the per-task floor. ``ratio`` = daemon time per task
  (wall time of the whole load / tasks) / direct time per task; below 1 the daemon's
  parallelism across workspaces beats one-at-a-time direct runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.codebase_load import stdlib_copy  # noqa: E402
from rlmd.engine.events import ModelCallStarted  # noqa: E402
from rlmd.paths import rss_bytes  # noqa: E402
from rlmd.server.client import Client  # noqa: E402

MODELS = ROOT / "tests" / "helpers" / "scripted_models.py"
CELLS = f"scripted:{MODELS}:cells"
QUESTION = json.dumps({"cells": ["n = len(context)\ns = llm_query('size ' + str(n))", "FINAL(n)"]})


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def children_rss(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [rss_bytes(int(p)) or 0 for p in out.stdout.split()]


PROBE = """
import asyncio, json, sys, time
from rlmd.server.client import Client

async def main(sock, seconds):
    c = await Client.connect(sock)
    await c.command("rlmd.subscribe", {"events": "none", "progress": "none"})
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not c.closed:
        t0 = time.perf_counter()
        await c.command("rlmd.task.list")
        lat.append(time.perf_counter() - t0)
        await asyncio.sleep(0.02)
    print(json.dumps(lat))

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""
"""A separate process that only sends commands (no event stream): its latencies are the
daemon's, not those of a client busy parsing 75,000 notifications."""


SLOW_CALLBACKS = """
import asyncio.base_events as be, sys
init = be.BaseEventLoop.__init__
def logged(self, *a, **k):
    init(self, *a, **k)
    self.slow_callback_duration = 0.01  # asyncio logs each callback that held the loop longer
be.BaseEventLoop.__init__ = logged
from rlmd.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""``rlmd serve`` with asyncio's slow-callback log at 10 ms (``--slow-callbacks``)."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_project(root: Path, i: int) -> Path:
    proj = root / f"proj{i}"
    (proj / "src").mkdir(parents=True)
    for j in range(20):
        (proj / "src" / f"m{j}.py").write_text(f"def f{j}():\n    return {j}\n" * 20)
    return proj


async def client_load(
    sock: Path, project: Path, tasks: int, lat: dict, arrivals: list, barrier: asyncio.Barrier
) -> dict:
    c = await Client.connect(sock)
    await c.command("rlmd.subscribe", {"events": "full", "progress": "none"})
    await barrier.wait()  # every client listens before the first task starts
    t_recv: dict[int, float] = {}
    orig = c._dispatch

    def stamp(msg):
        if msg.get("method") == "rlmd/event":
            p = msg["params"]
            t_recv[p["seq"]] = time.time()
            arrivals.append(time.time() - p["ts"])
        orig(msg)

    c._dispatch = stamp
    ids = []
    for i in range(tasks):
        t0 = time.perf_counter()
        st = await c.command(
            "rlmd.task.start",
            {
                "workspace": str(project),
                "question": QUESTION,
                "models": {"root": CELLS},
            },
        )
        lat["task.start"].append(time.perf_counter() - t0)
        ids.append(st["run_id"])
        if i % 5 == 4:
            t0 = time.perf_counter()
            await c.command("rlmd.task.status", {"run_id": ids[-2]})
            lat["task.status"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await c.command("rlmd.health")
            lat["health"].append(time.perf_counter() - t0)
    statuses = {}
    for run_id in ids:
        note = await c.wait_for(
            lambda n, r=run_id: (
                n["method"] == "rlmd/taskStatus"
                and n["params"]["run_id"] == r
                and n["params"]["state"] == "finished"
            ),
            timeout=600,
        )
        statuses[run_id] = note["params"]["status"]
    return {"client": c, "ids": ids, "statuses": statuses, "seqs": t_recv}


async def direct_peer(project: Path, n: int) -> float:
    """Seconds per task for the engine run directly with a warm sandbox (no daemon)."""
    from rlmd import config
    from rlmd.context import load_codebase
    from rlmd.engine import RunConfig, prepare_sandbox, run_task
    from rlmd.sandbox import create_sandbox

    registry = config.load(None).registry()
    ctx = load_codebase(project)
    box = create_sandbox("subprocess")
    try:
        await prepare_sandbox(box, ctx)  # bound once, as a daemon workspace does
        for _ in range(2):  # warm-up
            await run_task(
                QUESTION, ctx, RunConfig(root_model=CELLS), get_model=registry.get, sandbox=box
            )
        t0 = time.perf_counter()
        for _ in range(n):
            r = await run_task(
                QUESTION, ctx, RunConfig(root_model=CELLS), get_model=registry.get, sandbox=box
            )
            assert r.status == "completed", r
        return (time.perf_counter() - t0) / n
    finally:
        await box.close()
        await registry.aclose()


HEALTH_TARGET_MS = 50.0


async def health_while_big_loads(sock: Path, big: Path) -> dict:
    """Health latency (s) on the idle daemon, then while a task in ``big`` loads, up to its
    first model request (its first ``model_call.started`` event)."""
    c, probe = await Client.connect(sock), await Client.connect(sock)
    try:
        await c.command("rlmd.subscribe", {"events": "summary", "progress": "none"})
        idle = []
        for _ in range(50):
            t0 = time.perf_counter()
            await probe.command("rlmd.health")
            idle.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        t_start = time.perf_counter()
        st = await c.command(
            "rlmd.task.start",
            {"workspace": str(big), "question": QUESTION, "models": {"root": CELLS}},
        )
        first = asyncio.ensure_future(
            c.wait_for(
                lambda n: (
                    n["method"] == "rlmd/event"
                    and n["params"]["task_id"] == st["run_id"]
                    and n["params"]["kind"] == ModelCallStarted.kind
                ),
                timeout=600,
            )
        )
        loading = []
        while not first.done():
            t0 = time.perf_counter()
            await probe.command("rlmd.health")
            loading.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        await first
        to_first = time.perf_counter() - t_start
        await c.wait_for(
            lambda n: (
                n["method"] == "rlmd/taskStatus"
                and n["params"]["run_id"] == st["run_id"]
                and n["params"]["state"] == "finished"
            ),
            timeout=600,
        )
    finally:
        await c.close()
        await probe.close()
    ms = lambda v, p: round(pct(v, p) * 1e3, 2)  # noqa: E731
    return {
        "idle_ms": {"p50": ms(idle, 50), "p99": ms(idle, 99), "n": len(idle)},
        "loading_ms": {
            "p50": ms(loading, 50),
            "p99": ms(loading, 99),
            "max": round(max(loading) * 1e3, 2),
            "n": len(loading),
        },
        "task_to_first_request_s": round(to_first, 2),
    }


WARM_TARGET_S = 0.1
EDIT_TARGET_S = 0.1
EDIT_FILE = "_rlmd_bench_edit.py"
"""The file a ``--warm-folder`` run edits (made at the folder's top, removed at the end)."""


def edited_text(base: str, n: int) -> str:
    """The edited file's text for edit ``n``: ``base`` with a first line that changes each
    time (the same size each time: what the stamps alone could miss, the watch must not)."""
    return f"# edit {n:06d}\n{base}"


async def warm_questions(
    homes: dict[str, Path], big: Path, small: Path, rounds: int, edit: str
) -> dict:
    """Seconds from ``rlmd.task.start`` to the first model request and to the end of the
    task, for a question in a warm workspace over ``big`` (``"big"``: nothing changed since
    the last question; ``"edited"``: the file ``edit`` of ``big``, relative, rewritten just
    before) and over ``small``, per daemon (``homes``: label -> its rlmd home), in rounds
    after one warm-up question each. A round: one edit, then the edited question on every
    daemon, the no-change question on every daemon, the peer on every daemon (the daemons
    share the folder: each sees exactly one edit before its edited question), the daemons'
    order alternating from round to round.

    Raises:
        SystemExit: a question did not complete, or an answer was not the folder's.
    """
    question = json.dumps({"cells": ["FINAL(str(len(context)))"]})
    show_edit = json.dumps({"cells": [f"FINAL(context[{edit!r}])"]})
    clients = {}
    for label, home in homes.items():
        token = (home / "run" / "daemon.token").read_text().strip()
        clients[label] = await Client.connect(daemon_socket(home), token=token)
    kinds = ("big", "edited", "small")
    times: dict[str, dict[str, list[tuple[float, float]]]] = {
        k: {kind: [] for kind in kinds} for k in homes
    }
    answers: dict[str, set[str]] = {"big": set(), "small": set()}
    edited_path = big / edit
    base = edited_path.read_text()

    async def ask(c: Client, folder: Path, q: str = question) -> tuple[float, float, str]:
        t0 = time.perf_counter()
        st = await c.command(
            "rlmd.task.start",
            {"workspace": str(folder), "question": q, "models": {"root": CELLS}},
        )
        run = st["run_id"]
        await c.wait_for(
            lambda n: (
                n["method"] == "rlmd/event"
                and n["params"]["task_id"] == run
                and n["params"]["kind"] == ModelCallStarted.kind
            ),
            timeout=600,
        )
        first = time.perf_counter() - t0
        note = await c.wait_for(
            lambda n: (
                n["method"] == "rlmd/taskStatus"
                and n["params"]["run_id"] == run
                and n["params"]["state"] == "finished"
            ),
            timeout=600,
        )
        c.notifications.clear()
        if note["params"]["status"] != "completed":
            raise SystemExit(f"a warm question did not complete: {note['params']}")
        return first, time.perf_counter() - t0, str(note["params"]["answer"])

    try:
        for c in clients.values():
            await c.command("rlmd.subscribe", {"events": "summary", "progress": "none"})
            for folder in (big, small):  # loads the workspace
                await ask(c, folder)
        for r in range(rounds):
            order = list(clients.items())
            if r % 2:
                order.reverse()
            want = edited_text(base, r)
            edited_path.write_text(want)
            for label, c in order:
                first, total, answer = await ask(c, big, show_edit)
                if answer != want:
                    raise SystemExit(f"{label}: the edit was not seen: {answer[:80]!r}")
                times[label]["edited"].append((first, total))
            for kind, folder in (("big", big), ("small", small)):
                for label, c in order:
                    first, total, answer = await ask(c, folder)
                    times[label][kind].append((first, total))
                    answers[kind].add(answer)
    finally:
        for c in clients.values():
            await c.close()
        edited_path.write_text(base)
    if len(answers["big"]) != 1 or len(answers["small"]) != 1:
        raise SystemExit(f"the daemons answered differently: {answers}")
    med = lambda v, i: round(statistics.median(x[i] for x in v), 4)  # noqa: E731
    return {
        "daemons": {
            label: {
                kind: {"to_first_request_s": med(v, 0), "to_end_s": med(v, 1), "n": len(v)}
                for kind, v in by_kind.items()
            }
            for label, by_kind in times.items()
        },
        "files": {
            "big": int(next(iter(answers["big"]))),
            "small": int(next(iter(answers["small"]))),
        },
        "edited_file": edit,
    }


def print_warm(w: dict) -> bool:
    """Prints the warm-question part (the no-change and the after-one-edit questions);
    whether both targets were met (by ``after``)."""
    files = w["files"]
    met = True
    for label, by_kind in w["daemons"].items():
        big, small, edited = by_kind["big"], by_kind["small"], by_kind["edited"]
        added = big["to_first_request_s"] - small["to_first_request_s"]
        ok = added <= WARM_TARGET_S
        print(
            f"warm question, {label}: {files['big']:,} files {big['to_first_request_s']:.3f} s to "
            f"the first model request ({big['to_end_s']:.3f} s to the end); peer {files['small']} "
            f"files {small['to_first_request_s']:.3f} s ({small['to_end_s']:.3f} s); added "
            f"{added:.3f} s, ratio {big['to_first_request_s'] / small['to_first_request_s']:.2f}"
            f" (medians of {big['n']})"
            + (f"; target <= {WARM_TARGET_S:g} s added: {'met' if ok else 'MISSED'}")
        )
        edit_added = edited["to_first_request_s"] - big["to_first_request_s"]
        edit_ok = edit_added <= EDIT_TARGET_S
        print(
            f"warm question after one edited file, {label}: {files['big']:,} files "
            f"{edited['to_first_request_s']:.3f} s to the first model request "
            f"({edited['to_end_s']:.3f} s to the end); peers: no change "
            f"{big['to_first_request_s']:.3f} s, {files['small']} files "
            f"{small['to_first_request_s']:.3f} s; added over no change {edit_added:.3f} s, "
            f"ratio {edited['to_first_request_s'] / big['to_first_request_s']:.2f} "
            f"(over the {files['small']}-file peer "
            f"{edited['to_first_request_s'] / small['to_first_request_s']:.2f}; medians of "
            f"{edited['n']}); target <= {EDIT_TARGET_S:g} s added: "
            + ("met" if edit_ok else "MISSED")
        )
        if label == "after":
            met = ok and edit_ok
    return met


def print_big(b: dict) -> bool:
    idle, load = b["idle_ms"], b["loading_ms"]
    met = load["p99"] <= HEALTH_TARGET_MS
    print(
        f"health while a {b['files']}-file workspace loads ({b['task_to_first_request_s']} s to "
        f"its first model request): p50 {load['p50']} ms, p99 {load['p99']} ms, max "
        f"{load['max']} ms (n {load['n']}); idle daemon (floor) p50 {idle['p50']} ms, p99 "
        f"{idle['p99']} ms; ratio p99 {load['p99'] / max(idle['p99'], 1e-3):.1f}; target p99 "
        f"<= {HEALTH_TARGET_MS:g} ms: {'met' if met else 'MISSED'}"
    )
    return met


def daemon_socket(home: Path) -> Path:
    """Where the daemon of rlmd home ``home`` listens (a short path elsewhere when
    ``home``'s is too long for a Unix socket)."""
    from rlmd import paths

    old = os.environ.get("RLMD_HOME")
    os.environ["RLMD_HOME"] = str(home)
    try:
        return paths.socket_path()
    finally:
        if old is None:
            del os.environ["RLMD_HOME"]
        else:
            os.environ["RLMD_HOME"] = old


async def warm_only(args) -> int:
    """The warm-question part alone (``--warm-only``), with ``--before``'s daemon too."""
    from bench.scale_curve import SOURCE, make_codebase

    load0 = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="rlmd-warm-"))
    procs = []
    made_edit_file: Path | None = None
    try:
        if args.warm_folder:
            big, edit = args.warm_folder.resolve(), EDIT_FILE
            made_edit_file = big / edit
            if made_edit_file.exists():
                raise SystemExit(f"{made_edit_file} exists: the bench will not overwrite it")
            made_edit_file.write_text(SOURCE.format(i=0) * 6)
        else:
            big, edit = make_codebase(work / "big", args.warm_files), "pkg0000/mod00000.py"
        small = make_codebase(work / "small", 150)
        roots = {"after": args.daemon_root} | ({"before": args.before} if args.before else {})
        homes = {}
        for label, root in roots.items():
            home = work / label[0]  # short: a Unix socket's path is at most 107 bytes
            home.mkdir()
            path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
            env = {**os.environ, "RLMD_HOME": str(home), "PYTHONPATH": path}
            log = open(work / f"daemon-{label}.log", "wb")  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "rlmd", "serve", "--idle-timeout", "0"],
                    env=env,
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    cwd=work,  # not a checkout: -m rlmd imports PYTHONPATH's
                )
            )
            homes[label], sock = home, daemon_socket(home)
            for _ in range(1200):
                if sock.exists() or procs[-1].poll() is not None:
                    break
                await asyncio.sleep(0.05)
            if not sock.exists():
                log.close()
                tail = (work / f"daemon-{label}.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"the {label} daemon did not start:\n{tail}")
        report = await warm_questions(homes, big, small, args.warm_rounds, edit)
    finally:
        if made_edit_file is not None:
            made_edit_file.unlink(missing_ok=True)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    report["load_average"] = {"start": load0, "end": os.getloadavg()}
    report["before_root"] = str(args.before) if args.before else None
    report["after_root"] = str(args.daemon_root)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "daemon_load_warm.json").write_text(json.dumps(report, indent=1))
    met = print_warm(report)
    print(
        f"load average {load0[0]:.2f} at start, {report['load_average']['end'][0]:.2f} at the "
        f"end, on {os.cpu_count()} cores"
    )
    return 0 if met else 1


async def main_async(args) -> int:
    if args.warm_only:
        return await warm_only(args)
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="rlmd-load-"))
    home = work / "home"
    home.mkdir()
    env = {**os.environ, "RLMD_HOME": str(home)}
    if args.big_files:  # made before the daemon starts (it may stop when idle meanwhile)
        from bench.scale_curve import make_codebase

        big = make_codebase(work / "big", args.big_files)
    else:
        big = stdlib_copy(work / "big")
    log = open(work / "daemon.log", "wb")  # noqa: SIM115
    cmd = [sys.executable, "-m", "rlmd", "serve", "--idle-timeout", "0"]
    if args.profile:
        cmd[1:1] = ["-m", "cProfile", "-o", args.profile]
    if args.slow_callbacks:  # asyncio's debug mode logs every callback that held the loop
        env["PYTHONASYNCIODEBUG"] = "1"
        cmd[1:3] = ["-c", SLOW_CALLBACKS]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    sock = home / "run" / "rlmd.sock"
    try:
        for _ in range(400):
            if sock.exists():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        files = sum(len(f) for _, _, f in os.walk(big))
        big_report = {**await health_while_big_loads(sock, big), "files": files}
        if args.big_only:
            if args.slow_callbacks:
                log.flush()
                slow = [
                    line
                    for line in (work / "daemon.log").read_text(errors="replace").splitlines()
                    if " took " in line and ("Executing" in line or "slow" in line.lower())
                ]
                print(f"{len(slow)} callbacks held the daemon's loop >= 10 ms:")
                print("\n".join(slow[:40]))
            return 0 if print_big(big_report) else 1
        idle_rss = rss_bytes(proc.pid) or 0
        projects = [make_project(work, i) for i in range(args.clients)]

        # open every workspace first, so the memory numbers have no task running
        c = await Client.connect(sock)
        for p in projects:
            await c.command("rlmd.workspace.open", {"workspace": str(p)})
        await asyncio.sleep(0.5)
        open_rss = rss_bytes(proc.pid) or 0
        kernels = children_rss(proc.pid)
        await c.close()

        lat = {"task.start": [], "task.status": [], "health": []}
        arrivals: list[float] = []
        barrier = asyncio.Barrier(args.clients)
        cpu0 = cpu_seconds(proc.pid)
        probe = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PROBE,
            str(sock),
            str(args.probe_seconds),
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        bench_cpu0 = sum(os.times()[:2])
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(client_load(sock, p, args.tasks, lat, arrivals, barrier) for p in projects)
        )
        wall = time.perf_counter() - t0
        h = await results[0]["client"].command("rlmd.health")
        await asyncio.sleep(0.5)  # let the last notifications arrive everywhere
        cpu_s = cpu_seconds(proc.pid) - cpu0
        bench_cpu = sum(os.times()[:2]) - bench_cpu0
        probe_out, _ = await probe.communicate()
        lat["probe task.list"] = json.loads(probe_out or b"[]")
        loaded_rss = rss_bytes(proc.pid) or 0
        event_seqs = [set(r["seqs"]) for r in results]
        all_seqs = set().union(*event_seqs)
        missed = sum(len(all_seqs - s) for s in event_seqs)
        statuses = [s for r in results for s in r["statuses"].values()]
        for r in results:
            await r["client"].close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if args.big_only:
            shutil.rmtree(work, ignore_errors=True)
    direct = await direct_peer(projects[0], 20)
    shutil.rmtree(work, ignore_errors=True)

    total = args.clients * args.tasks
    completed = sum(1 for s in statuses if s == "completed")
    all_lat = [x for k, v in lat.items() if not k.startswith("probe") for x in v]
    per_task = wall / total
    report = {
        "clients": args.clients,
        "tasks_per_client": args.tasks,
        "tasks": total,
        "completed": completed,
        "lost": total - len(statuses),
        "wall_s": round(wall, 3),
        "tasks_per_s": round(total / wall, 1),
        "bench_client_cpu_s": round(bench_cpu, 2),
        "latency_ms": {
            k: {"p50": round(pct(v, 50) * 1e3, 2), "p99": round(pct(v, 99) * 1e3, 2), "n": len(v)}
            for k, v in {**lat, "all clients": all_lat}.items()
        },
        "fanout": {
            "events": len(all_seqs),
            "deliveries": sum(len(s) for s in event_seqs),
            "missed": missed,
            "deliveries_per_s": round(sum(len(s) for s in event_seqs) / wall, 0),
            "delay_ms_p50": round(pct(arrivals, 50) * 1e3, 2),
            "delay_ms_p99": round(pct(arrivals, 99) * 1e3, 2),
        },
        "memory_mib": {
            "daemon_idle": round(idle_rss / 2**20, 1),
            "daemon_with_workspaces": round(open_rss / 2**20, 1),
            "daemon_per_workspace": round((open_rss - idle_rss) / args.clients / 2**20, 2),
            "kernel_per_workspace": round(sum(kernels) / max(1, len(kernels)) / 2**20, 1),
            "daemon_after_load": round(loaded_rss / 2**20, 1),
        },
        "daemon_cpu_ms_per_task": round(cpu_s / total * 1e3, 2),
        "load_average_at_start": load0,
        "peer_direct_s_per_task": round(direct, 4),
        "daemon_s_per_task": round(per_task, 4),
        "ratio_daemon_vs_direct": round(per_task / direct, 2),
        "health_tasks": h["tasks"],
        "health_while_big_workspace_loads": big_report,
    }
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "daemon_load.json").write_text(json.dumps(report, indent=1))
    L = report["latency_ms"]
    print(
        f"daemon load: {args.clients} clients x {args.tasks} tasks = {total} tasks "
        f"in {wall:.1f} s ({report['tasks_per_s']} tasks/s); completed {completed}, "
        f"lost {report['lost']}"
    )
    print(f"{'command':<18}{'p50 ms':>10}{'p99 ms':>10}{'n':>7}")
    for k, v in L.items():
        print(f"{k:<18}{v['p50']:>10}{v['p99']:>10}{v['n']:>7}")
    print(
        "(the load clients share one process that also parses every event, "
        f"{report['bench_client_cpu_s']} CPU s; the probe is a separate process with no events)"
    )
    f = report["fanout"]
    print(
        f"fan-out: {f['events']} events x {args.clients} clients = {f['deliveries']} deliveries "
        f"({f['deliveries_per_s']:.0f}/s), missed {f['missed']}, engine->client delay "
        f"p50 {f['delay_ms_p50']} ms, p99 {f['delay_ms_p99']} ms"
    )
    m = report["memory_mib"]
    print(
        f"memory: daemon idle {m['daemon_idle']} MiB; with {args.clients} workspaces "
        f"{m['daemon_with_workspaces']} MiB ({m['daemon_per_workspace']} MiB each in the "
        f"daemon + {m['kernel_per_workspace']} MiB kernel process each); after load "
        f"{m['daemon_after_load']} MiB"
    )
    print(
        f"daemon CPU: {report['daemon_cpu_ms_per_task']} ms per task (engine, store, fan-out, "
        f"checkpoint); load average at start {load0:.2f} on {os.cpu_count()} cores"
    )
    print(
        f"per task: daemon {per_task * 1e3:.1f} ms (under load, {args.clients} workspaces) vs "
        f"direct engine {direct * 1e3:.1f} ms (one warm sandbox, no store): ratio "
        f"{report['ratio_daemon_vs_direct']}"
    )
    health_met = print_big(big_report)
    ok = completed == total and f["missed"] == 0
    if not ok:
        print("FAILED: lost, unfinished tasks or missed events", file=sys.stderr)
    if not health_met:
        print("MISSED TARGET: health p99 while a big workspace loads", file=sys.stderr)
    warm_met = await warm_only(args) == 0
    if not warm_met:
        print("MISSED TARGET: a question in a warm big workspace", file=sys.stderr)
    return 0 if ok and health_met and warm_met else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument(
        "--probe-seconds",
        type=float,
        default=12.0,
        help="how long the separate probe client sends commands",
    )
    ap.add_argument("--profile", help="write a cProfile of the daemon to this file")
    ap.add_argument(
        "--big-only", action="store_true", help="only health while a big workspace loads"
    )
    ap.add_argument(
        "--big-files",
        type=int,
        help="the big workspace: this many generated ~3 KB files (default: a stdlib copy)",
    )
    ap.add_argument(
        "--warm-only", action="store_true", help="only a question in a warm big workspace"
    )
    ap.add_argument("--warm-files", type=int, default=30_000, help="the warm big workspace's files")
    ap.add_argument("--warm-folder", type=Path, help="the warm big workspace (default: generated)")
    ap.add_argument("--warm-rounds", type=int, default=10)
    ap.add_argument(
        "--before", type=Path, help="another rlmd checkout's daemon, timed in the same rounds"
    )
    ap.add_argument(
        "--daemon-root",
        type=Path,
        default=ROOT,
        help="the rlmd checkout whose daemon is timed as 'after' (default: this file's)",
    )
    ap.add_argument(
        "--slow-callbacks",
        action="store_true",
        help="run the daemon in asyncio debug mode and list what held its loop (--big-only)",
    )
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

"""Daemon stall while a workspace with many variables is listed (issue 16 item 2).

Run: ``.venv/bin/python bench/vars_stall.py [--n 200000]`` (about a minute on 2 cores).
Starts a real ``rlmd serve`` on its own socket and home, opens a workspace on a one-file
project, makes ``--n`` int variables with ``rlmd.workspace.exec``, then, while a separate
probe process sends ``rlmd.health`` every 20 ms (a process of its own, so the latencies are
the daemon's and not those of a client parsing a 12 MB reply), a client

1. asks ``rlmd.workspace.variables`` without paging parameters (what an older client sends),
2. lists every variable, page after page (``limit`` at its maximum; a daemon without paging
   answers the first call with all of them),
3. runs a task in the workspace (a scripted model: the task's note about the workspace's
   variables, its end and the checkpoint after it),
4. closes the workspace (a checkpoint of ``--n`` variables),
5. lists the stopped workspace's variables from its checkpoint, page after page,

and checks each listing named every variable exactly once. Prints health p50/p99/max per phase
against the idle daemon's (the floor, same run) and the peer: ``json.dumps`` + ``json.loads``
of a reply holding every variable, in one process (the least a one-reply listing costs).

**Target:** health p99 <= 50 ms in every phase: during the listings (1, 2, 5), during the task
(whose end is the after-task checkpoint of ``--n`` variables) and during the close (the
checkpoint the close takes); exit 1 when missed or when a listing lost or repeated a variable.
``--phases 34`` runs only the checkpoint phases (3 and 4; about half the time).
``--daemon-root DIR`` runs the daemon from another checkout (before/after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.daemon_load import pct  # noqa: E402
from rlmd import paths  # noqa: E402
from rlmd.server.client import Client  # noqa: E402

HEALTH_TARGET_MS = 50.0
MODELS = ROOT / "tests" / "helpers" / "scripted_models.py"
CELLS = f"scripted:{MODELS}:cells"

PROBE = """
import asyncio, json, os, sys, time
from rlmd.server.client import Client

async def main(sock, stop):
    c = await Client.connect(sock)
    out = []
    while not os.path.exists(stop) and not c.closed:
        t0 = time.monotonic()
        await c.command("rlmd.health", timeout=600)
        out.append((t0, time.monotonic() - t0))
        await asyncio.sleep(0.02)
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
"""Sends ``rlmd.health`` every 20 ms until the file ``stop`` exists; prints ``[(sent at
(CLOCK_MONOTONIC, shared by the processes), seconds), ...]``."""


def make_code(n: int) -> str:
    return f"for i in range({n}):\n    globals()[f'v{{i:07d}}'] = i\ndel i\n"


def peer_seconds(n: int) -> float:
    """``json.dumps`` then ``json.loads`` of a reply listing ``n`` such variables, seconds."""
    reply = {
        "variables": [
            {"name": f"v{i:07d}", "type": "int", "size": None, "preview": str(i)} for i in range(n)
        ]
    }
    t0 = time.perf_counter()
    json.loads(json.dumps(reply))
    return time.perf_counter() - t0


async def list_all(c: Client, ws: dict, limit: int) -> tuple[list[str], int]:
    """Every variable's name, page after page: ``(names, requests)``. A daemon without
    paging answers the first request with every variable (and no ``next_offset``)."""
    names: list[str] = []
    offset: int | None = 0
    requests = 0
    paged = True
    while offset is not None:
        params = {**ws, "offset": offset, "limit": limit} if paged else dict(ws)
        try:
            got = await c.command("rlmd.workspace.variables", params, timeout=600)
        except Exception as exc:  # noqa: BLE001 - an older daemon refuses the parameters
            if requests == 0 and "unknown parameter" in str(exc):
                paged = False
                continue
            raise
        requests += 1
        names += [v["name"] for v in got["variables"]]
        offset = got.get("next_offset")
    return names, requests


async def main_async(args) -> int:
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="rlmd-vars-"))
    home, project = work / "home", work / "proj"
    home.mkdir()
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    # the daemon runs this checkout's rlmd unless told otherwise (not whichever checkout the
    # venv's editable install points at)
    daemon_root = Path(args.daemon_root or ROOT).resolve()
    env = {**os.environ, "RLMD_HOME": str(home), "PYTHONPATH": str(daemon_root)}
    log = open(work / "daemon.log", "wb")  # noqa: SIM115
    cmd = [sys.executable, "-m", "rlmd", "serve", "--idle-timeout", "0"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=work
    )
    os.environ["RLMD_HOME"] = str(home)
    sock = paths.socket_path()
    stop = work / "stop-probe"
    marks: dict[str, tuple[float, float]] = {}
    checks: dict[str, bool] = {}
    took: dict[str, float] = {}
    wanted = {f"v{i:07d}" for i in range(args.n)}
    probe = None
    try:
        for _ in range(400):
            if sock.exists() or proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        if not sock.exists():
            raise SystemExit(f"the daemon did not listen at {sock} (exit code {proc.poll()})")
        c = await Client.connect(sock)
        ws = {"workspace": str(project)}
        await c.command("rlmd.workspace.open", ws)
        t0 = time.perf_counter()
        made = await c.command(
            "rlmd.workspace.exec", {**ws, "code": make_code(args.n), "timeout_s": 600}, timeout=900
        )
        took["setup exec"] = time.perf_counter() - t0
        assert made["error"] is None, made["error"]
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, str(sock), str(stop)],
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
        )
        await asyncio.sleep(1.5)  # the probe's start; then the floor
        t_idle = time.monotonic()
        await asyncio.sleep(1.0)
        marks["idle daemon (floor)"] = (t_idle, time.monotonic())

        async def phase(name: str, coro):
            t_a = time.monotonic()
            out = await coro
            marks[name] = (t_a, time.monotonic())
            took[name] = marks[name][1] - t_a
            await asyncio.sleep(0.2)
            return out

        if "1" in args.phases:
            first = await phase(
                "1 variables, no paging params",
                c.command("rlmd.workspace.variables", ws, timeout=600),
            )
            total = first.get("total", len(first["variables"]))
            checks["1 total"] = total == args.n
        if "2" in args.phases:
            names, requests = await phase("2 every variable, paged", list_all(c, ws, args.limit))
            checks["2 each once"] = len(names) == len(set(names)) and set(names) == wanted
            took["2 requests"] = requests
        question = json.dumps({"cells": ["FINAL(len(globals()))"]})
        st = await c.command(
            "rlmd.task.start", {**ws, "question": question, "models": {"root": CELLS}}
        )

        async def task_done():
            while True:
                s = await c.command("rlmd.task.status", {"run_id": st["run_id"]}, timeout=600)
                if s["state"] == "finished":
                    return s
                await asyncio.sleep(0.05)

        done = await phase("3 a task + its checkpoint", task_done())
        checks["3 task completed"] = done["status"] == "completed"
        closed = await phase(
            "4 close + checkpoint", c.command("rlmd.workspace.close", ws, timeout=900)
        )
        saved = closed["last_checkpoint"] or {}
        checks["4 checkpoint counts every variable"] = (
            saved.get("variables_total", len(saved.get("variables", []))) == args.n
        )
        if "5" in args.phases:
            names, _ = await phase("5 stopped workspace, paged", list_all(c, ws, args.limit))
            checks["5 each once"] = len(names) == len(set(names)) and set(names) == wanted
        await c.close()
    finally:
        stop.touch()
        samples = []
        if probe is not None:
            out, _ = probe.communicate(timeout=600)
            samples = json.loads(out or b"[]")
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        if all(checks.values()) and checks:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"the daemon's home and log are kept in {work}", file=sys.stderr)
    load1 = os.getloadavg()[0]
    peer = peer_seconds(args.n)

    def during(a: float, b: float) -> list[float]:
        # a health request sent before the phase's end and answered after its start
        return [lat for t, lat in samples if t <= b and t + lat >= a]

    floor_lat = during(*marks["idle daemon (floor)"])
    floor = round(pct(floor_lat, 99) * 1e3, 2)
    print(
        f"daemon from {daemon_root}; {args.n:,} int variables in one workspace (setup exec "
        f"{took['setup exec']:.1f} s); "
        f"load average {load0:.2f} at start, {load1:.2f} at end, {os.cpu_count()} cores"
    )
    print(f"idle daemon health (floor): p50 {pct(floor_lat, 50) * 1e3:.2f} ms, p99 {floor} ms")
    print(f"peer: json.dumps + json.loads of a reply listing every variable: {peer:.2f} s")
    met = True
    report: dict = {"n": args.n, "floor_p99_ms": floor, "peer_s": round(peer, 3), "phases": {}}
    for name, (a, b) in marks.items():
        if name.startswith("idle"):
            continue
        lat = during(a, b) or [float("nan")]
        p99 = round(pct(lat, 99) * 1e3, 2)
        ok = p99 <= HEALTH_TARGET_MS
        met = met and ok
        extra = f", {took['2 requests']} requests" if name.startswith("2") else ""
        verdict = "met" if ok else "MISSED"
        print(
            f"{name}: {took[name]:.2f} s{extra}; health p50 {pct(lat, 50) * 1e3:.2f} ms, p99 "
            f"{p99} ms, max {max(lat) * 1e3:.2f} ms (n {len(lat)}); p99 / floor "
            f"{p99 / max(floor, 1e-3):.1f}; target p99 <= {HEALTH_TARGET_MS:g} ms: {verdict}"
        )
        report["phases"][name] = {"s": round(took[name], 3), "p99_ms": p99, "n": len(lat)}
    print("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in checks.items()))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    report.update(checks=checks, load=[load0, load1])
    (out / "vars_stall.json").write_text(json.dumps(report, indent=1))
    ok = bool(checks) and all(checks.values())
    if not ok:
        print("FAILED: a listing lost or repeated a variable, or the task failed", file=sys.stderr)
    if not met:
        print(
            "MISSED TARGET: health p99 while variables are listed or checkpointed",
            file=sys.stderr,
        )
    return 0 if ok and met else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="int variables in the workspace")
    ap.add_argument("--limit", type=int, default=2000, help="page size of the paged listings")
    ap.add_argument("--daemon-root", help="run the daemon from this checkout's rlmd package")
    ap.add_argument(
        "--phases", default="12345", help="which phases to run (3 and 4 always run): 12345"
    )
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

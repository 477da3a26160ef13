"""Helpers for the daemon tests: a real ``rlmd serve`` process on a real Unix socket in a
private rlmd home, the scripted model names, and small waiting helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from rlmd.server.client import Client

HERE = Path(__file__).resolve().parent
MODELS = HERE / "scripted_models.py"
CELLS = f"scripted:{MODELS}:cells"
ECHO = f"scripted:{MODELS}:system_echo"


def question(*cells: str, sleep_s: float | None = None, gate: Path | None = None) -> str:
    """A question for the ``cells`` scripted model (``gate``: every reply waits for that file)."""
    spec: dict = {"cells": list(cells)}
    if sleep_s:
        spec["sleep_s"] = sleep_s
    if gate is not None:
        spec["gate"] = str(gate)
    return json.dumps(spec)


class Daemon:
    """A running ``rlmd serve`` (its home, socket, process). ``prelude``: Python code the
    daemon process runs before ``rlmd serve`` (to patch a function), with ``env`` added."""

    def __init__(
        self, home: Path, *args: str, prelude: str | None = None, env: dict | None = None
    ) -> None:
        self.home = home
        self.args = args
        self.socket = home / "run" / "rlmd.sock"
        self.proc: subprocess.Popen | None = None
        self.prelude, self.env = prelude, env or {}

    def start(self, timeout: float = 120.0) -> Daemon:
        # Generous: the wait ends as soon as the socket answers, and at load ~7 on two cores a
        # daemon's start (imports, store) once took longer than 20 s (review12, session 12).
        env = {**os.environ, "RLMD_HOME": str(self.home), **self.env}
        log = open(self.home / "daemon-test.log", "ab")  # noqa: SIM115
        command = [sys.executable, "-m", "rlmd"]
        if self.prelude is not None:
            run = "\nimport sys\nfrom rlmd.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
            command = [sys.executable, "-c", self.prelude + run]
        self.proc = subprocess.Popen(
            [*command, "serve", *self.args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.log()}")
            if self.socket.exists():
                import socket as s

                probe = s.socket(s.AF_UNIX)
                try:
                    probe.connect(str(self.socket))
                    probe.close()
                    return self
                except OSError:
                    probe.close()
            time.sleep(0.05)
        raise RuntimeError(f"daemon did not start: {self.log()}")

    def log(self) -> str:
        with suppress(OSError):
            return (self.home / "daemon-test.log").read_text()[-4000:]
        return ""

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def client(self) -> Client:
        return await Client.connect(self.socket)


def make_project(root: Path, name: str = "proj") -> Path:
    """A tiny project folder."""
    proj = root / name
    (proj / "pkg").mkdir(parents=True, exist_ok=True)
    (proj / "pkg" / "core.py").write_text("def helper():\n    return 42\n")
    (proj / "README.md").write_text("# demo\n")
    return proj


def finished(run_id: str):
    """Predicate: the taskStatus notification saying ``run_id`` finished."""

    def match(note: dict) -> bool:
        p = note["params"]
        return (
            note["method"] == "rlmd/taskStatus"
            and p["run_id"] == run_id
            and p["state"] == "finished"
        )

    return match


def event(run_id: str, kind: str, depth: int | None = None):
    """Predicate: an ``rlmd/event`` of task ``run_id`` of ``kind`` (at ``depth``)."""

    def match(note: dict) -> bool:
        p = note["params"]
        return (
            note["method"] == "rlmd/event"
            and p["task_id"] == run_id
            and p["kind"] == kind
            and (depth is None or p["depth"] == depth)
        )

    return match


async def run_to_end(client: Client, params: dict, timeout: float = 30.0) -> dict:
    """Start a task and return its final taskStatus params."""
    started = await client.command("rlmd.task.start", params)
    note = await client.wait_for(finished(started["run_id"]), timeout=timeout)
    return note["params"]

"""A real Ray cluster of several nodes on this machine, for the cluster tests and
``bench/cluster_fanout.py``: ``ray start
--head`` plus ``ray start --address`` per extra node, each a real raylet with its own
object store (small: the machine is shared). Stopped by killing exactly the processes this
helper started (found by its own temp folder), never ``ray stop`` (which would stop every
cluster of the user)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """Head + nodes on this machine; ``address`` is the head's GCS."""

    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="rlmdray-", dir="/tmp")  # short: socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ray = str(Path(sys.executable).with_name("ray"))
        paths = [str(REPO), str(REPO / "tui"), str(REPO / "tests")]
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths),
            "RAY_USAGE_STATS_ENABLED": "0",
        }

    def _start(self, *args: str) -> None:
        out = subprocess.run(
            [
                self.ray,
                "start",
                "--num-cpus",
                "1",
                "--object-store-memory",
                str(OBJECT_STORE_BYTES),
                "--disable-usage-stats",
                "--node-ip-address",
                "127.0.0.1",
                *args,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ray start failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")

    def start_head(self) -> None:
        self._start(
            "--head",
            "--port",
            str(self.port),
            "--temp-dir",
            self.temp,
            "--include-dashboard",
            "false",
            "--ray-client-server-port",
            str(_free_port()),
            "--resources",
            json.dumps({"rlmd_head": 1}),
        )

    def add_node(self, name: str) -> str:
        """Start one more node (custom resource ``name``); returns its node id.

        On a loaded machine ``ray start`` can give up waiting for its raylet to register (a
        30 s wait fixed in Ray's ``node.py``: "timed out during startup", seen here at load 11)
        while the raylet it started, which outlives the command, registers later; then the
        node is waited for up to 180 s more.

        Raises:
            RuntimeError: ``ray start`` failed otherwise, or the node did not join in time.
        """
        before = set(self.node_ids())
        wait_s = 30.0
        try:
            self._start("--address", self.address, "--resources", json.dumps({name: 1}))
        except RuntimeError as exc:
            if "timed out during startup" not in str(exc):
                raise
            wait_s = 180.0
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            new = set(self.node_ids()) - before
            if new:
                return new.pop()
            time.sleep(0.1)
        raise RuntimeError(f"node {name} did not join within {wait_s:.0f} s")

    def node_ids(self) -> list[str]:
        import ray

        return [n["NodeID"] for n in ray.nodes() if n["Alive"]] if ray.is_initialized() else []

    def raylet(self, node_id: str) -> psutil.Process:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if cmd and cmd[0].endswith("raylet") and f"--node_id={node_id}" in cmd:
                return proc
        raise LookupError(f"no raylet for node {node_id}")

    def kill_node(self, node_id: str) -> None:
        """Lose a node: SIGKILL its raylet and Ray's agents beside it. Its workers (the
        node actor and the sandboxes it started) are left to notice on their own."""
        raylet = self.raylet(node_id)
        agents = [
            p
            for p in raylet.children()
            if p.name().startswith(("ray::Dashboard", "ray::RuntimeEnv"))
        ]
        raylet.kill()
        for agent in agents:
            with contextlib.suppress(psutil.Error):
                agent.kill()

    def own_processes(self) -> list[psutil.Process]:
        """Every process of this cluster still alive: those with its temp folder on their
        command line, and their descendants (workers rename themselves ``ray::...``)."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(self.temp in part for part in proc.info["cmdline"] or []):
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
        return list(found.values())

    def stop(self) -> None:
        procs = self.own_processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=10)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


def tree_shape(run: dict[str, Any]) -> tuple:
    """A stored run tree (:meth:`rlmd.store.Store.tree`) without ids, times and numbers:
    its question, status, answer, and its nodes (kind, children, child runs) with the runs
    under them, in a canonical order. Two executors that ran the same tree give equal
    shapes."""

    def node(n: dict[str, Any]) -> tuple:
        return (
            n["kind"],
            tuple(sorted(node(c) for c in n["children"])),
            tuple(sorted(tree_shape(r) for r in n["runs"])),
        )

    return (
        run["question"],
        run["status"],
        run["answer"],
        tuple(sorted(node(n) for n in run["nodes"])),
        tuple(sorted(tree_shape(r) for r in run["runs"])),
    )

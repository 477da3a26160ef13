"""Start and stop one OpenAI-compatible ``llama_cpp.server`` that every system shares.

Started on 127.0.0.1 with the GGUF under test, ``--n_threads`` / ``--n_threads_batch``
(default 1: two spinning ggml threads collapse when another job holds a core) and
``--n_ctx``; stopped by its PID (terminate, then kill after a grace period). Needs
``pip install 'llama-cpp-python[server]==0.3.36'``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """One server process. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    model_path: Path
    alias: str
    n_ctx: int = 8192
    n_threads: int = 1
    port: int = 0
    cache: bool = False
    log_path: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--model_alias", self.alias,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            "--seed", "1234",
            # queue concurrent requests: by default a new request interrupts the one being
            # generated, which failed 19 of 20 parallel llm_map sub-calls (issue 15's run)
            "--interrupt_requests", "false",
        ]  # fmt: skip
        if self.cache:
            cmd += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(2 << 30)]
        return cmd

    def start(self, timeout_s: float = 180.0) -> LlamaServer:
        """Start the process and wait until ``/v1/models`` answers.

        Raises:
            RuntimeError: the process exited or did not answer within ``timeout_s``.
        """
        if not self.port:
            self.port = free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {self.proc.returncode}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200 and json.load(r).get("data"):
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within {timeout_s:g} s")

    def stop(self) -> None:
        """Terminate the server by its PID (SIGTERM, then SIGKILL after 10 s)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The server benchmarks clean up after themselves: ``bench/checkpoint_stall.py`` left its
daemon's home (with a checkpoint of tens of MB) in the temporary folder on every run, and
``bench/whole_run_server.py`` its store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("checkpoint_stall.py", "daemon_load.py", "whole_run_server.py", "harness.py")


def run_bench(
    tmp_path: Path, script: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a copy of ``bench/`` (its ``bench/out`` reports stay out of the checkout) with
    ``TMPDIR`` a folder of its own; returns the result and that folder."""
    (tmp_path / "bench").mkdir()
    for name in (*SCRIPTS, "script_server.py"):
        shutil.copy(ROOT / "bench" / name, tmp_path / "bench" / name)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": path}
    cmd = [sys.executable, str(tmp_path / "bench" / script), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return done, scratch


def test_checkpoint_stall_removes_its_daemon_home(tmp_path: Path) -> None:
    done, scratch = run_bench(tmp_path, "checkpoint_stall.py", "--mb", "2", "--rows", "100")
    assert ": whole;" in done.stdout, done.stdout + done.stderr
    assert not list(scratch.glob("rlmd-ckpt-*")), "the daemon's home was left behind"


def test_whole_run_server_removes_its_store(tmp_path: Path) -> None:
    done, scratch = run_bench(tmp_path, "whole_run_server.py", "--reps", "1", "--warmup", "0")
    assert "== whole run over one OpenAI-compatible server" in done.stdout, done.stderr
    assert not list(scratch.glob("rlmd-wrs-*")), "the store was left behind"


def test_daemon_load_warm_part_cleans_up(tmp_path: Path) -> None:
    """The warm-question part (its exit code is the target's, so not asserted: a loaded
    machine may miss it)."""
    (tmp_path / "tests" / "helpers").mkdir(parents=True)  # its scripted model
    shutil.copy(ROOT / "tests" / "helpers" / "scripted_models.py", tmp_path / "tests" / "helpers")
    done, scratch = run_bench(
        tmp_path, "daemon_load.py", "--warm-only", "--warm-files", "60", "--warm-rounds", "1"
    )
    assert "warm question, after: 60 files" in done.stdout, done.stdout + done.stderr
    assert not list(scratch.glob("rlmd-warm-*")), "the folders or daemon homes were left behind"

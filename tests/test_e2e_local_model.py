"""End to end: the real `rlmd run` command, a real local GGUF model (Qwen2.5-Coder-0.5B,
greedy, 1 thread), a real codebase (this Python's `json` package), a real SQLite store.

Asserts the protocol only (never answer quality: the small models are not reliable enough): the run ended within its caps, its tree is stored, a real model call happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlmd.store import Store

MODEL = os.environ.get("RLMD_TEST_MODEL")


@pytest.mark.model
@pytest.mark.skipif(
    not MODEL or not Path(MODEL).is_file(),
    reason="RLMD_TEST_MODEL is not a GGUF file; scripts/test.sh pulls qwen2.5-coder-0.5b",
)
def test_rlmd_run_with_real_local_model_on_real_codebase(rlmd_home, tmp_path):
    (rlmd_home / "config.toml").write_text(
        "[models.ci-local]\n"
        'provider = "local"\n'
        f'model = "{MODEL}"\n'
        "context_window = 4096\n"
        "max_output_tokens = 200\n"
        "n_threads = 1\n"
    )
    codebase = Path(json.__file__).parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlmd.cli",
            "run",
            "Which file defines the class JSONDecoder?",
            "--context",
            str(codebase),
            "--model",
            "ci-local",
            "--max-iterations",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] in ("completed", "max_iterations", "max_errors"), out
    assert out["iterations"] <= 2
    assert out["usage"]["total"]["output_tokens"] > 0

    store = Store(rlmd_home / "rlmd.db")
    run = store.get_run(out["run_id"])
    assert run["status"] == out["status"]
    nodes = store.nodes(out["run_id"])
    calls = [n for n in nodes if n["kind"] == "model_call" and n["role"] == "root"]
    assert calls and all(n["output_tokens"] > 0 for n in calls)
    iterations = [n for n in nodes if n["kind"] == "iteration"]
    assert 1 <= len(iterations) <= 2
    # progress was streamed to stderr while the run went
    assert "iteration 1" in proc.stderr and "root call" in proc.stderr

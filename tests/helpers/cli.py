"""Run the ``rlmd`` command as a user does: a real process with its own rlmd home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def rlmd(
    *args: str, home: Path, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m rlmd.cli ARGS`` with ``RLMD_HOME=home`` and a wide terminal; the finished
    process (text stdout/stderr, return code)."""
    return subprocess.run(
        [sys.executable, "-m", "rlmd.cli", *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"},
    )

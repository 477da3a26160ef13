"""A folder too large to be a codebase (``/``, a home folder) is refused early with a clear
message, by ``rlmd run`` and by the daemon's workspace (``rlmd ask``), and nothing is kept."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from helpers.cli import rlmd
from helpers.server import CELLS, Daemon, question

from rlmd.context import CodebaseTooLarge, load_codebase, refresh_codebase

#: a prelude that lowers the cap in the process it runs in (rlmd serve / rlmd run)
LOW_CAP = "import rlmd.context as _c\n_c.MAX_CODEBASE_FILES = 5\n"


def folder(tmp_path, n: int, size: int = 10):
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    for i in range(n):
        (root / f"f{i:03}.py").write_text("x" * (size - 1) + "\n")
    return root


def test_a_load_stops_at_the_file_and_byte_caps(tmp_path):
    root = folder(tmp_path, 6)
    assert len(load_codebase(root, max_files=6).value) == 6
    with pytest.raises(CodebaseTooLarge, match=r"more than 5 files to read \(6 files, 60 bytes"):
        load_codebase(root, max_files=5)
    assert len(load_codebase(root, max_bytes=60).value) == 6
    with pytest.raises(CodebaseTooLarge, match="more than 59 bytes to read"):
        load_codebase(root, max_bytes=59)
    # ignored and binary files do not count
    (root / ".gitignore").write_text("big/\n")
    (root / "big").mkdir()
    for i in range(10):
        (root / "big" / f"{i}.txt").write_text("y")
        (root / f"b{i}.bin").write_bytes(b"\0" * 10)
    assert len(load_codebase(root, max_files=7).value) == 7  # 6 files + .gitignore


def test_a_refresh_of_a_folder_that_grew_past_the_cap_is_refused(tmp_path, monkeypatch):
    root = folder(tmp_path, 4)
    ctx = load_codebase(root)
    folder(tmp_path, 7)
    monkeypatch.setattr("rlmd.context.MAX_CODEBASE_FILES", 6)
    with pytest.raises(CodebaseTooLarge, match="more than 6 files"):
        refresh_codebase(ctx)
    assert len(ctx.value) == 4  # the old context is left as it was


def test_rlmd_run_says_the_folder_is_too_large(tmp_path):
    root = folder(tmp_path, 6)
    home = tmp_path / "home"
    code = LOW_CAP + "import sys\nfrom rlmd.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", code, "run", question("FINAL('x')"), "-c", str(root), "-m", CELLS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"},
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{root} is too large to read as a codebase: more than 5 files" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the same folder under the cap runs
    ok = rlmd("run", question("FINAL('x')"), "-c", str(folder(tmp_path, 5)), "-m", CELLS, home=home)
    assert ok.returncode == 0, ok.stderr


def test_the_daemon_refuses_the_workspace_and_stays_well(tmp_path):
    root = folder(tmp_path, 6)
    (tmp_path / "home").mkdir()
    d = Daemon(tmp_path / "home", prelude=LOW_CAP).start()

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rlmd", "ask", question("FINAL('x')"), "-m", CELLS,
            cwd=root,
            env={**os.environ, "RLMD_HOME": str(d.home), "COLUMNS": "200"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        client = await d.client()
        try:
            health = await client.command("rlmd.health")
        finally:
            await client.close()
        return proc.returncode, out.decode(), err.decode(), health

    try:
        code, out, err, health = asyncio.run(main())
    finally:
        d.stop()
    assert code != 0 and out == ""
    assert "is too large to read as a codebase: more than 5 files" in err, err
    assert health["ok"] is True

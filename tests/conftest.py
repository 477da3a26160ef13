"""Shared fixtures: a private RLMD_HOME per test, a small codebase (helpers: ``tests/helpers/``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def rlmd_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own empty rlmd home (store, config, models)."""
    home = tmp_path_factory.mktemp("rlmd-home")
    monkeypatch.setenv("RLMD_HOME", str(home))
    return home


@pytest.fixture
def codebase(tmp_path) -> Path:
    """A tiny real codebase on disk with a .gitignore, a binary and an ignored file."""
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .core import Engine\n")
    (root / "pkg" / "core.py").write_text(
        "class Engine:\n    def start(self):\n        return 'started'\n\n\ndef helper():\n    return Engine().start()\n"
    )
    (root / "pkg" / "util.py").write_text("def helper2():\n    return 2\n")
    (root / "README.md").write_text("# proj\nA tiny project.\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("x = 1\n")
    (root / "debug.log").write_text("noise\n")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    return root

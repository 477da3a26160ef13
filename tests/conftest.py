"""Shared fixtures: a private RLMD_HOME per test, scripted models, a small codebase."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry


@pytest.fixture(autouse=True)
def rlmd_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own empty rlmd home (store, config, models)."""
    home = tmp_path_factory.mktemp("rlmd-home")
    monkeypatch.setenv("RLMD_HOME", str(home))
    return home


def repl(code: str) -> str:
    """A model reply holding one ```repl block."""
    return f"Let me look.\n```repl\n{code.strip()}\n```\n"


def last_user(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def question_of(messages: list[dict]) -> str:
    """The question of the run this conversation belongs to (from its first user turn)."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    m = re.match(r"Question: (.*?)\n\nAbout `context`", first, re.DOTALL)
    return m.group(1) if m else first


def turn_of(messages: list[dict]) -> int:
    """0 for the first root call of a run, 1 for the second, ..."""
    return sum(1 for m in messages if m["role"] == "assistant")


def scripted_registry(**models: Callable[[list[dict]], str] | dict) -> Registry:
    """A registry whose models are scripted callables: ``name=fn`` or
    ``name={"callable": fn, "price_input": ..., "context_window": ...}``."""
    registry = Registry.load(None)
    for name, value in models.items():
        opts = value if isinstance(value, dict) else {"callable": value}
        fn = opts.pop("callable")
        spec = ModelSpec(
            name=name, provider="scripted", model=name, options={"callable": fn}, **opts
        )
        registry.add(spec)
    return registry


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

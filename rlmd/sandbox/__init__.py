"""Sandboxes: where model code runs (see :mod:`rlmd.sandbox.base` for the contract).

``create_sandbox("subprocess")`` (the default: a persistent child-process kernel) or
``create_sandbox("inprocess")`` (this process, not isolated).
"""

from __future__ import annotations

from typing import Any

from rlmd.sandbox.base import (
    CODEBASE_HELPERS,
    RESERVED_NAMES,
    CallError,
    CallHandler,
    CellResult,
    Sandbox,
    SandboxError,
    VarInfo,
)

BACKENDS = ("subprocess", "inprocess")


def create_sandbox(name: str = "subprocess", **options: Any) -> Sandbox:
    """A new, not yet started sandbox of backend ``name``; ``options`` go to its constructor.

    Raises:
        ValueError: unknown backend name (the message lists the choices).
    """
    if name == "subprocess":
        from rlmd.sandbox.subprocess import SubprocessSandbox

        return SubprocessSandbox(**options)
    if name == "inprocess":
        from rlmd.sandbox.inprocess import InProcessSandbox

        return InProcessSandbox(**options)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of: {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "CODEBASE_HELPERS",
    "RESERVED_NAMES",
    "CallError",
    "CallHandler",
    "CellResult",
    "Sandbox",
    "SandboxError",
    "VarInfo",
    "create_sandbox",
]

"""How a workspace runs: the project's ``[workspace]`` config table as a dataclass.

Its own small module so that :mod:`rlmd.config` does not import the workspace manager (and
with it asyncio and the checkpoint code): ``rlmd run`` loads the config while it reads the
codebase, to start its kernel early.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlmd.sandbox import DEFAULT_BACKEND

DEFAULT_MAX_VAR_BYTES = 32 * 1024 * 1024
"""Largest JSON text of one variable that is checkpointed (32 MiB)."""


@dataclass
class WorkspaceSettings:
    """How a workspace runs (from the project's ``[workspace]`` config table).

    Attributes:
        sandbox: backend name (``"subprocess"`` or ``"inprocess"``).
        sandbox_options: keyword options for the backend.
        idle_timeout_s: seconds without use before the sandbox is checkpointed and stopped
            (``None``: never).
        checkpoint_after_task: write a checkpoint after every task.
        max_var_bytes: largest JSON text of one checkpointed variable, bytes.
        require_isolation: refuse to start a sandbox that would run unisolated here
            (:func:`rlmd.isolation.check`; on by default in the daemon).
    """

    sandbox: str = DEFAULT_BACKEND
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    idle_timeout_s: float | None = 600.0
    checkpoint_after_task: bool = True
    require_isolation: bool = True
    max_var_bytes: int = DEFAULT_MAX_VAR_BYTES

"""Sandboxes: where model code runs (see :mod:`rlmd.sandbox.base` for the contract).

``create_sandbox("subprocess")`` (the default: a persistent, hardened child-process kernel),
``"inprocess"`` (this process, trusted code only), ``"container"`` (a warm docker container per
sandbox), ``"e2b"`` / ``"modal"`` (cloud VMs, optional extras).
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

BACKENDS = ("subprocess", "inprocess", "container", "e2b", "modal")
"""Every backend name; :func:`unavailable_reason` says whether one can start here."""

DEFAULT_BACKEND = "subprocess"
"""The backend a run, a workspace or the CLI uses when nothing names one: the only place
this default is written."""

_MODULES = {
    "subprocess": ("rlmd.sandbox.subprocess", "SubprocessSandbox"),
    "inprocess": ("rlmd.sandbox.inprocess", "InProcessSandbox"),
    "container": ("rlmd.sandbox.container", "ContainerSandbox"),
    "e2b": ("rlmd.sandbox.cloud.e2b", "E2BSandbox"),
    "modal": ("rlmd.sandbox.cloud.modal", "ModalSandbox"),
}


def backend_class(name: str) -> type[Sandbox]:
    """The :class:`Sandbox` subclass of backend ``name`` (imported on first use).

    Raises:
        ValueError: unknown backend name (the message lists the choices).
        SandboxError: the backend's module cannot be imported (a missing optional extra; the
            message names it).
    """
    if name not in _MODULES:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    import importlib

    module_name, class_name = _MODULES[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SandboxError(
            f"sandbox backend {name!r} is not installed ({exc}); "
            f"install its extra: pip install -e '.[{name}]' in an rlmd checkout "
            f"(or pip install 'rlmd[{name}]')"
        ) from exc
    return getattr(module, class_name)


def unavailable_reason(name: str) -> str | None:
    """``None`` if backend ``name`` can start on this machine, else why not (one line: no
    docker engine, a missing extra, no credentials, ...). Never raises for a known name."""
    try:
        cls = backend_class(name)
    except SandboxError as exc:
        return str(exc)
    probe = getattr(cls, "unavailable_reason", None)
    return probe() if probe is not None else None


def create_sandbox(name: str = DEFAULT_BACKEND, **options: Any) -> Sandbox:
    """A new, not yet started sandbox of backend ``name``; ``options`` go to its constructor.

    ``options["limits"]`` may be a :class:`~rlmd.sandbox.limits.Limits` or a dict of its
    fields (as a TOML config gives it).

    Raises:
        ValueError: unknown backend name (the message lists the choices), or bad limits.
        SandboxError: the backend's optional extra is not installed.
    """
    cls = backend_class(name)
    if isinstance(options.get("limits"), dict):
        from rlmd.sandbox.limits import Limits

        options = {**options, "limits": Limits.from_dict(options["limits"])}
    return cls(**options)


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "CODEBASE_HELPERS",
    "RESERVED_NAMES",
    "CallError",
    "CallHandler",
    "CellResult",
    "Sandbox",
    "SandboxError",
    "VarInfo",
    "backend_class",
    "create_sandbox",
    "unavailable_reason",
]

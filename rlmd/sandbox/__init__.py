"""Sandboxes: where model code runs (see :mod:`rlmd.sandbox.base` for the contract).

``create_sandbox("subprocess")`` (the default: a persistent, hardened child-process kernel),
``"inprocess"`` (this process, trusted code only), ``"container"`` (a warm docker container per
sandbox), ``"e2b"`` / ``"modal"`` (cloud VMs, optional extras).

Layout: ``session.py`` is the one REPL lifecycle (:class:`~rlmd.sandbox.session.SandboxSession`)
over a :class:`~rlmd.sandbox.transport.Transport` per backend (``process/``, ``docker/``,
``cloud/``), speaking the kernel protocol through ``channel.py``; ``messages.py`` words what the
model is told; ``inprocess.py`` is the one other :class:`Sandbox`. Adding a backend is adding a
transport folder, its line in ``_MODULES`` and its name in the contract suite.
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
    "subprocess": ("rlmd.sandbox.process.transport", "ProcessTransport"),
    "inprocess": ("rlmd.sandbox.inprocess", "InProcessSandbox"),
    "container": ("rlmd.sandbox.docker.transport", "ContainerTransport"),
    "e2b": ("rlmd.sandbox.cloud.e2b", "E2BTransport"),
    "modal": ("rlmd.sandbox.cloud.modal", "ModalTransport"),
}
"""Backend name -> (module, class): a :class:`~rlmd.sandbox.transport.Transport` run by a
:class:`~rlmd.sandbox.session.SandboxSession`, or a :class:`Sandbox` of its own (inprocess)."""


def _backend(name: str) -> type[Any]:
    """Backend ``name``'s transport (or Sandbox) class, imported on first use."""
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
    cls: type[Any] = getattr(module, class_name)
    return cls


def backend_class(name: str) -> type[Sandbox]:
    """The :class:`Sandbox` class that runs backend ``name``
    (:class:`~rlmd.sandbox.session.SandboxSession` for every transport).

    Raises:
        ValueError: unknown backend name (the message lists the choices).
        SandboxError: the backend's module cannot be imported (a missing optional extra; the
            message names it).
    """
    cls = _backend(name)
    if issubclass(cls, Sandbox):
        return cls
    from rlmd.sandbox.session import SandboxSession

    return SandboxSession


def unavailable_reason(name: str) -> str | None:
    """``None`` if backend ``name`` can start on this machine, else why not (one line: no
    docker engine, a missing extra, no credentials, ...). Never raises for a known name."""
    try:
        cls = _backend(name)
    except SandboxError as exc:
        return str(exc)
    probe = getattr(cls, "unavailable_reason", None)
    return probe() if probe is not None else None


def create_sandbox(name: str = DEFAULT_BACKEND, **options: Any) -> Sandbox:
    """A new, not yet started sandbox of backend ``name``.

    ``options`` are the backend's: for every backend ``limits`` (a
    :class:`~rlmd.sandbox.limits.Limits` or a dict of its fields, as a TOML config gives it),
    ``timeout_s`` / ``max_output_chars`` (aliases of ``limits.wall_s`` /
    ``limits.output_bytes``) and ``interrupt_grace_s``; for a transport also
    ``op_timeout_s`` and ``start_timeout_s`` (see
    :class:`~rlmd.sandbox.session.SandboxSession`); the rest go to the transport's
    constructor (``ProcessTransport``: ``isolation``, ``python``, ...; ``ContainerTransport``:
    ``template``, ``cpus``, ...; ``E2BTransport`` / ``ModalTransport``: the provider's).

    Raises:
        ValueError: unknown backend name (the message lists the choices), or bad limits.
        TypeError: an option the backend does not take.
        SandboxError: the backend's optional extra is not installed.
    """
    cls = _backend(name)
    if isinstance(options.get("limits"), dict):
        from rlmd.sandbox.limits import Limits

        options = {**options, "limits": Limits.from_dict(options["limits"])}
    if issubclass(cls, Sandbox):
        sandbox: Sandbox = cls(**options)
        return sandbox
    from rlmd.sandbox.session import open_session

    return open_session(cls, **options)


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

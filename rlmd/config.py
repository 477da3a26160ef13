"""What a project's own config file may say about sandboxes.

A project's ``.rlmd.toml`` arrives with the code being asked about, so it is untrusted: it
may pick a *more* isolated setup, never a less isolated one. Otherwise a cloned repository
could run model code in the daemon's own process (``sandbox = "inprocess"``), start its own
file as the kernel's interpreter (``sandbox_options.python``), hand the sandbox the network,
or send the codebase to a paid cloud VM. The user's config (``~/.config/rlmd/config.toml``)
and command-line flags may say anything.
"""

from __future__ import annotations

from typing import Any

from rlmd.sandbox.limits import Limits

PROJECT_BACKENDS = ("subprocess", "container")
"""Backends a project config may choose: both isolate model code on this machine."""

PROJECT_OPTIONS = ("limits", "template")
"""``sandbox_options`` keys a project config may set (limits only tighter than the defaults)."""


def check_project_sandbox(table: dict[str, Any], where: str) -> None:
    """Refuse sandbox settings in a project's ``[run]`` or ``[workspace]`` table that would
    loosen isolation.

    Args:
        table: the table as parsed from TOML.
        where: the file and table, for the message (``"/p/.rlmd.toml: [run]"``).

    Raises:
        ValueError: a backend outside :data:`PROJECT_BACKENDS`, a ``sandbox_options`` key
            outside :data:`PROJECT_OPTIONS`, a limit above the default, or ``network = true``;
            the message says to set it in the user config instead.
    """
    hint = "set it in your user config or pass it on the command line instead"
    backend = table.get("sandbox")
    if backend is not None and backend not in PROJECT_BACKENDS:
        raise ValueError(
            f"{where}: a project config may choose sandbox "
            f"{' or '.join(repr(b) for b in PROJECT_BACKENDS)}, not {backend!r}; {hint}"
        )
    options = table.get("sandbox_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise ValueError(f"{where}: sandbox_options must be a table")
    for key in options:
        if key not in PROJECT_OPTIONS:
            raise ValueError(
                f"{where}: a project config may not set sandbox_options.{key} "
                f"(only {', '.join(PROJECT_OPTIONS)}); {hint}"
            )
    limits = options.get("limits")
    if limits is None:
        return
    if not isinstance(limits, dict):
        raise ValueError(f"{where}: sandbox_options.limits must be a table")
    try:
        asked = Limits.from_dict(limits)
    except ValueError as exc:
        raise ValueError(f"{where}: sandbox_options.limits: {exc}") from None
    default = Limits()
    if asked.network:
        raise ValueError(f"{where}: a project config may not give the sandbox a network; {hint}")
    for key, value in limits.items():
        ceiling = getattr(default, key)
        if key != "network" and ceiling is not None and value > ceiling:
            raise ValueError(
                f"{where}: a project config may only lower limits; sandbox_options.limits.{key} "
                f"= {value} is above the default {ceiling}; {hint}"
            )

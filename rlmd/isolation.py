"""Is the sandbox really isolated here? The rule that turns a silent fallback into a
warning or a refusal (issue: with neither bwrap nor unshare usable, the subprocess backend
runs model code as a plain process of the user, with the host's files and network).

The ``inprocess`` backend is never isolated and is chosen by name (the daemon also asks for
``[daemon] allow_inprocess``); this rule is about a backend that *should* isolate and could
not on this machine.
"""

from __future__ import annotations

from typing import Any

FIX = (
    "install bubblewrap (apt-get install bubblewrap), or allow unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1) so unshare works"
)
"""What makes the subprocess sandbox isolated again."""


class NotIsolated(Exception):
    """The sandbox would run model code unisolated and the settings require isolation."""


def missing(record: dict[str, Any]) -> str | None:
    """What isolation a sandbox's ``isolation`` record lacks, in one sentence; ``None`` when
    it is isolated (or is the ``inprocess`` backend, unisolated by choice)."""
    if record.get("backend") == "subprocess" and not record.get("wrapper"):
        return (
            "the subprocess sandbox is NOT isolated: neither bwrap nor unshare works here, so "
            "model code runs as a plain process of your user with the host's files and network"
        )
    return None


def check(sandbox: Any, *, required: bool) -> str | None:
    """The warning for ``sandbox`` (any :class:`~rlmd.sandbox.base.Sandbox`, started or not),
    or ``None`` when it is isolated.

    Raises:
        NotIsolated: it is not isolated and ``required`` (the message says the fix and the
            setting).
    """
    gap = missing(sandbox.isolation)
    if gap is None:
        return None
    if required:
        raise NotIsolated(
            f"{gap}. Refusing to run: [sandbox] require_isolation is on. Fix: {FIX}; or set "
            "require_isolation = false under [sandbox] in your user config to accept it."
        )
    return f"{gap}. Fix: {FIX}."


def unenforced(record: dict[str, Any]) -> str | None:
    """The limits a sandbox's ``isolation`` record asks for but nothing enforces here, with
    the reasons it gives (``unavailable``), in one sentence; ``None`` if every set limit is
    enforced. The in-process backend is left out (it enforces nothing by design)."""
    if record.get("backend") == "inprocess":
        return None
    asked = record.get("limits") or {}
    enforced = record.get("enforced") or {}
    missing = sorted(
        name
        for name, how in enforced.items()
        if how is None and asked.get(name) not in (None, False) and name != "network"
    )
    if not missing:
        return None
    why = "; ".join(f"{k}: {v}" for k, v in (record.get("unavailable") or {}).items())
    return "limits not enforced here: " + ", ".join(missing) + (f" ({why})" if why else "")

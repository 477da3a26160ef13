"""Workspace checkpoints: the REPL variables that can be written as JSON, kept on disk.

What is saved: every user variable (a name not starting with ``_``, not reserved, not a
module) whose value is ``str``, ``int``, ``float``, ``bool``, ``None``, ``list`` or ``dict``
**and** survives a JSON round trip unchanged (so a dict with int keys, a list holding a tuple
or a set, ``NaN``, or a value over ``max_var_bytes`` of JSON is not saved), while all saved
variables together stay within :data:`MAX_CHECKPOINT_BYTES` of JSON. What is not
saved is recorded by name with the reason: functions, classes, modules (imports), open files,
objects of other types, and the values above. The check runs inside the REPL (one private
cell defining ``_rlmd_checkpoint``), so it sees the real objects, not their JSON copies.

File: ``<rlmd home>/workspaces/<key>/checkpoint.json`` (mode 0600, written to a temporary
file and renamed, so a crash leaves the previous checkpoint intact)::

    {"version": 1, "workspace": "/abs/project", "taken_at": 1730000000.0,
     "variables": {"name": value, ...}, "skipped": {"name": "reason", ...}}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmd import paths
from rlmd.sandbox.base import Sandbox, SandboxError
from rlmd.workspace.settings import DEFAULT_MAX_VAR_BYTES  # 32 MiB: largest checkpointed variable

log = logging.getLogger("rlmd.workspace")

VERSION = 1

MAX_CHECKPOINT_BYTES = 4 * DEFAULT_MAX_VAR_BYTES
"""Most JSON text one checkpoint holds, all variables together (128 MiB; at least one
``max_var_bytes``). Without it, one 30 MB string bound to 20 names (30 MB in the REPL) made
a 660 MB checkpoint file and the daemon peak at 2.1 GB (review19): model code could fill the
daemon's memory and the rlmd home past every sandbox limit."""

_PROBE = """\
def _rlmd_checkpoint_probe(names, limit):
    import json
    g = globals()
    out = {}
    for k in names:
        v = g.get(k)
        if type(v) not in (str, int, float, bool, type(None), list, dict):
            out[k] = "a " + type(v).__name__ + ", not JSON data"
            continue
        try:
            text = json.dumps(v, allow_nan=False)
        except Exception as exc:
            out[k] = "not JSON-serialisable (" + type(exc).__name__ + ")"
            continue
        if len(text) > limit:
            out[k] = "too large (%d bytes of JSON; the limit is %d)" % (len(text), limit)
            continue
        try:
            same = json.loads(text) == v
        except Exception:
            same = False
        out[k] = len(text) if same else "changes when written as JSON (tuple, set, non-string key...)"
    return out
_rlmd_checkpoint = _rlmd_checkpoint_probe(NAMES, LIMIT)
del _rlmd_checkpoint_probe
"""


@dataclass
class Checkpoint:
    """A workspace's saved variables.

    Attributes:
        workspace: the project folder (absolute).
        taken_at: seconds since the epoch.
        variables: name → JSON value, restored exactly.
        skipped: name → why it was not saved (not restored).
    """

    workspace: str
    taken_at: float = field(default_factory=time.time)
    variables: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "workspace": self.workspace,
            "taken_at": self.taken_at,
            "variables": self.variables,
            "skipped": self.skipped,
        }


def workspace_key(folder: str | Path) -> str:
    """A short stable key for a project folder: 16 hex digits of SHA-256 of its path (its
    bytes on disk: a name that is not UTF-8 stopped the workspace's start with "'utf-8'
    codec can't encode character '\\udcff'"; a UTF-8 name keeps its key)."""
    return hashlib.sha256(os.fsencode(str(folder))).hexdigest()[:16]


def checkpoint_path(folder: str | Path) -> Path:
    """Where the checkpoint of project ``folder`` lives (the folder is not created)."""
    return paths.home() / "workspaces" / workspace_key(folder) / "checkpoint.json"


async def take(
    sandbox: Sandbox,
    workspace: str,
    *,
    max_var_bytes: int = DEFAULT_MAX_VAR_BYTES,
    max_total_bytes: int = MAX_CHECKPOINT_BYTES,
    timeout_s: float = 60.0,
) -> Checkpoint:
    """Read the saveable variables out of a started sandbox.

    Args:
        sandbox: a started sandbox (the caller holds the workspace, so no run uses it).
        workspace: the project folder, recorded in the checkpoint.
        max_var_bytes: variables with more JSON text than this are skipped.
        max_total_bytes: JSON text of all saved variables together, at most (raised to
            ``max_var_bytes`` if lower); a variable that would pass it is skipped, in the
            REPL's order, and a later smaller one may still fit. Measured by the host on what
            it received, so code in the REPL that fakes the probe cannot pass it.
        timeout_s: limit for the probe cell, seconds.

    Returns:
        The :class:`Checkpoint` (not yet written).

    Raises:
        SandboxError: the sandbox failed (a failed probe cell is not an error: every
            variable is then listed as skipped with the cell's error).
    """
    infos = await sandbox.list_variables()
    names = [v.name for v in infos]
    ckpt = Checkpoint(workspace)
    if not names:
        return ckpt
    code = _PROBE.replace("NAMES", repr(names)).replace("LIMIT", str(int(max_var_bytes)))
    result = await sandbox.execute(code, timeout_s=timeout_s)
    if result.error or result.kernel_restarted:
        reason = (
            f"the checkpoint probe failed: {(result.error or 'kernel restarted').strip()[-200:]}"
        )
        ckpt.skipped = dict.fromkeys(names, reason)
        return ckpt
    verdicts = await sandbox.get_variable("_rlmd_checkpoint")
    if not isinstance(verdicts, dict):
        ckpt.skipped = dict.fromkeys(names, "the checkpoint probe returned no verdicts")
        return ckpt
    room = max(max_total_bytes, max_var_bytes)
    full = f"not saved: the checkpoint's limit of {room:,} bytes of JSON for all variables"
    for name in names:
        verdict = verdicts.get(name, "vanished during the checkpoint")
        if not isinstance(verdict, int) or isinstance(verdict, bool):
            ckpt.skipped[name] = str(verdict)
            continue
        if verdict > room:  # as the probe measured it: not even fetched
            ckpt.skipped[name] = full
            continue
        try:
            value = await sandbox.get_variable(name)
        except KeyError:
            ckpt.skipped[name] = "vanished during the checkpoint"
            continue
        except (TypeError, ValueError) as exc:  # REPL code broke the kernel's json (it may)
            ckpt.skipped[name] = f"could not be read: {exc}"[:200]
            continue
        size = len(json.dumps(value, separators=(",", ":")))  # the host's own count
        if size > room:
            ckpt.skipped[name] = (
                full
                if size <= max_var_bytes
                else (f"too large ({size} bytes of JSON; the limit is {max_var_bytes})")
            )
            continue
        ckpt.variables[name] = value
        room -= size
    return ckpt


def save(ckpt: Checkpoint, path: Path) -> int:
    """Write ``ckpt`` to ``path`` atomically with mode 0600; returns the bytes written.

    Not fsynced: the file survives a killed daemon (the page cache is the kernel's), not
    necessarily a power cut, where the previous checkpoint or none may be found.

    Raises:
        OSError: the folder or file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    _remove_dead_writers_files(path)
    data = json.dumps(ckpt.to_dict(), separators=(",", ":")).encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # atomic: a killed daemon leaves the old or the new file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(data)


def _remove_dead_writers_files(path: Path) -> None:
    """Delete ``.<name>.<pid>.tmp`` files next to ``path`` whose pid is not a live process:
    a daemon killed while writing left one (up to the checkpoint's size) for good."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone; PermissionError means alive (another user's)
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def load(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``, or ``None`` if there is none. A file that does not parse
    is renamed to ``checkpoint.json.corrupt`` (kept for inspection), logged, and ``None``
    returned."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            raise ValueError(f"unknown checkpoint version {raw.get('version')!r}")
        variables = raw.get("variables") or {}
        skipped = raw.get("skipped") or {}
        if not isinstance(variables, dict) or not isinstance(skipped, dict):
            raise ValueError("variables/skipped must be objects")
        return Checkpoint(
            workspace=str(raw.get("workspace") or ""),
            taken_at=float(raw.get("taken_at") or 0.0),
            variables=variables,
            skipped={str(k): str(v) for k, v in skipped.items()},
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("checkpoint %s is unreadable (%s); ignoring it", path, exc)
        try:
            os.replace(path, path.with_name(path.name + ".corrupt"))
        except OSError:
            pass
        return None


async def restore(
    sandbox: Sandbox, ckpt: Checkpoint, *, only_missing: bool = False
) -> tuple[list[str], dict[str, str]]:
    """Bind the checkpoint's variables in a started sandbox.

    Args:
        only_missing: skip names the REPL already defines (used after a kernel restart in the
            middle of a task, when the task may have made new values since).

    Returns:
        ``(restored names, {name: why it was not restored})``; the second dict holds the
        checkpoint's ``skipped`` entries plus any variable the sandbox refused.

    Raises:
        SandboxError: the sandbox failed.
    """
    present: set[str] = set()
    if only_missing:
        present = {v.name for v in await sandbox.list_variables()}
    restored: list[str] = []
    missing = dict(ckpt.skipped)
    for name, value in ckpt.variables.items():
        if name in present:
            continue
        try:
            await sandbox.set_variable(name, value)
            restored.append(name)
        except (ValueError, TypeError, KeyError) as exc:
            missing[name] = f"could not be set again: {exc}"
        except SandboxError:
            raise
    return restored, missing

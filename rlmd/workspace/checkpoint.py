"""Workspace checkpoints: the REPL variables that can be written as JSON, kept on disk.

What is saved: every user variable (a name not starting with ``_``, not reserved, not a
module) whose value is ``str``, ``int``, ``float``, ``bool``, ``None``, ``list`` or ``dict``
**and** survives a JSON round trip unchanged (so a dict with int keys, a list holding a tuple
or a set, ``NaN``, lists nested more than 500 deep, or a value over ``max_var_bytes`` of JSON
is not saved), while all saved
variables together stay within :data:`MAX_CHECKPOINT_BYTES` of JSON. What is not
saved is recorded by name with the reason: functions, classes, modules (imports), open files,
objects of other types, and the values above.

The kernel does all the JSON work (:mod:`rlmd.kernel.varfile`): it encodes the variables,
so it sees the real objects, and writes them to a file in its working folder; the host moves
that file's bytes into the checkpoint without decoding them, and back into the working folder
for a restore, where the kernel decodes them. Done by the daemon, a 128 MiB ``json.dumps`` or
``json.loads`` stalled every client for seconds, even in a worker thread: the C call holds the
GIL throughout (session 20, ``bench/RESULTS.md``). The host bounds what it takes by size; a
REPL that lies about its own values only loses its own variables.

For a REPL of 200,000 variables the description (names, types, previews) is large too
(~15 MB of JSON), so the kernel saves every user variable without being sent their names,
writes the description to :data:`INFO_FILE`, and the host decodes it and encodes
``checkpoint.json`` member by member in a worker thread (:func:`loads_stepwise`,
:func:`dumps_stepwise`): the event loop gets the GIL back between the small C calls. What
the protocol says of a checkpoint is bounded (:func:`summary`).

Files, in ``<rlmd home>/workspaces/<key>/`` (folder 0700, files 0600, each written to a
temporary file and renamed, so a crash leaves the previous checkpoint whole):

``checkpoint.json`` (the host's, small)::

    {"version": 2, "workspace": "/abs/project", "taken_at": 1730000000.0,
     "variables": {"name": {"type": "str", "size": 12, "preview": "'...'", "bytes": 14}, ...},
     "skipped": {"name": "reason", ...},
     "values": {"file": "values-<16 hex>.json", "bytes": 123, "sha256": "<64 hex>"} | null}

``values-<16 hex>.json``: the kernel's bytes, ``{"name": value, ...}`` as ASCII JSON, named
by its SHA-256 (checked before a restore); the one before it is deleted once
``checkpoint.json`` points at the new one. Version 1 (values inside ``checkpoint.json``,
before session 21) is still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import heapq
import json
import logging
import math
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from rlmd import paths
from rlmd.sandbox.base import Sandbox
from rlmd.workspace.settings import DEFAULT_MAX_VAR_BYTES  # 32 MiB: largest checkpointed variable

log = logging.getLogger("rlmd.workspace")

VERSION = 2

MAX_CHECKPOINT_BYTES = 4 * DEFAULT_MAX_VAR_BYTES
"""Most JSON text one checkpoint holds, all variables together (128 MiB; at least one
``max_var_bytes``). Without it, one 30 MB string bound to 20 names (30 MB in the REPL) made
a 660 MB checkpoint file and the daemon peak at 2.1 GB (review19): model code could fill the
daemon's memory and the rlmd home past every sandbox limit."""

MAX_METADATA_BYTES = MAX_CHECKPOINT_BYTES + 64 * 1024 * 1024
"""Longest ``checkpoint.json`` read (or written): a version 1 file holds the values too. A
longer one is set aside as corrupt rather than read whole into the daemon."""

SAVE_FILE = ".rlmd-checkpoint.json"
"""The kernel writes the values here in its working folder; removed once the host has them."""

INFO_FILE = ".rlmd-checkpoint-info.json"
"""The kernel writes what it saved and skipped here (names, types, previews: ~15 MB for
200,000 variables); removed once the host has it. As a reply frame it was decoded on the
event loop in one call."""

SUMMARY_NAMES = 100
"""Names (the first by name) a checkpoint's summary (:func:`summary`) lists of the saved
variables, and of the skipped ones: every name of 200,000 went into each ``checkpointed``
notification, close reply and WorkspaceInfo. The full lists are in ``checkpoint.json``."""

RESTORE_FILE = ".rlmd-restore.json"
"""The host puts the values here for the kernel to read back (the kernel removes it)."""

_VALUES_NAME = re.compile(r"values-[0-9a-f]{16}\.json")
_PREVIEW_CHARS = 80


@dataclass
class Checkpoint:
    """A workspace's saved variables.

    Attributes:
        workspace: the project folder (absolute).
        taken_at: seconds since the epoch.
        variables: name → ``{"type": str, "size": int | None, "preview": str, "bytes": int}``
            (``bytes``: its JSON's length); restored exactly.
        skipped: name → why it was not saved (not restored).
        values: the values' JSON bytes while in memory (just taken, or read from a version 1
            file); ``None`` once on disk.
        values_file: ``{"file": path, "bytes": int, "sha256": hex}`` of the values on disk,
            for a loaded checkpoint.
    """

    workspace: str
    taken_at: float = field(default_factory=time.time)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    values: bytes | None = None
    values_file: dict[str, Any] | None = None

    def to_dict(self, values: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``checkpoint.json`` object, ``values`` being the reference to the values file."""
        return {
            "version": VERSION,
            "workspace": self.workspace,
            "taken_at": self.taken_at,
            "variables": self.variables,
            "skipped": self.skipped,
            "values": values,
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
) -> Checkpoint:
    """Read the saveable variables out of a started sandbox: the kernel writes their JSON to
    :data:`SAVE_FILE` in its working folder, the host takes the file's bytes as they are.

    Args:
        sandbox: a started sandbox (the caller holds the workspace, so no run uses it).
        workspace: the project folder, recorded in the checkpoint.
        max_var_bytes: variables with more JSON text than this are skipped.
        max_total_bytes: JSON text of all saved variables together, at most (raised to
            ``max_var_bytes`` if lower); a variable that would pass it is skipped, in the
            REPL's order, and a later smaller one may still fit. The host refuses a file
            longer than this plus the names' keys, so REPL code that fakes the kernel's
            count cannot pass it (:class:`NotTaken`).

    Returns:
        The :class:`Checkpoint`, its ``values`` in memory (not yet written).

    Raises:
        NotTaken: the kernel could not write the values file (its folder full, something
            planted at :data:`SAVE_FILE`, model code that broke ``json``) or the host refused
            it: nothing to save, and the previous checkpoint must stay.
        SandboxError: the sandbox failed.
    """
    ckpt = Checkpoint(workspace)
    room = max(max_total_bytes, max_var_bytes)
    try:
        # every user variable, by the kernel: listing them first (names, types, previews)
        # took the kernel 0.5 s and the event loop 0.4 s for 200,000 variables
        out = await sandbox.save_variables(
            None, SAVE_FILE, max_var_bytes=max_var_bytes, max_total_bytes=room, info_path=INFO_FILE
        )
        if not isinstance(out, dict) or not isinstance(out.get("info_bytes"), int):
            raise ValueError("the kernel's reply to save_vars is malformed")
        info = await sandbox.download(INFO_FILE, max_bytes=MAX_METADATA_BYTES)
        # each saved name is a key of the info file too: it bounds the values file's keys
        data = await sandbox.download(SAVE_FILE, max_bytes=room + len(info) + 2)
    except (ValueError, TypeError, KeyError, OSError) as exc:  # the REPL's doing
        raise NotTaken(f"the REPL could not write its variables: {exc}"[:500]) from None
    finally:
        for name in (SAVE_FILE, INFO_FILE):
            with contextlib.suppress(ValueError, TypeError, KeyError, OSError):
                await sandbox.remove_file(name)  # it would hold the sandbox's disk
    # decoded and checked in small steps in a worker thread: the event loop keeps the GIL
    # most of the time (one json.loads of 15 MB held it ~0.3 s)
    ckpt.variables, ckpt.skipped = await asyncio.to_thread(_read_info, info, len(data), room)
    ckpt.values = data if ckpt.variables else None
    return ckpt


def _read_info(
    info: bytes, values_bytes: int, room: int
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The kernel's :data:`INFO_FILE`, decoded member by member and checked
    (:func:`_verdicts`). Blocking: call it in a worker thread.

    Raises:
        NotTaken: it is not a JSON object, or the values file is longer than ``room`` plus
            the saved names' keys (REPL code faked the kernel's count).
    """
    try:
        out = loads_stepwise(info.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        why = f"the REPL's description of its variables is unreadable: {exc}"[:500]
        raise NotTaken(why) from None
    variables, skipped = _verdicts(out)
    if isinstance(out, dict):  # the decoded description: freed member by member here
        for part in out.values():
            if isinstance(part, dict):
                empty_stepwise(part)
    if values_bytes > room + _keys_bytes(list(variables)):
        raise NotTaken(f"the values file is larger than the limit of {room:,} bytes of JSON")
    return variables, skipped


class NotTaken(Exception):
    """The kernel wrote no values file the host could take (:func:`take`): a full sandbox
    folder, a planted file, broken REPL modules, a file over the limit. Written as a
    checkpoint with every variable "skipped", it replaced the previous good one (review21)."""


def empty_stepwise(mapping: dict[Any, Any]) -> None:
    """Empty ``mapping`` one member at a time. Freeing a dict of 200,000 variable
    descriptions at once (its last reference dropped, or ``clear``) is one C call that held
    the GIL 0.1-0.2 s on a loaded 2-core machine; called in a worker thread, this hands it
    back to the event loop between members."""
    pop = mapping.popitem
    while mapping:
        pop()


def release(ckpt: Checkpoint) -> None:
    """Free what ``ckpt`` holds in small steps (:func:`empty_stepwise`); it describes no
    variable afterwards. Blocking for many variables: call it in a worker thread."""
    empty_stepwise(ckpt.variables)
    empty_stepwise(ckpt.skipped)
    ckpt.values = None


def _keys_bytes(names: list[str]) -> int:
    """Bytes of the values file that are not values: braces, each ``"name":`` and comma."""
    return 2 + sum(len(json.dumps(name)) + 2 for name in names)


def _verdicts(out: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The kernel's ``{"saved": {name: info}, "skipped": {name: reason}}``, checked (model
    code could have changed it): ``(saved infos, skipped reasons)``, each field of its type
    and bounded; a name both saved and skipped counts as saved, a saved one whose info is
    not an object as skipped."""
    saved = out.get("saved") if isinstance(out, dict) else None
    skipped = out.get("skipped") if isinstance(out, dict) else None
    saved = saved if isinstance(saved, dict) else {}
    skipped = skipped if isinstance(skipped, dict) else {}
    variables: dict[str, dict[str, Any]] = {}
    reasons: dict[str, str] = {}
    for name, info in saved.items():
        clean = _clean_info(info)
        if clean is not None:
            variables[name] = clean
        else:
            reasons[name] = "its description from the REPL is malformed"
    for name, why in skipped.items():
        if name not in variables:
            reasons[name] = str(why)[:300]
    return variables, reasons


def _clean_info(info: Any) -> dict[str, Any] | None:
    """A saved variable's ``{"type", "size", "preview", "bytes"}`` with each field of its
    type and bounded, or ``None`` if ``info`` is not such a dict."""
    if not isinstance(info, dict):
        return None
    size, count = info.get("size"), info.get("bytes")
    preview = str(info.get("preview", ""))
    return {
        "type": str(info.get("type", "?"))[:100],
        "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
        "preview": preview[: _PREVIEW_CHARS - 3] + "..." if len(preview) > 80 else preview,
        "bytes": count if isinstance(count, int) and not isinstance(count, bool) else 0,
    }


_folder_locks: dict[str, threading.Lock] = {}
_folder_locks_lock = threading.Lock()


def _turn(folder: Path) -> threading.Lock:
    """The lock that makes writes to one checkpoint folder take turns: a save runs in a
    thread that goes on after its caller is cancelled (a task cancelled while it
    checkpoints), so the next holder's save or a reset could otherwise run beside it."""
    with _folder_locks_lock:
        return _folder_locks.setdefault(str(folder), threading.Lock())


def save(ckpt: Checkpoint, path: Path) -> int:
    """Write ``ckpt`` to ``path`` (``checkpoint.json``) and its values beside it; returns the
    bytes of both. Each file is written atomically with mode 0600, the values first; values
    files no longer referenced are then deleted. Call it in a worker thread: hashing and
    writing release the GIL.

    Not fsynced: the files survive a killed daemon (the page cache is the kernel's), not
    necessarily a power cut, where the previous checkpoint or none may be found.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    with _turn(path.parent):
        return _save(ckpt, path)


def _save(ckpt: Checkpoint, path: Path) -> int:
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    _remove_dead_writers_files(folder)
    ref = ckpt.values_file
    if ckpt.values is not None:
        digest = hashlib.sha256(ckpt.values).hexdigest()
        ref = {"file": f"values-{digest[:16]}.json", "bytes": len(ckpt.values), "sha256": digest}
    elif not ckpt.variables:
        ref = None
    meta = dumps_stepwise(ckpt.to_dict(ref)).encode("utf-8")
    if len(meta) > MAX_METADATA_BYTES:  # load would set it aside: keep the previous one
        raise OSError(
            errno.EFBIG,
            f"its description is too large ({len(meta):,} bytes; the limit is "
            f"{MAX_METADATA_BYTES:,}): too many variables",
        )
    fresh = None  # a values file this save adds: removed if checkpoint.json is not written
    if ckpt.values is not None and ref is not None:
        target = folder / ref["file"]
        fresh = None if os.path.lexists(target) else target  # else: the previous one's
        _write_atomic(target, ckpt.values)
    try:
        _write_atomic(path, meta)
    except BaseException:  # a full disk: an orphan would keep it full for every retry
        if fresh is not None:
            fresh.unlink(missing_ok=True)
        raise
    for old in folder.glob("values-*.json"):  # the checkpoint is written: this is tidying
        if ref is None or old.name != ref["file"]:
            with contextlib.suppress(OSError):
                old.unlink(missing_ok=True)
    return len(meta) + (ref["bytes"] if ref else 0)


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps_stepwise(obj: dict[str, Any]) -> str:
    """``json.dumps(obj, separators=(",", ":"))`` of a dict with string keys, each member of
    an object-valued member (``variables``, ``skipped``) encoded by a call of its own. Called
    in a worker thread, it hands the GIL back to the event loop between them: one
    ``json.dumps`` of the ``checkpoint.json`` of 200,000 variables holds it ~0.15 s (one C
    call keeps the GIL throughout; session 20).

    Raises:
        TypeError / ValueError: as ``json.dumps`` (a value JSON cannot hold, a circular one).
    """
    encode = _ENCODER.encode
    parts = []
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            inner = ",".join(encode(str(k)) + ":" + encode(v) for k, v in value.items())
            parts.append(f"{encode(key)}:{{{inner}}}")
        else:
            parts.append(f"{encode(key)}:{encode(value)}")
    return "{" + ",".join(parts) + "}"


class CheckpointInfo(TypedDict):
    """A checkpoint just written, as the protocol shows it (:func:`summary`): when (seconds
    since the epoch), the first saved names by name and how many were saved, the first
    skipped ones with why and how many were skipped, and both files' size in bytes."""

    taken_at: float
    variables: list[str]
    variables_total: int
    skipped: dict[str, str]
    skipped_total: int
    bytes: int


def summary(ckpt: Checkpoint, size: int, first: int = SUMMARY_NAMES) -> CheckpointInfo:
    """What the protocol says of a checkpoint just written (``docs/protocol.md``,
    Checkpoint), bounded whatever the number of variables: ``{"taken_at": float (seconds
    since the epoch), "variables": [the first ``first`` saved names by name],
    "variables_total": int, "skipped": {the first ``first`` skipped names by name:
    reason}, "skipped_total": int, "bytes": int (``size``, both files)}``. The full lists
    are in ``checkpoint.json`` (paged by ``rlmd.workspace.variables`` once stopped).
    Blocking for many variables (a pass over the names): call it in a worker thread."""
    skipped = heapq.nsmallest(first, ckpt.skipped)
    return {
        "taken_at": ckpt.taken_at,
        "variables": heapq.nsmallest(first, ckpt.variables),
        "variables_total": len(ckpt.variables),
        "skipped": {name: ckpt.skipped[name] for name in skipped},
        "skipped_total": len(ckpt.skipped),
        "bytes": size,
    }


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # atomic: a killed daemon leaves the old or the new file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove(folder: str | Path) -> None:
    """Delete the checkpoint of project ``folder`` (its values included), if any."""
    path = checkpoint_path(folder)
    with _turn(path.parent):  # after a save still running, not before it
        path.unlink(missing_ok=True)
        for values in path.parent.glob("values-*.json"):
            # one that cannot go (a folder there) neither stops the reset, which failed
            # as an internal error, nor keeps the other values files (review22)
            with contextlib.suppress(OSError):
                values.unlink(missing_ok=True)


def _remove_dead_writers_files(folder: Path) -> None:
    """Delete ``.<name>.<pid>.tmp`` files in ``folder`` whose pid is not a live process: a
    daemon killed while writing left one (up to the checkpoint's size) for good."""
    for tmp in folder.glob(".*.tmp"):
        pid = tmp.name[: -len(".tmp")].rpartition(".")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone; PermissionError means alive (another user's)
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def load(path: Path, problems: list[str] | None = None) -> Checkpoint | None:
    """The checkpoint at ``path`` (``checkpoint.json``; the values file is not read), or
    ``None`` if there is none. A file that does not parse is renamed to
    ``checkpoint.json.corrupt`` (``.corrupt-2`` and on when that exists: kept for
    inspection), logged, said in ``problems`` (one line: what, why, where it went), and
    ``None`` returned. A version 1 file comes back with its values in memory
    (:attr:`Checkpoint.values`)."""
    try:
        # no link followed, and a FIFO there does not block the open (nor the workspace)
        fd = _open_regular(path, "not a regular file")
        with open(fd, "rb") as f:
            text = f.read(MAX_METADATA_BYTES + 1)
        if len(text) > MAX_METADATA_BYTES:
            raise ValueError(f"larger than {MAX_METADATA_BYTES:,} bytes")
        raw = loads_stepwise(text.decode("utf-8"))
        del text
        if not isinstance(raw, dict) or raw.get("version") not in (1, VERSION):
            raise ValueError(f"unknown checkpoint version {raw.get('version')!r}")
        variables = raw.get("variables") or {}
        skipped = raw.get("skipped") or {}
        if not isinstance(variables, dict) or not isinstance(skipped, dict):
            raise ValueError("variables/skipped must be objects")
        ckpt = Checkpoint(
            workspace=str(raw.get("workspace") or ""),
            taken_at=_time(raw.get("taken_at")),
            skipped={str(k): str(v) for k, v in skipped.items()},
        )
        if raw["version"] == 1:  # the values themselves: encode them as a kernel would
            ckpt.values = json.dumps(variables, separators=(",", ":")).encode("ascii")
            variables = {name: _info_of(value) for name, value in variables.items()}
        else:
            ckpt.values_file = _values_ref(raw.get("values"), path.parent, bool(variables))
        for name, info in variables.items():
            clean = _clean_info(info)
            if clean is None:
                raise ValueError(f"variable {name!r}: its description is not an object")
            ckpt.variables[str(name)] = clean
        empty_stepwise(variables)  # the decoded copy: freed at once, it held the GIL 0.1 s
        return ckpt
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as exc:
        log.warning("checkpoint %s is unreadable (%s); ignoring it", path, exc)
        aside = path.with_name(path.name + ".corrupt")
        for n in range(2, 1000):
            if not os.path.lexists(aside):
                break
            aside = path.with_name(f"{path.name}.corrupt-{n}")
        try:
            os.replace(path, aside)
        except OSError:
            aside = path
        if problems is not None:
            problems.append(f"the checkpoint was unreadable ({exc}) and is kept as {aside}"[:500])
        return None


STEPWISE_FROM = 1024 * 1024
"""Characters of JSON text from which :func:`loads_stepwise` decodes member by member."""

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # the C one, not in stubs


def _skip(text: str, pos: int) -> int:
    """The position of the first character at or after ``pos`` that is not JSON whitespace."""
    return _WS.match(text, pos).end()  # type: ignore[union-attr]  # "*" always matches


def loads_stepwise(text: str) -> Any:
    """``json.loads(text)``, in many small C calls when ``text`` is long
    (:data:`STEPWISE_FROM`) and holds an object: its members are decoded one by one, and so
    are the members of an object-valued member (``variables``, ``skipped``). Called in a
    worker thread, it hands the GIL back to the event loop between them: one ``json.loads``
    of the ``checkpoint.json`` of 200,000 variables (13 MB) held it 0.3 s, stalling every
    client (one C call keeps the GIL throughout).

    Returns what ``json.loads`` returns for the same text (a repeated key: the last wins).

    Raises:
        ValueError: ``text`` is not valid JSON (a ``json.JSONDecodeError``).
    """
    start = _skip(text, 0)
    if len(text) < STEPWISE_FROM or text[start : start + 1] != "{":
        return json.loads(text)
    value, end = _members(text, start, 1)
    if _skip(text, end) != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _members(text: str, pos: int, depth: int) -> tuple[dict[str, Any], int]:
    """The object at ``text[pos] == "{"`` and the position after it, each member's value
    decoded by one ``raw_decode`` (by this function again, ``depth`` levels down)."""
    out: dict[str, Any] = {}
    pos = _skip(text, pos + 1)
    if text[pos : pos + 1] == "}":
        return out, pos + 1
    while True:
        if text[pos : pos + 1] != '"':
            raise json.JSONDecodeError(
                "Expecting property name enclosed in double quotes", text, pos
            )
        key, pos = _scanstring(text, pos + 1, True)
        pos = _skip(text, pos)
        if text[pos : pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        pos = _skip(text, pos + 1)
        if depth > 0 and text[pos : pos + 1] == "{":
            out[key], pos = _members(text, pos, depth - 1)
        else:
            out[key], pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text[pos : pos + 1] == "}":
            return out, pos + 1
        if text[pos : pos + 1] != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip(text, pos + 1)


def _open_regular(path: str | Path, refusal: str) -> int:
    """A descriptor of the regular file at ``path``, opened for reading without following a
    link or blocking on a FIFO.

    Raises:
        ValueError: ``refusal``, when something else is there (checked before Python's
            ``open``, which said of a folder "Is a directory: 16", naming the descriptor).
        OSError: it cannot be opened (``FileNotFoundError``, a link: ``ELOOP``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{refusal} (a {_kind(mode)})")
    return fd


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in a word."""
    for test, word in (
        (stat.S_ISDIR, "folder"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return word
    return "device"


def _time(value: Any) -> float:
    """``taken_at`` as read: a time ``time.localtime`` can show (and JSON can carry), else 0
    (1e300 or NaN raised out of the restore's note after the sandbox had started; an integer
    of 400 digits raised ``OverflowError`` out of :func:`load`, so the workspace could not be
    opened at all, review22)."""
    try:
        t = float(value or 0.0)
    except OverflowError:
        return 0.0
    return t if math.isfinite(t) and 0 <= t < 2**40 else 0.0


def _info_of(value: Any) -> dict[str, Any]:
    """What the kernel says of a saved value (a version 1 file holds only the values)."""
    text = repr(value)
    return {
        "type": type(value).__name__,
        "size": len(value) if isinstance(value, str | list | dict) else None,
        "preview": text,
        "bytes": len(json.dumps(value, separators=(",", ":"))),
    }


def _values_ref(ref: Any, folder: Path, needed: bool) -> dict[str, Any] | None:
    """The ``values`` entry of a version 2 file, checked, with ``file`` made a full path.

    Raises:
        ValueError: malformed, or missing while variables are listed.
    """
    if ref is None and not needed:
        return None
    if not isinstance(ref, dict) or not _VALUES_NAME.fullmatch(str(ref.get("file"))):
        raise ValueError("the values file reference is malformed")
    size, digest = ref.get("bytes"), ref.get("sha256")
    if not isinstance(size, int) or size < 0 or not re.fullmatch(r"[0-9a-f]{64}", str(digest)):
        raise ValueError("the values file reference is malformed")
    return {"file": str(folder / ref["file"]), "bytes": size, "sha256": digest}


def read_values(ckpt: Checkpoint) -> bytes:
    """The checkpoint's values as JSON bytes: from memory, or read from its values file and
    checked against the checkpoint (length and SHA-256). Call it in a worker thread.

    Raises:
        ValueError: the file is not the one the checkpoint was written with.
        OSError: it cannot be read (``FileNotFoundError``: deleted).
    """
    if ckpt.values is not None:
        return ckpt.values
    ref = ckpt.values_file
    if ref is None:
        return b"{}"
    changed = ValueError("its values file was changed or cut short since it was written")
    # no link followed, and a FIFO found there does not block the open (nor the restore)
    fd = _open_regular(ref["file"], "its values file is not a regular file")
    with open(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size != ref["bytes"]:  # read(bytes + 1) of a forged 2**62: MemoryError
            raise changed
        data = f.read(size + 1)
    if len(data) != ref["bytes"] or hashlib.sha256(data).hexdigest() != ref["sha256"]:
        raise changed
    return data


async def restore(
    sandbox: Sandbox, ckpt: Checkpoint, *, only_missing: bool = False
) -> tuple[list[str], dict[str, str], str | None]:
    """Bind the checkpoint's variables in a started sandbox: the values file's bytes go to
    :data:`RESTORE_FILE` in its working folder, the kernel decodes and binds them.

    Args:
        only_missing: skip names the REPL already defines (used after a kernel restart in the
            middle of a task, when the task may have made new values since).

    Returns:
        ``(restored names, {name: why it was not restored}, blocked)``; the dict holds the
        checkpoint's ``skipped`` entries plus any variable that could not be set (all of
        them, with the reason, when the values file is unreadable or the kernel refused it);
        ``blocked`` says why the values file could not be put in the sandbox's folder (full,
        something in the way), else ``None``: then the checkpoint is whole and a restore
        later may work (a checkpoint written meanwhile would lose its variables).

    Raises:
        SandboxError: the sandbox failed.
    """
    missing = dict(ckpt.skipped)
    names = list(ckpt.variables)
    if not names:
        return [], missing, None
    blocked = None
    try:
        data = await asyncio.to_thread(read_values, ckpt)
        try:
            await sandbox.upload(RESTORE_FILE, data)
        except (ValueError, TypeError, KeyError, OSError) as exc:
            blocked = f"{RESTORE_FILE} could not be written in the sandbox's folder: {exc}"
            raise
        out = await sandbox.load_variables(RESTORE_FILE, names, only_missing=only_missing)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        with contextlib.suppress(ValueError, TypeError, KeyError, OSError):
            await sandbox.remove_file(RESTORE_FILE)
        present = {v.name for v in await sandbox.list_variables()} if only_missing else set()
        why = f"could not be set again: {blocked or exc}"[:300]
        missing.update({name: why for name in names if name not in present})
        return [], missing, blocked and blocked[:300]
    wanted = set(names)
    said = out.get("restored") if isinstance(out, dict) else None
    said = said if isinstance(said, list) else []
    restored = list(dict.fromkeys(n for n in said if isinstance(n, str) and n in wanted))
    refused = out.get("missing") if isinstance(out, dict) else None
    if isinstance(refused, dict):
        missing.update({n: str(why)[:300] for n, why in refused.items() if n in wanted})
    return restored, missing, None

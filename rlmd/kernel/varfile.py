"""The REPL's variables written to, and read back from, one JSON file in the working folder.

A workspace checkpoint (``rlmd.workspace.checkpoint``) has the kernel do all the JSON work:
it encodes every saveable variable here and writes the text to a file, and after a restart
it reads such a file and binds the names again. The host moves the file's bytes between the
working folder and the checkpoint without decoding them: a 128 MiB ``json.dumps`` or
``json.loads`` holds the GIL for its whole C call, so the daemon's event loop would stall for
seconds even in a worker thread (measured in session 20, ``bench/RESULTS.md``).

Nothing here is trusted by the host: model code runs in this process and may replace
``json`` or the file. The host bounds what it reads by size, and a bad file only loses the
REPL's own variables.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SAVEABLE_TYPES = (str, int, float, bool, type(None), list, dict)
"""Exact types a checkpoint saves (a subclass is not saved: its methods would be lost)."""


_LEAVES = frozenset({str, int, float, bool, type(None)})

MAX_NESTING = 500
"""Deepest nesting of lists and dicts a checkpoint saves. ``json.loads`` in a fresh kernel
stops near the default recursion limit (1000), while ``json.dumps`` goes as deep as the REPL's
limit: a value nested 5000 deep under ``sys.setrecursionlimit(20000)`` was saved, and its
restore failed the whole file, so no variable came back (review22)."""

CHANGES = "changes when written as JSON (tuple, set, non-string key...)"
TOO_DEEP = f"nested more than {MAX_NESTING} levels deep (or circular): it could not be read back"


def json_problem(value: Any, max_depth: int = MAX_NESTING) -> str | None:
    """Why ``value`` cannot be saved as it is, else ``None``: it holds a container or a key
    of another exact type (a JSON round trip would change it: a tuple comes back a list, an
    int key a string, a ``str`` subclass a ``str``), or lists and dicts nested more than
    ``max_depth`` deep. Only exact types are checked, so no method of the value runs: a
    hostile ``__eq__`` cannot hold the kernel, as the round trip's ``==`` could (review21).
    A shared container is looked at again only when reached deeper than before; NaN is left
    to ``json.dumps``."""
    if type(value) in _LEAVES:
        return None
    deepest: dict[int, int] = {}
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is not list and kind is not dict:
            return CHANGES
        if depth > max_depth:
            return TOO_DEEP
        if deepest.get(id(item), 0) >= depth:
            continue
        deepest[id(item)] = depth
        if kind is dict:
            if any(type(key) is not str for key in item):
                return CHANGES
            children = item.values()
        else:
            children = item
        for child in children:
            if type(child) not in _LEAVES:
                stack.append((child, depth + 1))
    return None


def file_in(workdir: str, name: object) -> str:
    """``name`` (one plain file name) in ``workdir``; ValueError for anything else."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad file name {name!r}: one plain name in the working folder")
    return os.path.join(workdir, name)


def remove(workdir: str, name: object) -> None:
    """Delete the file ``name`` in ``workdir`` if it is there."""
    try:
        os.unlink(file_in(workdir, name))
    except FileNotFoundError:
        pass


def _write_new(path: str, pieces: list[str]) -> None:
    """Write ``pieces`` (ASCII) to a new file at ``path``: whatever was there is removed first
    and no symlink is followed, so a planted link cannot send the text elsewhere."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(path, flags, 0o600), "w", encoding="ascii") as f:
        f.writelines(pieces)


def save(
    items: list[tuple[str, Any]],
    workdir: str,
    name: object,
    max_var_bytes: int,
    max_total_bytes: int,
    info: Any,
) -> dict[str, Any]:
    """Encode the saveable variables among ``items`` and write them as one JSON object
    ``{"name": value, ...}`` (ASCII, no spaces) to the file ``name`` in ``workdir``.

    A variable is saved when its type is one of :data:`SAVEABLE_TYPES`, a JSON round trip
    would not change it and it is nested at most :data:`MAX_NESTING` deep
    (:func:`json_problem`), its JSON (no NaN or infinity) is at most
    ``max_var_bytes``, and it still fits in
    ``max(max_total_bytes, max_var_bytes)`` bytes for all saved values together, in the
    order of ``items``.

    Args:
        items: ``[(name, value)]`` of the REPL's user variables.
        info: ``info(name, value) -> {"name", "type", "size", "preview"}`` for a saved one.

    Returns:
        ``{"saved": {name: info + {"bytes": int}}, "skipped": {name: reason},
        "bytes": int}``, ``bytes`` being the file's length.

    Raises:
        ValueError: a bad ``name``. OSError: the file cannot be written (a full disk).
    """
    import json  # here: not imported at every kernel start

    path = file_in(workdir, name)
    room = max(int(max_total_bytes), int(max_var_bytes))
    full = f"not saved: the checkpoint's limit of {room:,} bytes of JSON for all variables"
    saved: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    pieces = ["{"]
    for key, value in items:
        if type(value) not in SAVEABLE_TYPES:
            skipped[key] = f"a {type(value).__name__}, not JSON data"
            continue
        problem = json_problem(value)
        if problem is not None:
            skipped[key] = problem
            continue
        try:
            text = json.dumps(value, allow_nan=False, separators=(",", ":"))
        except Exception as exc:  # noqa: BLE001 - circular, too deep, a bad key...
            skipped[key] = f"not JSON-serialisable ({type(exc).__name__})"
            continue
        if len(text) > max_var_bytes:
            skipped[key] = f"too large ({len(text)} bytes of JSON; the limit is {max_var_bytes})"
            continue
        if len(text) > room:
            skipped[key] = full
            continue
        pieces.append(("," if len(pieces) > 1 else "") + json.dumps(key) + ":" + text)
        saved[key] = {**info(key, value), "bytes": len(text)}
        room -= len(text)
    pieces.append("}")
    _write_new(path, pieces)
    return {"saved": saved, "skipped": skipped, "bytes": sum(map(len, pieces))}


def save_info(info: dict[str, Any], workdir: str, name: object) -> int:
    """Write ``info`` (what :func:`save` saved and skipped) as ASCII JSON to the file
    ``name`` in ``workdir``: the host reads it in small steps off its event loop, where the
    same text as a reply frame (names, types, previews of 200,000 variables: ~15 MB) was
    decoded in one call that stalled every client. Returns the file's length in bytes.

    Raises:
        ValueError: a bad ``name``. OSError: the file cannot be written.
    """
    import json  # here: not imported at every kernel start

    text = json.dumps(info, separators=(",", ":"))
    _write_new(file_in(workdir, name), [text])
    return len(text)


def load(workdir: str, name: object, names: list[str], bind: Any) -> dict[str, Any]:
    """Read the file ``name`` in ``workdir`` (written by :func:`save`, through the host) and
    bind each of ``names`` found in it with ``bind(name, value)``; the file is removed.

    Returns:
        ``{"restored": [name], "missing": {name: reason}}``.

    Raises:
        ValueError: a bad ``name``, or the file is not a JSON object. OSError: unreadable.
    """
    import json  # here: not imported at every kernel start

    path = file_in(workdir, name)
    try:
        # no link followed; a FIFO put there does not block the open (nor the kernel)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, encoding="utf-8") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{name} is not a regular file")
            values = json.load(f)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if not isinstance(values, dict):
        raise ValueError("the saved values are not a JSON object")
    restored: list[str] = []
    missing: dict[str, str] = {}
    for key in names:
        if key not in values:
            missing[key] = "not in the saved values"
            continue
        try:
            bind(key, values[key])
        except (ValueError, TypeError) as exc:
            missing[key] = f"could not be set again: {exc}"
            continue
        restored.append(key)
    return {"restored": restored, "missing": missing}

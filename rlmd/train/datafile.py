"""Training data files checked before a model loads: ``rlmd train sft --data`` (SFT samples)
and ``rlmd train grpo --data`` (GRPO groups), in the shapes :mod:`rlmd.train.export` writes.

``sft`` loaded the base model (minutes on a CPU; dequantising a GGUF the first time) before
it read its data, so an empty file, a line that is not JSON or a sample without
``completion`` failed only then, with the ``datasets`` library's error naming no line.
``grpo`` read its data first, but a line that was not an object, rewards that were not a
list, or a missing field gave a bare ``TypeError`` traceback or ``error: 'rewards'``.
Every line is checked here; the message names the file and line. :func:`read_records` is
also how task files (:mod:`rlmd.train.tasks`) and rollout imports
(:func:`rlmd.train.rollout.import_set`) are read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class DataFileError(ValueError):
    """A training data file that cannot be used; the message names the file and line."""


def read_records(
    path: str | Path, what: str, *, error: type[ValueError] = DataFileError
) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers (blank lines skipped): the one
    reader of numbered JSONL lines in ``rlmd train`` (task files, SFT and GRPO data, rollout
    imports). Every message reads ``file:line: what is wrong`` (``file: ...`` for the file
    as a whole). A UTF-8 byte-order mark (Windows editors) is skipped.

    Args:
        path: the file.
        what: what a line holds, for messages (``"SFT sample"``).
        error: the exception raised (a :class:`ValueError`; :class:`DataFileError` by
            default).

    Raises:
        error: no such file, a folder or a FIFO or device rather than a file, a file that
            cannot be read (permissions), text that is not UTF-8 (the line named), a line
            that is not JSON (or nested too deeply to read) or not a JSON object, or no
            record at all.
    """
    path = Path(path)
    if not path.exists():
        raise error(f"{path}: no such file")
    if not path.is_file():  # a FIFO would block the read forever
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise error(f"{path}: {kind}, not a file of {what}s")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = f"byte 0x{data[exc.start]:02x} at column {column}"
        raise error(f"{path}:{n}: not UTF-8 text ({byte})") from None
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:  # also an integer of more than 4,300 digits
            raise error(f"{path}:{n}: not JSON ({exc})") from None
        except RecursionError:  # [[[[... thousands deep: it ended rlmd train in a traceback
            raise error(f"{path}:{n}: JSON nested too deeply to read") from None
        if not isinstance(rec, dict):
            got = "null" if rec is None else _kind(rec)
            raise error(f"{path}:{n}: not a JSON object (one {what}), got {got}")
        records.append((n, rec))
    if not records:
        how = "it is empty" if not data else "it holds only blank lines"
        raise error(f"{path}: no {what} in the file ({how})")
    return records


def check_sft(path: str | Path) -> int:
    """Check an SFT file (``{"prompt": [message], "completion": [message], "turn"?: int}``
    per line, a message ``{"role": str, "content": str}``); returns the number of samples.

    Raises:
        DataFileError: see :func:`read_records`; a sample without a non-empty ``prompt`` or
            ``completion`` list of messages, or a ``turn`` that is not an integer.
    """
    records = read_records(path, "SFT sample")
    for n, rec in records:
        where = f"{path}:{n}"
        for key in ("prompt", "completion"):
            _messages(rec.get(key), f"{where}: {key}")
        turn = rec.get("turn")
        if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
            raise DataFileError(f"{where}: turn must be an integer, not {turn!r}")
    return len(records)


def read_groups(path: str | Path) -> list[dict[str, Any]]:
    """The GRPO groups of a file (``{"prompt": [message], "completions": [[message]],
    "rewards": [number]}`` per line), checked.

    Raises:
        DataFileError: see :func:`read_records`; a group without a non-empty ``prompt``,
            with ``completions`` that are not non-empty lists of messages, or ``rewards``
            that are not finite numbers, one per completion.
    """
    groups = []
    for n, rec in read_records(path, "GRPO group"):
        where = f"{path}:{n}"
        _messages(rec.get("prompt"), f"{where}: prompt")
        completions, rewards = rec.get("completions"), rec.get("rewards")
        if not isinstance(completions, list) or not completions:
            raise DataFileError(f"{where}: completions must be a non-empty list of replies")
        for i, completion in enumerate(completions):
            _messages(completion, f"{where}: completions[{i}]")
        if not isinstance(rewards, list) or not all(_finite(r) for r in rewards):
            raise DataFileError(f"{where}: rewards must be a list of finite numbers")
        if len(rewards) != len(completions):
            raise DataFileError(
                f"{where}: {len(rewards)} rewards for {len(completions)} completions"
            )
        groups.append(rec)
    return groups


def _messages(value: Any, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise DataFileError(f"{where} must be a non-empty list of messages, got {_kind(value)}")
    for i, m in enumerate(value):
        if not (
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        ):
            raise DataFileError(
                f'{where}[{i}] must be a message {{"role": str, "content": str}}, '
                f"got {json.dumps(m)[:80]}"
            )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "?")

"""Turning event payloads into stored values and back.

Pure functions, no database access:

* :func:`to_jsonable` makes any payload JSON-safe (dataclasses, tuples, sets, paths ...).
* :func:`split_text` / :func:`merge_text` move the searchable text fields of a node payload
  (``code``, ``stdout``, ``stderr``, ``error``) into their own columns and back, so the
  full-text index can cover them without storing the text twice.
* :func:`dumps` / :func:`loads` are the JSON encoding used for every JSON column.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

NODE_TEXT_COLUMNS = ("code", "stdout", "stderr", "error")
"""Node payload fields stored in their own (full-text indexed) columns when they are strings."""

RUN_JSON_COLUMNS = ("context_meta", "models", "sandbox", "budget", "usage")
"""Run columns holding JSON text."""
FINAL_IS_ANSWER = "final_is_answer"
"""Stored in a cell's payload instead of its ``final`` when that is the run's (long) answer:
the answer is stored once, in ``runs.answer``; :func:`put_answer_back` restores the payload."""


def to_jsonable(obj: Any, on_text: Callable[[str], str] | None = None) -> Any:
    """A copy of ``obj`` made only of dict / list / str / int / float / bool / None.

    Strings lose lone surrogates (see :func:`text`). Dataclasses become dicts, tuples and
    sets become lists, paths become strings, bytes are
    decoded as UTF-8 (invalid bytes replaced), non-finite floats become strings, dict keys
    become strings; anything else becomes its ``repr``. ``on_text``, if given, is applied to
    every string value first (not to dict keys): the store removes secrets in the same
    pass (:func:`rlmd.redact.text_redactor`), before a lone surrogate becomes its escape
    (``\\udcff``, whose last letter would hide a key that follows from the redactor).
    Never raises (unless ``on_text`` does).
    """
    if on_text is None:
        return _jsonable(obj, text)
    return _jsonable(obj, lambda value: text(on_text(value)))


def _jsonable(obj: Any, fix: Callable[[str], str]) -> Any:
    kind = type(obj)  # the exact built-in types first: most of a payload, one check each
    if kind is str:
        return fix(obj)
    if kind is dict:
        return {_key(k): _jsonable(v, fix) for k, v in obj.items()}
    if obj is None or kind is int or kind is bool:
        return obj
    if kind is list:
        return [_jsonable(v, fix) for v in obj]
    if isinstance(obj, str):
        return fix(obj)
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, dict):
        return {_key(k): _jsonable(v, fix) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v, fix) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return _jsonable(fields, fix)
    if isinstance(obj, PurePath):
        return fix(str(obj))
    if isinstance(obj, (bytes, bytearray)):
        return fix(bytes(obj).decode("utf-8", errors="replace"))
    try:
        return fix(repr(obj))
    except Exception:  # a broken __repr__ must not lose the event
        return f"<unrepresentable {type(obj).__name__}>"


def _key(key: Any) -> str:
    """A dict key as a JSON object key: a plain ASCII ``str`` as it is, else ``text(str(key))``."""
    if type(key) is str and key.isascii():
        return key
    return text(str(key))


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def text(value: str) -> str:
    """``value`` encodable as UTF-8: each lone surrogate (from undecodable bytes in argv or a
    file, or ``"\\ud800"`` in JSON) becomes its backslash escape, the six characters
    ``\\ud800``; SQLite and UTF-8 writers reject them. Other text is returned unchanged."""
    if value.isascii() or _SURROGATE.search(value) is None:  # isascii: O(1) in CPython
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
try:  # the C encoder made once: JSONEncoder.encode builds one per call (~8 us of ~30 here)
    from _json import encode_basestring as _c_encode_str
    from _json import make_encoder as _c_make_encoder

    _C_ENCODE: Callable[[Any, int], Any] | None = _c_make_encoder(
        None, _ENCODER.default, _c_encode_str, None, ":", ",", False, False, True
    )
except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    _C_ENCODE = None


def dumps(obj: Any) -> str:
    """Compact JSON text for ``obj`` (already :func:`to_jsonable`); non-ASCII kept as is.

    Raises:
        TypeError: ``obj`` holds a value JSON cannot encode (as ``json.dumps`` does).
    """
    if _C_ENCODE is None:
        return _ENCODER.encode(obj)
    return "".join(_C_ENCODE(obj, 0))


try:  # ASCII (the journal's encoding), refusing NaN and infinities (see plain_json)
    from _json import encode_basestring_ascii as _c_encode_ascii
    from _json import make_encoder as _c_make_ascii_encoder

    _C_ASCII: Callable[[Any, int], Any] | None = _c_make_ascii_encoder(
        None, _ENCODER.default, _c_encode_ascii, None, ":", ",", False, False, False
    )
except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    _C_ASCII = None


def ascii_json(obj: Any) -> str:
    """Compact ASCII JSON text for ``obj`` (already :func:`to_jsonable`, so finite floats
    only); what the step journal writes.

    Raises:
        TypeError / ValueError: ``obj`` holds a value JSON cannot encode.
    """
    if _C_ASCII is None:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return "".join(_C_ASCII(obj, 0))


def plain_json(obj: Any) -> str | None:
    """The compact ASCII JSON (:func:`ascii_json`) of ``obj`` when :func:`to_jsonable`
    (without ``on_text``) would return it as it is, or an equal copy; else ``None``: a value
    of another type than ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``,
    ``bool``, ``None`` (a dataclass, a set, bytes...), a non-finite float, a ``True``,
    ``False`` or ``None`` dict key (JSON writes ``"true"``, :func:`to_jsonable` ``"True"``),
    a ``str`` holding a surrogate (or a character past U+D000, whose ``\\uXXXX`` escape is
    not told apart from one), nesting too deep. One C call where :func:`to_jsonable` walks
    the value in Python; secrets are not looked for (see
    :func:`rlmd.redact.may_redact_json`). Decoding the text (:func:`loads`) gives the data
    :func:`to_jsonable` makes."""
    if _C_ASCII is None:
        return None
    try:
        text = "".join(_C_ASCII(obj, 0))
    except (TypeError, ValueError, RecursionError):
        return None
    # ensure_ascii writes a surrogate as "\\udXXX" (to_jsonable escapes a lone one as text).
    # A key made a string by JSON is the str() of it, as to_jsonable makes it, for an int
    # or a float; for True, False and None it is not. Inside a string, a quote is escaped,
    # so '"true":' there ends a key too (a false alarm: the walk then does it).
    if "\\ud" in text or '"true":' in text or '"false":' in text or '"null":' in text:
        return None
    return text


def loads(text: Any) -> Any:
    """Decode a JSON column: ``None`` stays ``None``; text that is not JSON is returned as is."""
    if text is None or not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def split_text(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str | None]]:
    """Split a node payload into (rest, text columns).

    Returns:
        ``rest``: ``data`` without the string values of :data:`NODE_TEXT_COLUMNS`;
        ``columns``: one entry per name in :data:`NODE_TEXT_COLUMNS`, the string or ``None``.
        Non-string values (``"error": None``) stay in ``rest`` so :func:`merge_text` restores
        the payload exactly.
    """
    rest = dict(data)
    columns: dict[str, str | None] = {}
    for name in NODE_TEXT_COLUMNS:
        value = rest.get(name)
        if isinstance(value, str):
            columns[name] = rest.pop(name)
        else:
            columns[name] = None
    return rest, columns


def merge_text(rest: Any, columns: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`split_text`: the payload with the non-null text columns put back."""
    data = dict(rest) if isinstance(rest, dict) else ({"value": rest} if rest is not None else {})
    for name in NODE_TEXT_COLUMNS:
        value = columns.get(name)
        if value is not None:
            data[name] = value
    return data


def put_answer_back(data: dict[str, Any], answer: str | None) -> dict[str, Any]:
    """A node payload as recorded: a cell marked :data:`FINAL_IS_ANSWER` gets its
    ``final`` back (the run's ``answer``) and loses the mark. Other payloads are returned
    unchanged. Changes ``data`` in place and returns it."""
    if data.pop(FINAL_IS_ANSWER, None) is not None:
        data["final"] = answer
    return data

"""One line of a newline-delimited JSON-RPC stdin, checked the same way for ``rlmd acp`` and
``rlmd mcp``: a line that is not a message gets the JSON-RPC error response with ``"id":
null`` (``-32700 Parse error`` or ``-32600 Invalid Request``) and one stderr line, and the
front door goes on with the next. Standard library only: neither protocol's SDK is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@dataclass(frozen=True)
class BadLine:
    """Why line ``number`` of stdin is not a message: the JSON-RPC ``code`` and ``message``
    to answer with and ``why`` in words ("is not JSON (...)")."""

    number: int
    code: int
    message: str
    why: str

    def warning(self) -> str:
        """The stderr line (without the program's name)."""
        return f"line {self.number} of stdin {self.why}; answered {self.code} {self.message} and skipped"

    def response(self) -> dict[str, Any]:
        """The JSON-RPC error response (``id`` null: the line names no request)."""
        error = {
            "code": self.code,
            "message": self.message,
            "data": f"line {self.number} {self.why}",
        }
        return {"jsonrpc": "2.0", "id": None, "error": error}


def parse_line(line: bytes, number: int) -> dict[str, Any] | BadLine | None:
    """Line ``number`` (1-based) of stdin as a JSON object, ``None`` for a blank line, or a
    :class:`BadLine` for text that is not UTF-8, not JSON (or nested deeper than Python's
    recursion limit lets it be read), JSON but not an object, or an
    object that is no JSON-RPC 2.0 message (no ``"jsonrpc": "2.0"``, neither ``method``
    nor ``id``, a ``method`` that is not a string, a response without a result or error)."""
    line = line.strip()
    if not line:
        return None
    try:
        message = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        byte = f"byte 0x{line[exc.start]:02x} at {exc.start}"
        return BadLine(number, PARSE_ERROR, "Parse error", f"is not UTF-8 ({byte})")
    except ValueError as exc:
        return BadLine(number, PARSE_ERROR, "Parse error", f"is not JSON ({exc})")
    except RecursionError:  # [[[[... thousands deep: it ended both doors in a traceback
        return BadLine(number, PARSE_ERROR, "Parse error", "is JSON nested too deeply to read")
    if not isinstance(message, dict):
        kind = "null" if message is None else type(message).__name__
        why = f"is JSON {kind}, not a JSON-RPC message object"
        return BadLine(number, INVALID_REQUEST, "Invalid Request", why)
    missing = _not_a_message(message)
    if missing:
        return BadLine(
            number, INVALID_REQUEST, "Invalid Request", f"is not a JSON-RPC message ({missing})"
        )
    return message


def _not_a_message(message: dict[str, Any]) -> str | None:
    """What a JSON object lacks to be a JSON-RPC 2.0 request, notification or response.
    ``rlmd acp`` dropped ``{"foo": 1}`` without a word (its SDK reads an object with
    neither ``method`` nor ``id`` as nothing), while ``rlmd mcp`` answered it."""
    if message.get("jsonrpc") != "2.0":
        return 'no "jsonrpc": "2.0"'
    if "method" in message:
        return None if isinstance(message["method"], str) else '"method" is not a string'
    if "id" not in message:
        return 'neither "method" nor "id"'
    if "result" not in message and "error" not in message:
        return 'a response with neither "result" nor "error"'
    return None

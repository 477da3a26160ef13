"""Errors the daemon's commands raise, with their JSON-RPC codes (no pygls here).

The protocol layer turns a :class:`CommandError` into a JSON-RPC error response with the same
``code``, ``message`` and ``data``. Codes ``-32602`` and ``-32603`` are JSON-RPC's own; the
``-320xx`` codes are rlmd's (see ``docs/protocol.md``).
"""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_FOUND = -32001
"""A run, task or workspace that does not exist."""
BUSY = -32002
"""The workspace is running a task and the caller asked not to queue."""
UNAVAILABLE = -32003
"""A model or sandbox the command needs cannot be used here (the message says the fix)."""
SANDBOX_FAILED = -32004
"""The workspace's sandbox could not start, or failed during the operation."""
SHUTTING_DOWN = -32005
"""The daemon is stopping and accepts no new work."""
UNAUTHORIZED = -32006
"""A socket client sent a message without the daemon's token (or a wrong one)."""
CHECKPOINT_FAILED = -32007
"""A checkpoint the command needed could not be written (a full disk); nothing was lost."""


class CommandError(Exception):
    """A command failed in a way the client should see.

    Args:
        code: the JSON-RPC error code (see the constants of this module).
        message: one human-readable sentence saying what went wrong and how to fix it.
        data: optional JSON-able details (``{"field": "budgets.max_depth"}``...).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid(message: str, field: str | None = None) -> CommandError:
    """An ``INVALID_PARAMS`` error naming the offending ``field`` (dotted path) if given."""
    return CommandError(INVALID_PARAMS, message, {"field": field} if field else None)


def not_found(message: str) -> CommandError:
    return CommandError(NOT_FOUND, message)

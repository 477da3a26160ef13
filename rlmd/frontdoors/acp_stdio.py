"""``rlmd acp``'s stdio: newline-delimited JSON-RPC, framed as the ACP SDK frames it, with
a line that is not a message answered and skipped instead of stopping the agent.

The SDK's own stdio reader logged a traceback for a line that is not JSON, and a line that
is JSON but not an object (``42``, ``[1]``) stopped its receive loop (``'int' object has no
attribute 'get'``): the agent answered nothing more. ``null`` read as the end of input, so
the agent exited without a word. :class:`CheckedStdio` is an ``acp`` message transport
(the SDK's ``Transport`` protocol: ``send``, ``receive``, ``close``) that reads the lines
itself and checks each with :mod:`rlmd.frontdoors.jsonrpc_lines` (as ``rlmd mcp`` does):
each bad line gets the JSON-RPC error response with ``"id": null`` (``-32700 Parse error``
or ``-32600 Invalid Request``), one line on stderr says what was wrong with which line, and
the agent goes on with the next.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from rlmd.frontdoors.jsonrpc_lines import BadLine, parse_line

LINE_LIMIT_BYTES = 50 * 1024 * 1024
"""The stdin reader's buffer (the SDK's default): longer lines are read in pieces."""


def _warn(text: str) -> None:
    print(f"rlmd acp: {text}", file=sys.stderr, flush=True)


class CheckedStdio:
    """A message transport over an asyncio reader/writer pair (see the module docstring).

    Args:
        reader: the client's messages (stdin), one JSON object per line.
        writer: where messages go (stdout).
        warn: called with one line of text per line refused (default: stderr).
        notifications: the notification methods the agent handles; another notification
            (no ``id``: JSON-RPC answers it with nothing) is named through ``warn`` and
            skipped, where the SDK logged a "method not found" traceback. ``None``: all
            are passed on.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        warn: Callable[[str], None] = _warn,
        notifications: frozenset[str] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._warn = warn
        self._notifications = notifications
        self._lock = asyncio.Lock()
        self._lines = 0

    async def send(self, message: dict[str, Any]) -> None:
        """Write ``message`` as one line (whole, in the order sent).

        Raises:
            ConnectionError: stdout is closed (the client went away).
        """
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message (a JSON object), or ``None`` at the end of stdin. A line that
        is not one is answered, reported through ``warn`` and skipped."""
        while True:
            line = await self._read_line()
            if not line:
                return None
            self._lines += 1
            message = parse_line(line, self._lines)
            if isinstance(message, BadLine):
                await self._refuse(message)
            elif message is not None and not self._unknown_notification(message):
                return message

    def _unknown_notification(self, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if "id" in message or method is None or self._notifications is None:
            return False
        if method in self._notifications:
            return False
        self._warn(
            f"line {self._lines} of stdin is a notification of unknown method {method!r}; ignored"
        )
        return True

    async def close(self) -> None:
        """Nothing to release: stdin and stdout belong to the process."""

    async def _refuse(self, bad: BadLine) -> None:
        self._warn(bad.warning())
        try:
            await self.send(bad.response())
        except (ConnectionError, RuntimeError):
            pass  # no one reads stdout any more: the next read ends it

    async def _read_line(self) -> bytes:
        """One line with its newline (the last may lack it), however long; ``b""`` at EOF."""
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    chunks.append(await self._reader.readuntil(b"\n"))
                    return b"".join(chunks)
                except asyncio.LimitOverrunError as exc:
                    chunks.append(await self._reader.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)

"""``rlmd mcp``'s stdio: the mcp SDK's own stdio transport, fed only the lines that are
JSON-RPC messages.

The SDK's reader hands a line it cannot validate to the server as an exception, and the
server drops it without a word: a client that wrote ``not json`` (or ``42``, or an object
that is no JSON-RPC message) waited for an answer that never came. The SDK has no hook for
that, but its ``stdio_server`` takes the stdin to read: :class:`CheckedLines` is that stdin.
Each line is checked as ``rlmd acp`` checks its lines (:mod:`rlmd.frontdoors.jsonrpc_lines`),
then as an MCP JSON-RPC message; a bad one is answered with the JSON-RPC error (``"id":
null``, ``-32700 Parse error`` or ``-32600 Invalid Request``) through the server's own
write stream, one stderr line says what was wrong with which line, and the server goes on.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from rlmd.frontdoors.jsonrpc_lines import INVALID_REQUEST, BadLine, parse_line


def _warn(text: str) -> None:
    print(f"rlmd mcp: {text}", file=sys.stderr, flush=True)


class CheckedLines:
    """stdin for :func:`mcp.server.stdio.stdio_server`: iterating yields the lines that are
    JSON-RPC messages (as text); the others are answered through :meth:`answer_to`'s
    stream, reported through ``warn`` and skipped.

    Args:
        source: the client's messages, one JSON object per line (binary).
        warn: called with one line of text per line refused (default: stderr).
    """

    def __init__(self, source: BinaryIO, warn: Callable[[str], None] = _warn) -> None:
        self._source = anyio.wrap_file(source)
        self._warn = warn
        self._replies: Any = None
        self._bound = anyio.Event()

    def answer_to(self, write_stream: Any) -> None:
        """Send the error responses to ``write_stream`` (the server's stream of
        :class:`SessionMessage`, which the transport writes to stdout)."""
        self._replies = write_stream
        self._bound.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        number = 0
        async for line in self._source:
            number += 1
            checked = parse_line(line, number)
            if checked is None:
                continue
            if isinstance(checked, dict):
                try:
                    types.jsonrpc_message_adapter.validate_python(checked, by_name=False)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in first["loc"][1:]) or "the message"
                    why = f"is not a JSON-RPC message ({where}: {first['msg']})"
                    checked = BadLine(number, INVALID_REQUEST, "Invalid Request", why)
            if isinstance(checked, BadLine):
                await self._refuse(checked)
                continue
            yield line.decode("utf-8")

    async def _refuse(self, bad: BadLine) -> None:
        self._warn(bad.warning())
        await self._bound.wait()
        reply = types.jsonrpc_message_adapter.validate_python(bad.response(), by_name=False)
        try:
            await self._replies.send(SessionMessage(reply))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the server is stopping: no one writes stdout any more


@asynccontextmanager
async def checked_stdio_server(stdin: BinaryIO | None = None):
    """:func:`mcp.server.stdio.stdio_server` over :class:`CheckedLines` of ``stdin`` (the
    process's by default): yields the server's ``(read_stream, write_stream)``."""
    lines = CheckedLines(stdin if stdin is not None else sys.stdin.buffer)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
        lines.answer_to(write_stream)
        yield read_stream, write_stream

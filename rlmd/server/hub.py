"""Fan-out of notifications to every attached client, encoded once per detail level.

Every notification gets a daemon-wide ``seq`` (1, 2, ...) so a client can tell it missed
some. The hub never waits for a client: a subscriber's ``deliver`` must only queue bytes
(a client that stops reading is dropped by its connection, see
:mod:`rlmd.server.framing`). No pygls here: the frames are plain JSON-RPC.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from rlmd.store.codec import to_jsonable

log = logging.getLogger("rlmd.server")

DETAILS = ("full", "summary", "none")
"""How much of each run event a client receives (see ``docs/protocol.md``)."""

SUMMARY_TEXT_CHARS = 500
"""In ``"summary"`` detail, strings in event data are cut to this many characters."""


def frame(payload: dict[str, Any]) -> bytes:
    """One JSON-RPC message with its ``Content-Length`` header (bytes). Lone surrogates in
    its strings (a cell's output, an answer, JSON input's ``"\\ud800"``) are sent as their
    backslash escapes, as the store keeps them: they are not Unicode text, and many clients'
    JSON decoders reject them."""
    text = json.dumps(payload, separators=(",", ":"), default=str, ensure_ascii=False)
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(to_jsonable(payload), separators=(",", ":"), ensure_ascii=False)
        body = text.encode("utf-8")
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def summarize(value: Any, limit: int = SUMMARY_TEXT_CHARS) -> Any:
    """``value`` with long strings cut to ``limit`` characters (marking how much was cut) and
    ``messages`` lists replaced by their length."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + f"… [{len(value) - limit:,} more characters]"
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "messages" and isinstance(v, list):
                out["messages_count"] = len(v)
            else:
                out[k] = summarize(v, limit)
        return out
    if isinstance(value, list):
        return [summarize(v, limit) for v in value[:50]] + (
            [f"… {len(value) - 50} more items"] if len(value) > 50 else []
        )
    return value


class Subscriber(Protocol):
    """A live client connection as the hub sees it."""

    detail: str

    def deliver(self, method: str, params: dict[str, Any], data: bytes) -> None:
        """Queue one encoded notification (must not block)."""


class Hub:
    """The set of subscribers and the notification sequence."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self.seq = 0
        self.sent = 0

    def add(self, sub: Subscriber) -> None:
        self.subscribers.add(sub)

    def remove(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, method: str, params: Mapping[str, Any], *, event: bool = False) -> int:
        """Send a notification to every subscriber; returns its ``seq``.

        Args:
            method: ``"rlmd/event"``, ``"rlmd/taskStatus"``, ``"rlmd/workspace"``.
            params: the JSON-able payload (``seq`` is added).
            event: it is a run event, shaped by each subscriber's ``detail``.
        """
        self.seq += 1
        params = {**params, "seq": self.seq}
        frames: dict[str, bytes] = {}
        for sub in list(self.subscribers):
            detail = sub.detail if event else "full"
            if detail == "none":
                continue
            data = frames.get(detail)
            if data is None:
                shaped = params if detail == "full" else summarize(params)
                data = frames[detail] = frame(
                    {"jsonrpc": "2.0", "method": method, "params": shaped}
                )
            try:
                sub.deliver(method, params, data)
                self.sent += 1
            except Exception:  # one broken client must not stop the others
                log.exception("delivering %s failed", method)
        return self.seq

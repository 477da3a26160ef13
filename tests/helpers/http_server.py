"""A threaded HTTP server on 127.0.0.1 that records requests and plays scripted OpenAI /
Anthropic replies (for the providers' tests and the engine's untrusted-code tests)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, Any] | bytes, dict[str, str]] | str
"""``(status, json body or raw bytes, headers)`` or ``"hang"`` (never answer)."""


class FakeServer:
    """A threaded HTTP server that records requests and plays scripted replies.

    ``replies`` is consumed one per request; when empty, ``default(request)`` answers.
    A reply may also be a callable ``request -> Reply`` (to echo headers back).
    A chat.completion body is streamed when the request asks for it, unless
    ``ignores_stream`` is set (as some OpenAI-compatible proxies do).
    """

    def __init__(self, default: Callable[[dict[str, Any]], Reply]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[Reply | Callable[[dict[str, Any]], Reply]] = []
        self.default = default
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(self.rfile.read(length) or b"{}"),
                }
                server.requests.append(request)
                reply = server.replies.pop(0) if server.replies else server.default
                if callable(reply):
                    reply = reply(request)
                if reply == "hang":
                    server.release.wait(120)  # until the server stops (a test's bound < 120 s)
                    return
                status, body, headers = reply
                streamed = request["body"].get("stream") and not server.ignores_stream
                chat = isinstance(body, dict) and ("choices" in body or "events" in body)
                if streamed and status == 200 and chat:
                    self.stream(request, body)
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-length", str(len(data)))
                for k, v in {"content-type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def stream(self, request: dict[str, Any], body: dict[str, Any]) -> None:
                """Serve a chat.completion body as server-sent chunks of 3 characters,
                ``server.chunk_delay_s`` apart (a body ``{"events": [...]}``: those chunks as
                they are); count what got written before the client went away in
                ``server.chunks_sent``."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                if "events" in body:
                    self.send_events(body["events"])
                    return
                text = body["choices"][0]["message"]["content"]
                base = {"id": "c1", "object": "chat.completion.chunk", "created": 0}
                base["model"] = body["model"]
                events = [
                    {**base, "choices": [{"index": 0, "delta": {"content": text[i : i + 3]}}]}
                    for i in range(0, len(text), 3)
                ]
                finish = body["choices"][0]["finish_reason"]
                events.append(
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
                )
                wants_usage = (request["body"].get("stream_options") or {}).get("include_usage")
                if body.get("usage") and wants_usage:
                    events.append({**base, "choices": [], "usage": body["usage"]})
                self.send_events(events)

            def send_events(self, events: list[Any]) -> None:
                try:
                    for event in events:
                        self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                        self.wfile.flush()
                        server.chunks_sent += 1
                        time.sleep(server.chunk_delay_s)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:
                    server.disconnected.set()

        self.ignores_stream = False
        self.chunks_sent = 0
        self.chunk_delay_s = 0.0
        self.disconnected = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def openai_reply(text: str = "hello", usage: bool = True, model: str = "m") -> Reply:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    return 200, body, {}


def anthropic_reply(text: str = "hello", stop: str = "end_turn") -> Reply:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 13, "output_tokens": 5},
    }
    return 200, body, {}


def error_reply(status: int, message: str = "nope") -> Reply:
    return status, {"error": {"type": "error", "message": message}}, {}

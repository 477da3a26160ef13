"""A scripted OpenAI-compatible server for the whole-run benchmark (its own process).

Run: ``python bench/script_server.py SCRIPTS.json``; prints its port on the first line of
stdout, then serves ``POST /v1/chat/completions`` on 127.0.0.1 until killed (HTTP/1.1 with
keep-alive, as vLLM and llama.cpp's server do). ``SCRIPTS.json`` is ``{"sub_reply": str,
"scripts": {model: [root reply, ...]}}``:

* a request for a model in ``scripts`` whose messages include a ``system`` one is a root
  turn: it gets reply number *k*, *k* being the number of ``assistant`` messages it sends
  (its earlier turns), so every run and both libraries replay the same script;
* any other request is a sub-call and gets ``sub_reply``.

Replies are streamed when asked (``"stream": true``: one content event, the finish event,
a usage event when ``stream_options.include_usage``, then ``[DONE]``, as HTTP chunks), else
one JSON body. ``GET /stats`` gives ``{"root": n, "sub": n}`` and resets the counts.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def main(path: str) -> None:
    config = json.loads(open(path, encoding="utf-8").read())
    scripts: dict[str, list[str]] = config["scripts"]
    sub_reply: str = config["sub_reply"]
    counts = {"root": 0, "sub": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as uvicorn does: no 40 ms delayed-ACK waits

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                data = json.dumps(counts).encode()
                counts.update(root=0, sub=0)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            messages = body.get("messages") or []
            script = scripts.get(body.get("model"))
            if script is not None and any(m.get("role") == "system" for m in messages):
                turn = sum(m.get("role") == "assistant" for m in messages)
                text, kind = script[min(turn, len(script) - 1)], "root"
            else:
                text, kind = sub_reply, "sub"
            with lock:
                counts[kind] += 1
            base = {"id": "c1", "created": 0, "model": body.get("model", "m")}
            if not body.get("stream"):
                message = {"role": "assistant", "content": text}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                reply = {**base, "object": "chat.completion", "choices": [choice], "usage": USAGE}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            chunk = {**base, "object": "chat.completion.chunk"}
            events = [
                {
                    **chunk,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}],
                },
                {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append({**chunk, "choices": [], "usage": USAGE})
            payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            parts = (payload, b"data: [DONE]\n\n", b"")
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts))
            self.wfile.flush()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])

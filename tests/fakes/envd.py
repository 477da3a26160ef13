"""A local fake of E2B's envd, the daemon inside each E2B VM that the e2b SDK talks to.

With it the *real* e2b SDK runs end to end here: ``E2B_DEBUG=true`` makes ``AsyncSandbox.create``
skip E2B's API, ``E2B_SANDBOX_URL`` points the SDK's envd clients at this server, and
``E2B_HTTP_VERSION=1.1`` matches the plain HTTP/1.1 it serves. It implements what rlmd uses:
the connect-rpc ``process.Process`` service (``Start`` as a server stream of start / data /
end events, ``SendInput``, ``SendSignal``, ``CloseStdin``; its request and event types come
from the SDK's own generated code) and the ``/files`` and ``/health`` HTTP routes. Processes
are real local ones (see :class:`tests.fakes.cloud.LocalProcess`), run on the server's own
event loop in its own thread, as a remote VM would run them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof

from .cloud import LocalProcess

_SIGNALS = {9: signal.SIGKILL, 15: signal.SIGTERM}


def _event(name: str, value: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=Oneof(name, value)))


class FakeProcessService(process_connect.Process):
    """``process.Process`` over local processes: what the SDK's commands API calls (the
    generated base class answers the other methods with UNIMPLEMENTED)."""

    def __init__(self) -> None:
        self.processes: dict[int, LocalProcess] = {}
        self.started: list[list[str]] = []
        self.envs: list[dict[str, str]] = []

    async def start(self, request: Any, ctx: Any):
        cfg = request.process
        argv = [cfg.cmd, *cfg.args]
        env = dict(cfg.envs)
        self.started.append(argv)
        self.envs.append(env)
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        try:
            process = await LocalProcess.start(
                argv,
                cwd=cfg.cwd or None,
                env=env,
                on_stdout=lambda b: queue.put_nowait(("stdout", b)),
                on_stderr=lambda b: queue.put_nowait(("stderr", b)),
                text=False,
            )
        except OSError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"cannot start {argv[0]}: {exc}") from exc
        if not request.stdin:
            process.close_stdin()
        self.processes[process.pid] = process
        yield _event("start", process_pb.ProcessEvent.StartEvent(pid=process.pid))
        ended = asyncio.ensure_future(process.go_exit_code())
        try:
            while True:
                item = asyncio.ensure_future(queue.get())
                await asyncio.wait({item, ended}, return_when=asyncio.FIRST_COMPLETED)
                if not item.done():
                    item.cancel()
                    break
                name, data = item.result()
                yield _event("data", process_pb.ProcessEvent.DataEvent(output=Oneof(name, data)))
            while not queue.empty():  # what arrived with the exit
                name, data = queue.get_nowait()
                yield _event("data", process_pb.ProcessEvent.DataEvent(output=Oneof(name, data)))
            code = ended.result()
            yield _event(
                "end",
                process_pb.ProcessEvent.EndEvent(
                    exit_code=code, exited=code >= 0, status=f"exit status {code}"
                ),
            )
        finally:
            self.processes.pop(process.pid, None)

    def _find(self, selector: Any) -> LocalProcess:
        pid = selector.selector.value if selector is not None else None
        process = self.processes.get(pid)
        if process is None:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        return process

    async def send_input(self, request: Any, ctx: Any) -> process_pb.SendInputResponse:
        process = self._find(request.process)
        await process.write(request.input.input.value)
        return process_pb.SendInputResponse()

    async def send_signal(self, request: Any, ctx: Any) -> process_pb.SendSignalResponse:
        process = self._find(request.process)
        with_signal = _SIGNALS.get(int(request.signal.value), signal.SIGKILL)
        try:
            os.kill(process.pid, with_signal)
        except ProcessLookupError:
            pass
        return process_pb.SendSignalResponse()

    async def close_stdin(self, request: Any, ctx: Any) -> process_pb.CloseStdinResponse:
        self._find(request.process).close_stdin()
        return process_pb.CloseStdinResponse()

    def kill_all(self) -> None:
        for process in list(self.processes.values()):
            process.kill()


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _respond(send: Any, status: int, body: bytes, ctype: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", ctype.encode()), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _files(scope: Any, receive: Any, send: Any) -> None:
    """``GET /files?path=`` returns the bytes; ``POST /files?path=`` (multipart or
    octet-stream) writes them, answering with the SDK's list of written entries."""
    query = parse_qs(scope.get("query_string", b"").decode())
    path = (query.get("path") or [""])[0]
    if scope["method"] == "GET":
        try:
            data = Path(path).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            body = json.dumps({"code": 404, "message": f"path '{path}' does not exist"})
            await _respond(send, 404, body.encode(), "application/json")
            return
        await _respond(send, 200, data, "application/octet-stream")
        return
    body = await _read_body(receive)
    headers = dict(scope["headers"])
    ctype = headers.get(b"content-type", b"").decode()
    written: list[tuple[str, bytes]] = []
    if ctype.startswith("multipart/"):
        message = BytesParser(policy=HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body
        )
        for part in message.iter_parts():
            written.append((path or part.get_filename(), part.get_payload(decode=True) or b""))
    else:
        written.append((path, body))
    entries = []
    for target, data in written:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(data)
        entries.append({"name": Path(target).name, "type": "file", "path": target})
    await _respond(send, 200, json.dumps(entries).encode(), "application/json")


def make_app(service: FakeProcessService) -> Any:
    """The ASGI app: the generated connect-rpc server for ``process.Process`` plus the HTTP
    routes."""
    rpc = process_connect.ProcessASGIApplication(service)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if path.startswith("/process.Process/"):
            await rpc(scope, receive, send)
        elif path == "/files":
            await _files(scope, receive, send)
        elif path == "/health":
            await _respond(send, 204, b"", "text/plain")
        else:
            await _respond(send, 404, b"not found", "text/plain")

    return app


class FakeEnvd:
    """The fake envd served on ``127.0.0.1`` (a free port) from a background thread; use as
    a context manager. ``url`` is what ``E2B_SANDBOX_URL`` should be."""

    def __init__(self) -> None:
        import uvicorn

        self.service = FakeProcessService()
        config = uvicorn.Config(
            make_app(self.service),
            host="127.0.0.1",
            port=0,
            lifespan="off",
            log_level="warning",
            http="h11",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-envd", daemon=True)
        self.url = ""

    def __enter__(self) -> FakeEnvd:
        self._thread.start()
        for _ in range(400):
            if self._server.started:
                break
            self._thread.join(0.025)
        if not self._server.started:
            raise RuntimeError("the fake envd did not start")
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.service.kill_all()
        self._server.should_exit = True
        self._thread.join(10)


_shared: FakeEnvd | None = None
_shared_lock = threading.Lock()


def shared_envd() -> FakeEnvd:
    """One fake envd for the whole test session (started on first use, stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            import atexit

            _shared = FakeEnvd().__enter__()
            atexit.register(_shared.__exit__, None, None, None)
        return _shared

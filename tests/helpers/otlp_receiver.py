"""An in-process OTLP/HTTP traces receiver on 127.0.0.1: decodes each POST to ``/v1/traces``
(protobuf, as the OTLP exporter sends it) into plain span dicts."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    """Use as a context manager; ``endpoint`` is the traces URL, ``spans`` what arrived
    (``{"name", "trace_id", "span_id", "parent_span_id" (hex, "" for a root), "kind",
    "start_ns", "end_ns", "status_code", "attributes", "resource"}``). ``status``: the HTTP
    status to answer with (200 accepts)."""

    def __init__(self, status: int = 200) -> None:
        self.spans: list[dict[str, Any]] = []
        self.status = status
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if receiver.status == 200 and self.path == "/v1/traces":
                    receiver._take(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                else:
                    reply = b"refused"
                    self.send_response(receiver.status if receiver.status != 200 else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(
                        {
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "kind": s.kind,
                            "start_ns": s.start_time_unix_nano,
                            "end_ns": s.end_time_unix_nano,
                            "status_code": s.status.code,
                            "attributes": {a.key: _value(a.value) for a in s.attributes},
                            "resource": resource,
                        }
                    )
        with self.arrived:
            self.spans.extend(found)
            self.arrived.notify_all()

    def wait_for(self, count: int, trace_of: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The spans of the trace whose root span is run ``trace_of``, once ``count`` of
        them arrived.

        Raises:
            TimeoutError: fewer arrived in ``timeout`` seconds.
        """

        def of_trace() -> list[dict[str, Any]]:
            roots = {
                s["trace_id"]
                for s in self.spans
                if s["attributes"].get("rlmd.run.id") == trace_of and not s["parent_span_id"]
            }
            return [s for s in self.spans if s["trace_id"] in roots]

        with self.arrived:
            if not self.arrived.wait_for(lambda: len(of_trace()) >= count, timeout):
                raise TimeoutError(f"{len(of_trace())} of {count} spans arrived")
            return of_trace()

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

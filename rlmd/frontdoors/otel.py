"""A stored trajectory as OpenTelemetry spans (GenAI semantic conventions), sent over
OTLP/HTTP: ``rlmd export RUN --format otlp`` and the daemon's live exporter
(``rlmd serve --otlp-endpoint URL``).

One span per run, iteration, model call and cell, and per child run (under the cell that
started it), with the tree's parent links, start and end times:

==============  ======================  =========================================================
tree node       span name               attributes (besides ``rlmd.*`` ids, kind, status)
==============  ======================  =========================================================
run             ``invoke_agent rlmd``   ``gen_ai.operation.name=invoke_agent``, agent id (the run
                                        id), conversation id (the root run id), request model,
                                        usage tokens of the run's own model calls, ``rlmd.cost_usd``
iteration       ``iteration N``         ``rlmd.iteration.index``
model call      ``chat MODEL``          ``gen_ai.operation.name=chat``, request/response model,
                                        usage tokens, finish reasons, ``rlmd.cost_usd``, role
cell            ``execute_tool repl``   ``gen_ai.operation.name=execute_tool``, tool name and call id
==============  ======================  =========================================================

Prompts, outputs, questions, answers and code are only attached with ``content=True``
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments`` /
``result``, ``rlmd.question`` / ``rlmd.answer``). Span and trace ids are derived from the
run and node ids, so exporting a run twice sends the same ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

import rlmd
from rlmd.urls import http_url_problem, shown_url

log = logging.getLogger("rlmd.otel")

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
SCOPE = InstrumentationScope("rlmd", rlmd.__version__)
#: run statuses that are failures (a budget stop or a cancel is not an error)
FAILED = ("failed", "sandbox_failed", "interrupted")


def _id(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big")
    return value or 1  # an all-zero id is invalid


def _ns(ts: float | None) -> int | None:
    return None if ts is None else int(ts * 1e9)


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    """Attributes without ``None`` values (OTLP has no null)."""
    return {k: v for k, v in values.items() if v is not None}


class _Builder:
    def __init__(self, root: dict[str, Any], content: bool, resource: Resource) -> None:
        self.trace_id = _id(root["root_run_id"] or root["id"], 16)
        self.content = content
        self.resource = resource

    def context(self, key: str) -> SpanContext:
        return SpanContext(self.trace_id, _id(key, 8), False, TraceFlags(TraceFlags.SAMPLED))

    def span(
        self,
        name: str,
        key: str,
        parent: str | None,
        item: dict[str, Any],
        attributes: dict[str, Any],
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        status: Status | None = None,
    ) -> ReadableSpan:
        start = _ns(item.get("started_at"))
        end = _ns(item.get("finished_at")) or start  # interrupted: what was recorded
        return ReadableSpan(
            name,
            context=self.context(key),
            parent=self.context(parent) if parent else None,
            resource=self.resource,
            attributes=_attrs(attributes),
            kind=kind,
            status=status or Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=SCOPE,
        )

    def run(self, run: dict[str, Any], parent: str | None) -> Iterator[ReadableSpan]:
        status = run.get("status")
        yield self.span(
            "invoke_agent rlmd",
            run["id"],
            parent,
            run,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "rlmd",
                "gen_ai.agent.id": run["id"],
                "gen_ai.conversation.id": run.get("root_run_id") or run["id"],
                "gen_ai.request.model": run.get("root_model"),
                "gen_ai.usage.input_tokens": run.get("input_tokens"),
                "gen_ai.usage.output_tokens": run.get("output_tokens"),
                "rlmd.cost_usd": run.get("cost_usd"),
                "rlmd.run.id": run["id"],
                "rlmd.run.depth": run.get("depth"),
                "rlmd.run.status": status,
                "rlmd.run.iterations": run.get("iterations"),
                "rlmd.run.answer_source": run.get("answer_source"),
                "rlmd.sub_model": run.get("sub_model"),
                "rlmd.workspace": run.get("workspace"),
                "rlmd.question": run.get("question") if self.content else None,
                "rlmd.answer": run.get("answer") if self.content else None,
            },
            status=Status(StatusCode.ERROR, run.get("error") or status)
            if status in FAILED
            else None,
        )
        for node in run.get("nodes") or []:
            yield from self.node(node, run["id"])
        for child in run.get("runs") or []:  # child runs whose cell is unknown
            yield from self.run(child, run["id"])

    def node(self, node: dict[str, Any], parent: str) -> Iterator[ReadableSpan]:
        kind, data = node.get("kind"), node.get("data") or {}
        common = {"rlmd.node.id": node["id"], "rlmd.node.kind": kind, "rlmd.run.id": node["run_id"]}
        failed = node.get("status") not in (None, "ok")
        error = (
            Status(StatusCode.ERROR, data.get("error") or node.get("status")) if failed else None
        )
        if kind == "model_call":
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": node.get("model"),
                "gen_ai.response.model": node.get("model"),
                "gen_ai.usage.input_tokens": node.get("input_tokens"),
                "gen_ai.usage.output_tokens": node.get("output_tokens"),
                "gen_ai.response.finish_reasons": [data["finish_reason"]]
                if data.get("finish_reason")
                else None,
                "rlmd.cost_usd": node.get("cost_usd"),
                "rlmd.model_call.role": node.get("role"),
            }
            if self.content:
                attrs["gen_ai.input.messages"] = json.dumps(data.get("messages") or [])
                attrs["gen_ai.output.messages"] = json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": data.get("response", "")}],
                        }
                    ]
                )
            name, span_kind = f"chat {node.get('model')}", SpanKind.CLIENT
        elif kind == "cell":
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "repl",
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": node["id"],
            }
            if self.content:
                attrs["gen_ai.tool.call.arguments"] = data.get("code")
                attrs["gen_ai.tool.call.result"] = (data.get("stdout") or "") + (
                    data.get("stderr") or ""
                )
            name, span_kind = "execute_tool repl", SpanKind.INTERNAL
            error = Status(StatusCode.ERROR, data["error"]) if data.get("error") else error
        elif kind == "iteration":
            attrs = {"rlmd.iteration.index": data.get("index")}
            name, span_kind = f"iteration {data.get('index', 0)}", SpanKind.INTERNAL
        else:
            attrs, name, span_kind = {}, str(kind), SpanKind.INTERNAL
        yield self.span(
            name, node["id"], parent, node, common | attrs, kind=span_kind, status=error
        )
        for child in node.get("children") or []:
            yield from self.node(child, node["id"])
        for run in node.get("runs") or []:
            yield from self.run(run, node["id"])


def tree_spans(tree: dict[str, Any], *, content: bool = False) -> list[ReadableSpan]:
    """The spans of a stored run tree (:meth:`rlmd.store.Store.tree`'s shape), parents
    before children. ``content``: attach prompts, outputs, questions, answers and code."""
    resource = Resource.create({"service.name": "rlmd", "service.version": rlmd.__version__})
    return list(_Builder(tree, content, resource).run(tree, None))


def check_endpoint(url: str, name: str) -> str:
    """``url`` if it can be an OTLP/HTTP traces URL: ``http://`` or ``https://``, a host, a
    port (if any) from 1 to 65535, no blanks or control characters.

    Args:
        name: where the URL came from, for the message (``"--endpoint"``).

    Raises:
        ValueError: it cannot (``not a url``, ``ftp://...``, ``http://[::1``, port 99999, an
            empty string); the message names ``name`` and the URL, its password hidden.
    """
    problem = http_url_problem(url)
    if problem:
        raise ValueError(
            f"{name}: {shown_url(url)!r} {problem}; give the traces URL of an OTLP/HTTP "
            f"receiver, such as {DEFAULT_ENDPOINT}"
        )
    return url


def traces_endpoint(endpoint: str | None = None, name: str = "--endpoint") -> str:
    """The traces URL to send to, checked (:func:`check_endpoint`): ``endpoint``; ``None``:
    ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``$OTEL_EXPORTER_OTLP_ENDPOINT`` +
    ``/v1/traces``, else :data:`DEFAULT_ENDPOINT` (the OpenTelemetry SDK's rule).

    Raises:
        ValueError: the URL cannot be one, naming ``name`` or the environment variable.
    """
    if endpoint is not None:
        return check_endpoint(endpoint, name)
    if url := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return check_endpoint(url, "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if url := os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        check_endpoint(url, "$OTEL_EXPORTER_OTLP_ENDPOINT")
        return f"{url.removesuffix('/')}/v1/traces"
    return DEFAULT_ENDPOINT


def export_tree(
    tree: dict[str, Any],
    endpoint: str | None = None,
    *,
    content: bool = False,
    timeout_s: float = 10.0,
) -> int:
    """Send a run tree's spans to an OTLP/HTTP receiver; returns how many were sent.

    Args:
        endpoint: the traces URL (``http://host:4318/v1/traces``); ``None``: the
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
            environment variables, else :data:`DEFAULT_ENDPOINT` (:func:`traces_endpoint`).

    Raises:
        ValueError: the endpoint is not an http(s) URL with a host (nothing was sent).
        ConnectionError: the receiver did not accept them (unreachable, or an error status).
    """
    url = traces_endpoint(endpoint)
    spans = tree_spans(tree, content=content)
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
    try:
        if exporter.export(spans) is not SpanExportResult.SUCCESS:
            raise ConnectionError(
                f"the OTLP receiver at {shown_url(url)} did not accept the spans (see the log "
                "above)"
            )
    finally:
        exporter.shutdown()
    return len(spans)


class LiveExporter:
    """A daemon hub subscriber that sends each task's run tree as spans when the task ends
    (a run's spans are complete only then), from one background thread so the daemon never
    waits on the receiver. Failures are logged, never raised.

    A receiver that does not answer costs each export its ``timeout_s``: at most
    :attr:`QUEUE_LIMIT` traces wait (a newer one is dropped, with a log line), and
    :meth:`close` waits for them at most ``close_timeout_s``. (The daemon's stop waited for
    every queued export in turn: five tasks against a receiver that accepted connections
    and never answered held ``SIGTERM`` for 44 s.)
    """

    detail = "none"  # no run events: the finished task status is enough
    QUEUE_LIMIT = 256

    def __init__(
        self,
        tree_of: Callable[[str], dict[str, Any]],
        endpoint: str,
        *,
        content: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        self.tree_of = tree_of
        self.endpoint = endpoint
        self.content = content
        self.exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
        self.sent = 0
        self.dropped = 0
        self._queue: queue.Queue[list[ReadableSpan] | None] = queue.Queue(self.QUEUE_LIMIT)
        # a daemon thread: an export in flight never holds the process's exit
        self._thread = threading.Thread(target=self._work, name="otlp", daemon=True)
        self._thread.start()

    def deliver(self, method: str, params: dict[str, Any], data: bytes) -> None:
        if method != "rlmd/taskStatus" or params.get("state") != "finished":
            return
        try:
            spans = tree_spans(self.tree_of(params["run_id"]), content=self.content)
        except (KeyError, ValueError):  # no run was recorded
            return
        try:
            self._queue.put_nowait(spans)
        except queue.Full:
            self.dropped += 1
            log.warning(
                "%d traces wait for the OTLP receiver at %s: the trace of run %s is dropped",
                self.QUEUE_LIMIT,
                shown_url(self.endpoint),
                params["run_id"],
            )

    def _work(self) -> None:
        while (spans := self._queue.get()) is not None:
            try:
                self._send(spans)
            finally:
                self._queue.task_done()  # until then the queue counts it as unfinished
        self._queue.task_done()

    def _send(self, spans: list[ReadableSpan]) -> None:
        try:
            if self.exporter.export(spans) is SpanExportResult.SUCCESS:
                self.sent += len(spans)
            else:
                log.warning(
                    "the OTLP receiver at %s refused %d spans", shown_url(self.endpoint), len(spans)
                )
        except Exception:
            log.exception("exporting spans to %s failed", shown_url(self.endpoint))

    def close(self, timeout_s: float = 5.0) -> int:
        """Send what is queued, waiting at most ``timeout_s`` seconds, then stop; returns how
        many traces were not sent (queued, or in flight to a receiver that did not answer;
        one log line says so)."""
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and self._queue.unfinished_tasks:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(0.05, left))
        unsent = 0
        while True:
            try:
                if self._queue.get_nowait() is not None:
                    unsent += 1
                self._queue.task_done()
            except queue.Empty:
                break
        unsent += self._queue.unfinished_tasks  # the export in flight, if any
        if unsent:
            log.warning(
                "%d traces were not sent: the OTLP receiver at %s did not take them in %.0f s",
                unsent,
                shown_url(self.endpoint),
                timeout_s,
            )
        with contextlib.suppress(queue.Full):  # the worker stops after the export in flight
            self._queue.put_nowait(None)
        self.exporter.shutdown()
        return unsent

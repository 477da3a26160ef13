"""OpenTelemetry export end to end: ``rlmd export --format otlp`` and the daemon's live
exporter send spans to a real OTLP/HTTP receiver started here; the span tree must equal the
stored tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.server import CELLS, Daemon, make_project, question, run_to_end

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from helpers.otlp_receiver import OtlpReceiver  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CELLS_DEPTH_2 = (
    "x = llm_query('hi')\nprint(x)",
    "y = rlm_query('sub question')\nprint(y)",
    "FINAL('all ' + y)",
)


def stored_edges(tree: dict) -> dict[str, tuple[str | None, str]]:
    """Every run and node of a stored tree: its id → (the id it hangs under, what it is)."""
    out: dict[str, tuple[str | None, str]] = {}

    def run(r: dict, parent: str | None) -> None:
        out[r["id"]] = (parent, "run")
        for n in r.get("nodes") or []:
            node(n, r["id"])
        for child in r.get("runs") or []:
            run(child, r["id"])

    def node(n: dict, parent: str) -> None:
        out[n["id"]] = (parent, n["kind"])
        for c in n.get("children") or []:
            node(c, n["id"])
        for child in n.get("runs") or []:
            run(child, n["id"])

    run(tree, None)
    return out


def span_edges(spans: list[dict]) -> dict[str, tuple[str | None, str]]:
    """The same, read from the spans (each names its run or node in ``rlmd.*`` attributes)."""

    def key(s: dict) -> str:
        return s["attributes"].get("rlmd.node.id") or s["attributes"]["rlmd.run.id"]

    by_span = {s["span_id"]: key(s) for s in spans}
    return {
        key(s): (
            by_span.get(s["parent_span_id"]) if s["parent_span_id"] else None,
            s["attributes"].get("rlmd.node.kind") or "run",
        )
        for s in spans
    }


def assert_spans_match(spans: list[dict], tree: dict) -> None:
    expected = stored_edges(tree)
    assert len(spans) == len(expected)  # one span per run and node, none twice
    assert span_edges(spans) == expected
    assert len({s["trace_id"] for s in spans}) == 1
    by_key = {
        s["attributes"].get("rlmd.node.id") or s["attributes"]["rlmd.run.id"]: s for s in spans
    }

    def check(r: dict) -> None:
        span = by_key[r["id"]]
        assert span["name"] == "invoke_agent rlmd"
        assert span["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert span["attributes"]["rlmd.run.depth"] == r["depth"]
        assert span["start_ns"] == int(r["started_at"] * 1e9)
        for n in walk(r):
            s = by_key[n["id"]]
            assert s["start_ns"] == int(n["started_at"] * 1e9) <= s["end_ns"]
            if n["kind"] == "model_call":
                assert s["name"] == f"chat {n['model']}"
                assert s["attributes"]["gen_ai.usage.input_tokens"] == n["input_tokens"]
                assert s["attributes"]["gen_ai.usage.output_tokens"] == n["output_tokens"]
                assert s["attributes"]["gen_ai.request.model"] == n["model"]
            if n["kind"] == "cell":
                assert s["attributes"]["gen_ai.operation.name"] == "execute_tool"
            for child in n.get("runs") or []:
                check(child)

    check(tree)


def walk(run: dict):
    todo = list(run.get("nodes") or [])
    while todo:
        n = todo.pop()
        yield n
        todo.extend(n.get("children") or [])


CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"}
CONTENT_KEYS |= {"rlmd.question", "rlmd.answer", "gen_ai.tool.call.result"}


async def depth_2_run(daemon, project) -> dict:
    """Run a task with a sub-call and a child run; its stored tree."""
    client = await daemon.client()
    try:
        params = {"workspace": str(project), "question": question(*CELLS_DEPTH_2)}
        status = await run_to_end(client, {**params, "models": {"root": CELLS}})
        got = await client.command("rlmd.runs.get", {"run_id": status["run_id"], "tree": True})
        return got["tree"]
    finally:
        await client.close()


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, receiver):
    home = tmp_path_factory.mktemp("home")
    d = Daemon(home, "--idle-timeout", "0", "--otlp-endpoint", receiver.endpoint).start()
    yield d
    d.stop()


async def test_live_exporter_sends_each_finished_run_as_its_tree(daemon, receiver, tmp_path):
    tree = await depth_2_run(daemon, make_project(tmp_path))
    count = len(stored_edges(tree))
    spans = receiver.wait_for(count, tree["id"])
    assert_spans_match(spans, tree)
    assert {d for d in (s["attributes"].get("rlmd.run.depth") for s in spans) if d is not None} == {
        0,
        1,
    }
    assert spans[0]["resource"]["service.name"] == "rlmd"
    # prompts and outputs stay out unless asked for
    assert not any(CONTENT_KEYS & set(s["attributes"]) for s in spans)


async def test_export_command_sends_the_stored_tree_and_content_only_on_opt_in(daemon, tmp_path):
    tree = await depth_2_run(daemon, make_project(tmp_path))
    env = {**os.environ, "RLMD_HOME": str(daemon.home)}

    def export(*extra: str, receiver: OtlpReceiver) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "rlmd",
                "export",
                tree["id"][:10],
                "--format",
                "otlp",
                "--endpoint",
                receiver.endpoint,
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    with OtlpReceiver() as plain:
        done = export(receiver=plain)
        assert done.returncode == 0, done.stderr
        assert f"sent {len(stored_edges(tree))} spans" in done.stderr
        assert_spans_match(plain.spans, tree)
        assert not any(CONTENT_KEYS & set(s["attributes"]) for s in plain.spans)

    with OtlpReceiver() as full:
        assert export("--include-content", receiver=full).returncode == 0
        assert_spans_match(full.spans, tree)
        root = next(
            s
            for s in full.spans
            if s["attributes"].get("rlmd.run.id") == tree["id"]
            and "rlmd.node.id" not in s["attributes"]
        )
        assert root["attributes"]["rlmd.answer"] == "all done"
        calls = [s for s in full.spans if s["name"].startswith("chat ")]
        first = json.loads(calls[0]["attributes"]["gen_ai.input.messages"])
        assert first and all("role" in m for m in first)
        cells = [s for s in full.spans if s["name"] == "execute_tool repl"]
        assert any(
            "rlm_query('sub question')" in s["attributes"]["gen_ai.tool.call.arguments"]
            for s in cells
        )

    with OtlpReceiver(status=400) as refusing:
        done = export(receiver=refusing)
        assert done.returncode == 1 and "did not accept" in done.stderr


@pytest.mark.parametrize(
    "url, why",
    [
        ("not a url", "is not an http:// or https:// URL"),
        ("", "is not an http:// or https:// URL"),
        ("localhost:4318", "is not an http:// or https:// URL"),
        ("ftp://h/v1/traces", "is not an http:// or https:// URL"),
        ("http:///v1/traces", "names no host"),
        ("http://h:0/v1/traces", "names port 0"),
        ("http://h:99999/v1/traces", "has a host or port that cannot be read (Port out of range"),
        ("http://[::1/v1/traces", "has a host or port that cannot be read (Invalid IPv6 URL)"),
        ("http://h/v1 traces", "holds a blank or a control character"),
    ],
)
def test_an_endpoint_that_is_no_receiver_url_is_refused_before_sending(url, why, tmp_path):
    """A new user's walk (review16): ``rlmd export --format otlp --endpoint 'not a url'``
    (or ``ftp://``, port 99999, ``''``: the default endpoint) tried to send and said "the
    OTLP receiver at not a url did not accept the spans" (exit 1); ``rlmd serve
    --otlp-endpoint 'not a url'`` started and logged a failure at every task's end."""
    from rlmd.frontdoors.otel import export_tree

    with pytest.raises(ValueError) as info:
        export_tree({}, url)  # nothing is built or sent
    assert str(info.value).startswith(f"--endpoint: {url!r} {why}")
    assert "such as http://localhost:4318/v1/traces" in str(info.value)
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "serve", "--otlp-endpoint", url, "--idle-timeout", "1"],
        env={**os.environ, "RLMD_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"rlmd serve: --otlp-endpoint (or $RLMD_OTLP_ENDPOINT): {url!r} {why}" in done.stderr


def test_the_endpoint_from_the_environment_is_checked_and_named(monkeypatch):
    from rlmd.frontdoors.otel import DEFAULT_ENDPOINT, export_tree, traces_endpoint

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert traces_endpoint() == DEFAULT_ENDPOINT
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert traces_endpoint() == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(ValueError, match=r"^\$OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318'"):
        export_tree({})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/v1/traces")
    assert traces_endpoint() == "http://t:4318/v1/traces"


def test_a_password_in_the_endpoint_is_not_printed():
    from rlmd.frontdoors.otel import check_endpoint, shown_url

    assert shown_url("http://u:s3cret@h:4318/v1/traces") == "http://u:***@h:4318/v1/traces"
    with pytest.raises(ValueError) as info:
        check_endpoint("http://u:s3cret@h:0/v1/traces", "--endpoint")
    assert "s3cret" not in str(info.value)


TREE = {"id": "r1", "root_run_id": "r1", "status": "completed", "question": "q"}
TREE |= {"started_at": 1.0, "finished_at": 2.0, "nodes": [], "runs": []}


def test_a_receiver_that_never_answers_does_not_hold_the_daemons_stop(caplog):
    """A new user's walk (review16): with a receiver that accepts connections and never
    answers, the daemon's stop waited for every queued export in turn (10 s each: five
    tasks held SIGTERM for 44 s). Closing now waits a bounded time and says how many
    traces were not sent; the export in flight runs on a daemon thread."""
    import socket

    from rlmd.frontdoors.otel import LiveExporter

    hole = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
    try:
        url = f"http://127.0.0.1:{hole.getsockname()[1]}/v1/traces"
        exporter = LiveExporter(lambda run_id: TREE, url, timeout_s=60)
        for n in range(4):
            exporter.deliver("rlmd/taskStatus", {"state": "finished", "run_id": f"r{n}"}, b"")
        assert exporter._thread.daemon
        assert exporter.close(timeout_s=0.2) == 4
        assert "4 traces were not sent: the OTLP receiver at " + url in caplog.text
    finally:
        hole.close()


def test_the_content_switch_from_the_environment_takes_on_and_off_words(monkeypatch, tmp_path):
    """Review18: ``RLMD_OTLP_CONTENT`` was on only for ``1``: ``true`` (or a typo) sent spans
    without the content asked for, without a word. On/off words are taken; anything else
    stops ``rlmd serve`` with one line naming the variable."""
    import subprocess
    import sys

    from rlmd.cli.serve import _env_switch

    for value, on in (("1", True), ("TRUE", True), ("yes", True), ("0", False), ("off", False)):
        monkeypatch.setenv("RLMD_OTLP_CONTENT", value)
        assert _env_switch("RLMD_OTLP_CONTENT") is on
    monkeypatch.delenv("RLMD_OTLP_CONTENT")
    assert _env_switch("RLMD_OTLP_CONTENT") is False
    env = {**os.environ, "RLMD_HOME": str(tmp_path), "RLMD_OTLP_CONTENT": "ture"}
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "rlmd serve: $RLMD_OTLP_CONTENT must be 1 or 0 (on or off), got 'ture'" in done.stderr

"""OpenAI and Anthropic providers against real HTTP servers on 127.0.0.1 (no network)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import rlmd
from helpers.http_server import (
    FakeServer,
    Reply,
    anthropic_reply,
    error_reply,
    openai_reply,
)

from rlmd.models import ModelError, ModelNotAvailable, ModelSpec
from rlmd.models.anthropic import AnthropicModel, to_anthropic
from rlmd.models.openai import DUMMY_KEY, OpenAIModel


@pytest.fixture
def openai_server() -> Iterator[FakeServer]:
    server = FakeServer(lambda request: openai_reply())
    yield server
    server.close()


@pytest.fixture
def anthropic_server() -> Iterator[FakeServer]:
    server = FakeServer(lambda request: anthropic_reply())
    yield server
    server.close()


KEY_ENV = "RLMD_TEST_CREDENTIAL"  # a name redact() would not guess


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "rlmdtest" + secrets.token_hex(16)  # no sk- shape: only explicit redaction hides it
    monkeypatch.setenv(KEY_ENV, value)
    return value


def openai_spec(server: FakeServer, **kw: Any) -> ModelSpec:
    base = {
        "name": "fake-openai",
        "provider": "openai",
        "model": "m",
        "base_url": f"http://127.0.0.1:{server.port}/v1",
        "api_key_env": KEY_ENV,
        "price_input": 2.0,
        "price_output": 8.0,
        "timeout_s": 5.0,
        "max_retries": 3,
        "options": {"retry_base_delay_s": 0.01},
    }
    base.update(kw)
    return ModelSpec(**base)


def anthropic_spec(server: FakeServer, **kw: Any) -> ModelSpec:
    base = {
        "name": "fake-claude",
        "provider": "anthropic",
        "model": "claude-test",
        "base_url": f"http://127.0.0.1:{server.port}",
        "api_key_env": KEY_ENV,
        "price_input": 3.0,
        "price_output": 15.0,
        "timeout_s": 5.0,
        "max_retries": 3,
        "options": {"retry_base_delay_s": 0.01},
    }
    base.update(kw)
    return ModelSpec(**base)


def anthropic_key(request: dict[str, Any]) -> str:
    """The key as sent: ``x-api-key``, or ``Authorization: Bearer`` (newer SDKs)."""
    headers = request["headers"]
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


def all_text(exc: BaseException) -> str:
    """Everything a log could show about an exception."""
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args)


USER = [{"role": "user", "content": "hi"}]

# ----------------------------------------------------------------------------- OpenAI


async def test_openai_usage_cost_and_request(openai_server: FakeServer, key: str) -> None:
    model = OpenAIModel(openai_spec(openai_server, sampling={"temperature": 0}))
    try:
        c = await model.complete(USER, max_tokens=50)
    finally:
        await model.aclose()
    assert (c.text, c.input_tokens, c.output_tokens) == ("hello", 11, 7)
    assert c.cost_usd == pytest.approx((11 * 2.0 + 7 * 8.0) / 1e6)
    assert c.finish_reason == "stop" and c.model == "fake-openai" and c.latency_s > 0
    (request,) = openai_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {key}"
    assert request["body"]["messages"] == USER
    assert request["body"]["max_tokens"] == 50  # OpenAI-compatible servers take max_tokens
    assert request["body"]["temperature"] == 0
    assert request["body"]["model"] == "m"


async def test_models_on_one_server_share_one_client_until_the_last_closes(
    openai_server: FakeServer, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root and its sub-model on one server use one ``AsyncOpenAI`` (making one costs
    ~47 ms); it is closed with the last of them, and another key gets its own."""
    root = OpenAIModel(openai_spec(openai_server, name="root", model="big"))
    sub = OpenAIModel(openai_spec(openai_server, name="sub", model="small"))
    other = OpenAIModel(openai_spec(openai_server, name="other", api_key_env="RLMD_OTHER_KEY"))
    monkeypatch.setenv("RLMD_OTHER_KEY", "another-key")
    try:
        for model in (root, sub, other):
            assert (await model.complete(USER, max_tokens=5)).text == "hello"
        assert root._client is sub._client and other._client is not root._client
        shared = root._client
        await root.aclose()
        assert not shared.is_closed() and (await sub.complete(USER, max_tokens=5)).text == "hello"
        await sub.aclose()
        assert shared.is_closed()
    finally:
        for model in (root, sub, other):
            await model.aclose()
    assert [r["body"]["model"] for r in openai_server.requests] == ["big", "small", "m", "small"]
    assert openai_server.requests[2]["headers"]["authorization"] == "Bearer another-key"


async def test_anthropic_models_on_one_server_share_one_client_too(
    anthropic_server: FakeServer, key: str
) -> None:
    root = AnthropicModel(anthropic_spec(anthropic_server, name="root", model="big"))
    sub = AnthropicModel(anthropic_spec(anthropic_server, name="sub", model="small"))
    try:
        for model in (root, sub):
            assert (await model.complete(USER, max_tokens=5)).text == "hello"
        assert root._client is sub._client
        shared = root._client
        await root.aclose()
        assert not shared.is_closed() and (await sub.complete(USER, max_tokens=5)).text == "hello"
        await sub.aclose()
        assert shared.is_closed()
    finally:
        await root.aclose()
        await sub.aclose()
    assert [r["body"]["model"] for r in anthropic_server.requests] == ["big", "small", "small"]


async def test_a_calls_own_sampling_goes_over_the_specs(
    openai_server: FakeServer, anthropic_server: FakeServer, key: str
) -> None:
    """The engine's re-sample of a repeated turn: temperature and seed for one call only;
    Anthropic's Messages API takes neither, so they are not sent there."""
    resample = {"temperature": 0.7, "seed": 1}
    model = OpenAIModel(openai_spec(openai_server, sampling={"temperature": 0, "top_p": 0.9}))
    claude = AnthropicModel(anthropic_spec(anthropic_server))
    try:
        await model.complete(USER, sampling=resample)
        await model.complete(USER)
        await claude.complete(USER, sampling=resample)
    finally:
        await model.aclose()
        await claude.aclose()
    first, second = (r["body"] for r in openai_server.requests)
    assert (first["temperature"], first["seed"], first["top_p"]) == (0.7, 1, 0.9)
    assert second["temperature"] == 0 and "seed" not in second  # the spec's again
    (sent,) = (r["body"] for r in anthropic_server.requests)
    assert "temperature" not in sent and "seed" not in sent


async def test_sampling_keys_the_sdk_has_no_parameter_for_reach_the_server(
    openai_server: FakeServer, key: str
) -> None:
    """``top_k``, ``min_p``, ``repeat_penalty`` (vLLM's, llama.cpp server's): every call
    raised ``TypeError: create() got an unexpected keyword argument 'top_k'`` before."""
    extras = {"top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1}
    model = OpenAIModel(openai_spec(openai_server, sampling={"temperature": 0, **extras}))
    try:
        assert (await model.complete(USER, max_tokens=5, stop=["END"])).text == "hello"
        await model.complete(USER, max_tokens=5, sampling={"top_k": 40})
    finally:
        await model.aclose()
    first, second = (r["body"] for r in openai_server.requests)
    assert {k: first[k] for k in extras} == extras and first["temperature"] == 0
    assert (first["max_tokens"], first["stop"], first["messages"]) == (5, ["END"], USER)
    assert second["top_k"] == 40 and second["min_p"] == 0.05  # the call's over the spec's


async def test_openai_without_usage_counts_tokens(openai_server: FakeServer, key: str) -> None:
    openai_server.replies.append(openai_reply("x" * 40, usage=False))
    model = OpenAIModel(openai_spec(openai_server))
    c = await model.complete(USER)
    await model.aclose()
    assert c.output_tokens == model.count_tokens("x" * 40) > 0
    assert c.input_tokens == model.count_messages(USER)
    assert c.cost_usd == pytest.approx(model.spec.cost_usd(c.input_tokens, c.output_tokens))


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "ten", "completion_tokens": None},  # was TypeError: can't multiply
        {"prompt_tokens": -1_000_000, "completion_tokens": -5},  # gave tokens back
        {"prompt_tokens": True, "completion_tokens": 2.5},
        # taken as is, the store could not write the call (SQLite integers end at 2**63 - 1):
        # the trajectory lost its reply, tokens and cost (review22)
        {"prompt_tokens": 10**30, "completion_tokens": 1e300},
        {"prompt_tokens": 2**63, "completion_tokens": float("inf")},
    ],
)
async def test_openai_usage_that_is_not_a_count_is_counted_locally(
    openai_server: FakeServer, key: str, usage: dict[str, Any], stream: bool
) -> None:
    status, body, headers = openai_reply("x" * 40)
    body["usage"] = {**usage, "total_tokens": 0}
    openai_server.replies.append((status, body, headers))
    model = OpenAIModel(openai_spec(openai_server, options={"stream": stream}))
    try:
        c = await model.complete(USER)
    finally:
        await model.aclose()
    assert c.text == "x" * 40
    assert (c.input_tokens, c.output_tokens) == (
        model.count_messages(USER),
        model.count_tokens("x" * 40),
    )
    assert c.cost_usd == pytest.approx(model.spec.cost_usd(c.input_tokens, c.output_tokens))
    assert openai_server.requests[0]["body"].get("stream", False) is stream


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": "ten", "output_tokens": 5},  # was TypeError out of complete()
        {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": "x"},  # the same
        {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 10**30},
        {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": -50},
    ],
)
async def test_anthropic_usage_that_is_not_a_count_is_left_out(
    anthropic_server: FakeServer, key: str, usage: dict[str, Any]
) -> None:
    """Review22: a usage field of the wrong type raised TypeError out of the call (the
    cache counts were added as they came); a count that is not one is now left out, and an
    input count that is not one is counted locally, as for OpenAI."""
    status, body, headers = anthropic_reply()
    body["usage"] = usage
    anthropic_server.replies.append((status, body, headers))
    model = AnthropicModel(anthropic_spec(anthropic_server))
    try:
        c = await model.complete(USER)
    finally:
        await model.aclose()
    assert c.text == "hello" and c.output_tokens == 5
    expected = model.count_messages(USER) if usage["input_tokens"] == "ten" else 10
    assert c.input_tokens == expected


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("hello", "its content is a str, not a list of blocks"),  # was read as no text
        (["hello"], "a content block of type str"),  # the same
        ([{"type": "text", "text": 5}], "a text block whose text is a int"),  # was TypeError
    ],
)
async def test_anthropic_content_that_is_not_text_is_an_error_naming_the_server(
    anthropic_server: FakeServer, key: str, content: Any, said: str
) -> None:
    """Review22: a content string (or a list of strings) was read as a reply with no text,
    and a text block's number failed the call with ``TypeError: sequence item 0: expected
    str instance, int found``."""
    status, body, headers = anthropic_reply()
    body["content"] = content
    anthropic_server.replies.append((status, body, headers))
    model = AnthropicModel(anthropic_spec(anthropic_server))
    try:
        with pytest.raises(ModelError, match="sent a reply that is not text") as info:
            await model.complete(USER)
    finally:
        await model.aclose()
    assert said in str(info.value) and f"127.0.0.1:{anthropic_server.port}" in str(info.value)
    assert len(anthropic_server.requests) == 1  # not retried: it answers so every time


async def test_anthropic_reads_text_past_blocks_it_does_not_know_and_odd_stop_fields(
    anthropic_server: FakeServer, key: str
) -> None:
    """Review22: ``"stop_reason": {"a": 1}`` raised ``TypeError: unhashable type: 'dict'``
    out of the call (not a ModelError); a stop sequence that is not text is none."""
    status, body, headers = anthropic_reply()
    body["content"] = [{"type": "block_of_the_future", "x": 1}, {"type": "text", "text": "ok"}]
    body["stop_reason"] = {"a": 1}
    anthropic_server.replies.append((status, body, headers))
    status, second, headers = anthropic_reply()
    second.update(stop_reason="stop_sequence", stop_sequence=5)
    anthropic_server.replies.append((status, second, headers))
    model = AnthropicModel(anthropic_spec(anthropic_server))
    try:
        first = await model.complete(USER)
        again = await model.complete(USER, stop=["END"])
    finally:
        await model.aclose()
    assert (first.text, first.finish_reason) == ("ok", None)
    assert (again.text, again.finish_reason, again.stop_sequence) == ("hello", "stop", None)


async def test_a_whole_float_count_is_taken(openai_server: FakeServer, key: str) -> None:
    status, body, headers = openai_reply()
    body["usage"] = {"prompt_tokens": 11.0, "completion_tokens": 7, "total_tokens": 18}
    openai_server.replies.append((status, body, headers))
    model = OpenAIModel(openai_spec(openai_server))
    try:
        c = await model.complete(USER)
    finally:
        await model.aclose()
    assert (c.input_tokens, c.output_tokens) == (11, 7) and type(c.input_tokens) is int


@pytest.mark.parametrize("how", ["json", "ignores stream", "streamed"])
async def test_openai_content_parts_are_read_as_their_text(
    openai_server: FakeServer, key: str, how: str
) -> None:
    """The content-parts form (``[{"type": "text", "text": ...}]``) failed the run with
    ``AttributeError: 'list' object has no attribute 'find'``."""
    status, body, headers = openai_reply()
    parts = [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}, "!"]
    body["choices"][0]["message"]["content"] = parts
    openai_server.replies.append((status, body, headers))
    openai_server.ignores_stream = how == "ignores stream"
    model = OpenAIModel(openai_spec(openai_server, options={"stream": how != "json"}))
    try:
        c = await model.complete(USER, stop=["\n```\n"])
    finally:
        await model.aclose()
    assert c.text == "hello!" and c.finish_reason == "stop"


@pytest.mark.parametrize("content", [12345, {"text": "hi"}, [{"type": "image_url"}]])
async def test_openai_content_that_is_not_text_is_an_error_naming_the_server(
    openai_server: FakeServer, key: str, content: Any
) -> None:
    status, body, headers = openai_reply()
    body["choices"][0]["message"]["content"] = content
    openai_server.replies.append((status, body, headers))
    model = OpenAIModel(openai_spec(openai_server, options={"stream": False}))
    try:
        with pytest.raises(ModelError, match="sent a reply that is not text") as info:
            await model.complete(USER)
    finally:
        await model.aclose()
    assert f"127.0.0.1:{openai_server.port}" in str(info.value)
    assert len(openai_server.requests) == 1  # not retried: it answers so every time


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ({"choices": "abc"}, "its choices are a str, not a list"),
        ({"choices": [5]}, "a choice of type int"),
        ({"choices": [{"message": "hi", "finish_reason": "stop"}]}, "a message of type str"),
        ({"events": [{"choices": "abc"}]}, "its choices are a str, not a list"),
        ({"events": [{"choices": [5]}]}, "a choice of type int"),
        ({"events": [{"choices": [{"index": 0, "delta": "hi"}]}]}, "a delta of type str"),
    ],
)
async def test_openai_choices_of_the_wrong_shape_are_an_error_naming_the_server(
    openai_server: FakeServer, key: str, reply: dict[str, Any], said: str
) -> None:
    """Review22: they failed the call with ``AttributeError: 'str' object has no attribute
    'message'`` (or ``'delta'``), naming neither the server nor what was wrong."""
    openai_server.replies.append((200, {"id": "c1", "model": "m", **reply}, {}))
    model = OpenAIModel(openai_spec(openai_server, options={"stream": "events" in reply}))
    try:
        with pytest.raises(ModelError, match="sent a reply that is not text") as info:
            await model.complete(USER)
    finally:
        await model.aclose()
    assert said in str(info.value) and f"127.0.0.1:{openai_server.port}" in str(info.value)


@pytest.mark.parametrize("stream", [True, False])
async def test_openai_a_finish_reason_that_is_not_text_is_none(
    openai_server: FakeServer, key: str, stream: bool
) -> None:
    """Review22: ``"finish_reason": {"x": 1}`` went into the trajectory as it was."""
    status, body, headers = openai_reply()
    body["choices"][0]["finish_reason"] = {"x": 1}
    openai_server.replies.append((status, body, headers))
    model = OpenAIModel(openai_spec(openai_server, options={"stream": stream}))
    try:
        c = await model.complete(USER)
    finally:
        await model.aclose()
    assert c.text == "hello" and c.finish_reason is None


async def test_openai_429_then_200_is_retried(openai_server: FakeServer, key: str) -> None:
    openai_server.replies.append((429, {"error": {"message": "slow down"}}, {"retry-after": "0"}))
    model = OpenAIModel(openai_spec(openai_server))
    c = await model.complete(USER)
    await model.aclose()
    assert c.text == "hello"
    assert len(openai_server.requests) == 2


async def test_openai_400_is_not_retried(openai_server: FakeServer, key: str) -> None:
    openai_server.replies.append(error_reply(400, "bad request: max_tokens too large"))
    model = OpenAIModel(openai_spec(openai_server, max_retries=3))
    with pytest.raises(ModelError) as info:
        await model.complete(USER)
    await model.aclose()
    assert len(openai_server.requests) == 1
    assert info.value.retryable is False and info.value.status_code == 400
    assert "max_tokens too large" in str(info.value)


async def test_openai_5xx_retries_then_gives_up(openai_server: FakeServer, key: str) -> None:
    openai_server.replies.extend([error_reply(503)] * 3)
    model = OpenAIModel(openai_spec(openai_server, max_retries=2))
    with pytest.raises(ModelError) as info:
        await model.complete(USER)
    await model.aclose()
    assert len(openai_server.requests) == 3  # 1 attempt + 2 retries
    assert info.value.retryable is True and info.value.status_code == 503
    assert "after 3 attempts" in str(info.value)


async def test_openai_timeout(openai_server: FakeServer, key: str) -> None:
    model = OpenAIModel(openai_spec(openai_server, timeout_s=0.3, max_retries=1))
    # a first reply warms the client (imports, connection): on a loaded machine a cold first
    # attempt could spend its 0.3 s before its request reached the server
    openai_server.replies.append(openai_reply("warm"))
    assert (await model.complete(USER)).text == "warm"
    openai_server.requests.clear()
    openai_server.default = lambda request: "hang"
    start = time.monotonic()
    with pytest.raises(ModelError, match="no response within 0.3 s") as info:
        await model.complete(USER)
    elapsed = time.monotonic() - start
    await model.aclose()
    assert info.value.retryable is True
    assert len(openai_server.requests) == 2
    assert elapsed >= 0.6, elapsed  # both attempts really waited their 0.3 s
    assert elapsed < 30, elapsed  # ...and gave up: only a hang takes this long


async def test_openai_connection_refused_is_retried(key: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    spec = ModelSpec(
        name="gone",
        provider="openai",
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_retries=2,
        timeout_s=5,
        options={"retry_base_delay_s": 0.01},
    )
    model = OpenAIModel(spec)
    with pytest.raises(ModelError) as info:
        await model.complete(USER)
    await model.aclose()
    assert info.value.retryable is True
    assert "after 3 attempts" in str(info.value)


async def test_openai_key_never_leaks(openai_server: FakeServer, key: str) -> None:
    def echo(request: dict[str, Any]) -> Reply:
        auth = request["headers"]["authorization"]
        return openai_reply(f"you sent {auth}", model=auth)

    def echo_error(status: int) -> Callable[[dict[str, Any]], Reply]:
        return lambda request: error_reply(status, f"bad key {request['headers']['authorization']}")

    model = OpenAIModel(openai_spec(openai_server, max_retries=1))
    openai_server.replies.append(echo)
    c = await model.complete(USER)
    assert "you sent Bearer [REDACTED]" == c.text
    assert key not in repr(dataclasses.asdict(c))

    for status in (401, 500):
        openai_server.replies.extend([echo_error(status)] * 2)
        with pytest.raises(ModelError) as info:
            await model.complete(USER)
        assert "bad key Bearer [REDACTED]" in str(info.value)
        assert key not in all_text(info.value)
    await model.aclose()
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in openai_server.requests)


async def test_openai_base_url_never_gets_the_openai_key(
    openai_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-user-key-0000000000000000")
    model = OpenAIModel(openai_spec(openai_server, api_key_env=None))
    assert model.availability() is None
    await model.complete(USER)
    await model.aclose()
    assert openai_server.requests[0]["headers"]["authorization"] == f"Bearer {DUMMY_KEY}"


async def test_openai_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel(ModelSpec(name="openai:gpt-4.1-mini", provider="openai", model="x"))
    assert model.availability() == "set OPENAI_API_KEY"
    with pytest.raises(ModelNotAvailable, match="set OPENAI_API_KEY"):
        await model.complete(USER)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert model.availability() is None


async def test_openai_streams_to_a_local_server_and_stops_at_a_stop_string(
    openai_server: FakeServer, key: str
) -> None:
    text = "```repl\nprint(1)\n```\nOutput: 1, and a long invented story. " + "x" * 300
    openai_server.replies.append(openai_reply(text))
    openai_server.chunk_delay_s = 0.02
    model = OpenAIModel(openai_spec(openai_server))
    assert model.streams and model.reports_stop
    c = await model.complete(USER, stop=["\n```\n"])
    await model.aclose()
    assert (c.text, c.stop_sequence, c.finish_reason) == ("```repl\nprint(1)", "\n```\n", "stop")
    body = openai_server.requests[0]["body"]
    assert body["stream"] is True and body["stop"] == ["\n```\n"]
    assert body["stream_options"] == {"include_usage": True}
    # the client went away at the stop string: the server could not send the rest
    assert openai_server.disconnected.wait(10)


async def test_openai_stream_without_stop_keeps_text_and_usage(
    openai_server: FakeServer, key: str
) -> None:
    openai_server.replies.append(openai_reply("```repl\nx = 1\n```\nmore"))
    model = OpenAIModel(openai_spec(openai_server))
    c = await model.complete(USER)
    await model.aclose()
    assert (c.text, c.input_tokens, c.output_tokens) == ("```repl\nx = 1\n```\nmore", 11, 7)
    assert c.stop_sequence is None and c.finish_reason == "stop"


async def test_openai_cancelled_stream_closes_the_connection(
    openai_server: FakeServer, key: str
) -> None:
    openai_server.replies.append(openai_reply("y" * 600))
    openai_server.chunk_delay_s = 0.05  # 200 chunks: ~10 s if read to the end
    model = OpenAIModel(openai_spec(openai_server, timeout_s=60.0))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(model.complete(USER), 0.5)
    await model.aclose()
    assert openai_server.disconnected.wait(10)
    assert openai_server.chunks_sent < 200


async def test_openai_not_streamed_still_cuts_at_stop_but_cannot_report_it(
    openai_server: FakeServer, key: str
) -> None:
    # a server that ignores `stop`: the text is cut on our side
    openai_server.replies.append(openai_reply("```repl\nx\n```\nOutput: 3"))
    spec = openai_spec(openai_server, options={"stream": False, "retry_base_delay_s": 0.01})
    model = OpenAIModel(spec)
    assert not model.streams and not model.reports_stop
    c = await model.complete(USER, stop=["\n```\n"])
    await model.aclose()
    assert (c.text, c.stop_sequence) == ("```repl\nx", "\n```\n")
    body = openai_server.requests[0]["body"]
    assert "stream" not in body and body["stop"] == ["\n```\n"]


async def test_openai_server_that_ignores_stream_true_still_gives_the_reply(
    openai_server: FakeServer, key: str
) -> None:
    openai_server.ignores_stream = True  # one JSON body, as some proxies answer
    openai_server.replies.append(openai_reply("```repl\nx = 1\n```\nOutput: 3"))
    model = OpenAIModel(openai_spec(openai_server))
    assert model.streams
    c = await model.complete(USER, stop=["\n```\n"])
    await model.aclose()
    assert (c.text, c.stop_sequence, c.finish_reason) == ("```repl\nx = 1", "\n```\n", "stop")
    assert (c.input_tokens, c.output_tokens) == (11, 7)
    assert openai_server.requests[0]["body"]["stream"] is True


EMPTY_BODIES = {
    "no bytes": (b"", "application/json"),
    "an empty object": (b"{}", "application/json"),
    "no choices": (b'{"id": "c", "object": "chat.completion", "choices": []}', "application/json"),
    "an event stream with no events": (b"", "text/event-stream"),
    "an event stream of [DONE] only": (b"data: [DONE]\n\n", "text/event-stream"),
}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not streamed"])
@pytest.mark.parametrize("empty", list(EMPTY_BODIES))
async def test_openai_empty_reply_is_an_error_naming_the_server(
    openai_server: FakeServer, key: str, empty: str, stream: bool
) -> None:
    body, content_type = EMPTY_BODIES[empty]
    openai_server.default = lambda request: (200, body, {"content-type": content_type})
    spec = openai_spec(openai_server, options={"stream": stream, "retry_base_delay_s": 0.01})
    model = OpenAIModel(spec)
    with pytest.raises(ModelError, match="empty reply") as info:
        await model.complete(USER)
    await model.aclose()
    assert f"127.0.0.1:{openai_server.port}" in str(info.value)
    assert key not in all_text(info.value)


# ----------------------------------------------------------------------------- Anthropic


def test_to_anthropic_merges_roles() -> None:
    system, chat = to_anthropic(
        [
            {"role": "system", "content": "s1"},
            {"role": "user", "content": "u1"},
            {"role": "system", "content": "s2"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a1"},
            {"role": "assistant", "content": "a2"},
            {"role": "user", "content": "u3"},
        ]
    )
    assert system == "s1\n\ns2"
    assert chat == [
        {"role": "user", "content": "u1\n\nu2"},
        {"role": "assistant", "content": "a1\n\na2"},
        {"role": "user", "content": "u3"},
    ]
    assert to_anthropic(USER) == (None, USER)


async def test_anthropic_request_usage_cost(anthropic_server: FakeServer, key: str) -> None:
    model = AnthropicModel(anthropic_spec(anthropic_server))
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    c = await model.complete(messages, max_tokens=64)
    await model.aclose()
    assert (c.text, c.input_tokens, c.output_tokens, c.finish_reason) == ("hello", 13, 5, "stop")
    assert c.cost_usd == pytest.approx((13 * 3.0 + 5 * 15.0) / 1e6)
    (request,) = anthropic_server.requests
    assert request["path"] == "/v1/messages"
    assert anthropic_key(request) == key
    assert request["body"]["system"] == "be brief"
    assert request["body"]["messages"] == [{"role": "user", "content": "a\n\nb"}]
    assert request["body"]["max_tokens"] == 64 and request["body"]["model"] == "claude-test"


async def test_anthropic_sampling_reaches_the_server(
    anthropic_server: FakeServer, key: str
) -> None:
    """anthropic 2.16's ``messages.create()`` has no ``temperature`` parameter: a model
    configured with ``temperature = 0`` failed every call with TypeError."""
    sampling = {"temperature": 0, "top_p": 0.9, "top_k": 5}
    model = AnthropicModel(anthropic_spec(anthropic_server, sampling=sampling))
    try:
        assert (await model.complete(USER, max_tokens=9, stop=["END"])).text == "hello"
    finally:
        await model.aclose()
    (body,) = (r["body"] for r in anthropic_server.requests)
    assert {k: body[k] for k in sampling} == sampling
    assert (body["max_tokens"], body["stop_sequences"], body["model"]) == (
        9,
        ["END"],
        "claude-test",
    )


async def test_anthropic_max_tokens_stop_is_length(anthropic_server: FakeServer, key: str) -> None:
    anthropic_server.replies.append(anthropic_reply("cut", stop="max_tokens"))
    model = AnthropicModel(anthropic_spec(anthropic_server))
    c = await model.complete(USER)
    await model.aclose()
    assert c.finish_reason == "length"


async def test_anthropic_stop_sequences_are_sent_and_reported(
    anthropic_server: FakeServer, key: str
) -> None:
    reply = anthropic_reply("```repl\nx", stop="stop_sequence")
    reply[1]["stop_sequence"] = "\n```\n"  # type: ignore[index]
    anthropic_server.replies.append(reply)
    model = AnthropicModel(anthropic_spec(anthropic_server))
    c = await model.complete(USER, stop=["\n```\n"])
    await model.aclose()
    assert (c.text, c.stop_sequence, c.finish_reason) == ("```repl\nx", "\n```\n", "stop")
    assert anthropic_server.requests[0]["body"]["stop_sequences"] == ["\n```\n"]


async def test_anthropic_overloaded_then_ok(anthropic_server: FakeServer, key: str) -> None:
    anthropic_server.replies.extend([error_reply(529, "overloaded"), error_reply(429)])
    model = AnthropicModel(anthropic_spec(anthropic_server))
    c = await model.complete(USER)
    await model.aclose()
    assert c.text == "hello" and len(anthropic_server.requests) == 3


async def test_anthropic_auth_error_not_retried_and_redacted(
    anthropic_server: FakeServer, key: str
) -> None:
    anthropic_server.replies.append(
        lambda request: error_reply(401, f"invalid x-api-key {anthropic_key(request)}")
    )
    model = AnthropicModel(anthropic_spec(anthropic_server))
    with pytest.raises(ModelError) as info:
        await model.complete(USER)
    await model.aclose()
    assert len(anthropic_server.requests) == 1
    assert info.value.retryable is False and info.value.status_code == 401
    assert "invalid x-api-key [REDACTED]" in str(info.value)
    assert key not in all_text(info.value)


async def test_anthropic_echoed_key_is_redacted(anthropic_server: FakeServer, key: str) -> None:
    anthropic_server.replies.append(lambda r: anthropic_reply(f"key={anthropic_key(r)}"))
    model = AnthropicModel(anthropic_spec(anthropic_server))
    c = await model.complete(USER)
    await model.aclose()
    assert c.text == "key=[REDACTED]"
    assert key not in repr(dataclasses.asdict(c))


async def test_anthropic_timeout(anthropic_server: FakeServer, key: str) -> None:
    anthropic_server.default = lambda request: "hang"
    model = AnthropicModel(anthropic_spec(anthropic_server, timeout_s=0.3, max_retries=0))
    start = time.monotonic()
    with pytest.raises(ModelError, match="no response within 0.3 s") as info:
        await model.complete(USER)
    await model.aclose()
    assert info.value.retryable is True
    assert time.monotonic() - start < 30  # gave up: the server would hang forever


@pytest.mark.parametrize("body", [b"", b"{}", b'{"type": "message", "content": []}'])
async def test_anthropic_empty_reply_is_an_error_naming_the_server(
    anthropic_server: FakeServer, key: str, body: bytes
) -> None:
    anthropic_server.default = lambda request: (200, body, {})
    model = AnthropicModel(anthropic_spec(anthropic_server))
    with pytest.raises(ModelError, match="empty reply") as info:
        await model.complete(USER)
    await model.aclose()
    assert f"127.0.0.1:{anthropic_server.port}" in str(info.value)
    assert key not in all_text(info.value)


async def test_anthropic_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = AnthropicModel(ModelSpec(name="c", provider="anthropic", model="claude"))
    assert model.availability() == "set ANTHROPIC_API_KEY"
    with pytest.raises(ModelNotAvailable, match="set ANTHROPIC_API_KEY"):
        await model.complete(USER)


def test_rlm_api_key_in_code_is_sent_but_never_stored(openai_server: FakeServer, rlmd_home) -> None:
    """The rlms-style `api_key` in backend_kwargs reaches the server, not the trajectory."""
    from rlmd import RLM

    value = "rlmdtest" + secrets.token_hex(16)
    openai_server.default = lambda request: openai_reply("```repl\nFINAL(len(context))\n```")
    with RLM(
        backend="openai",
        backend_kwargs={
            "model_name": "m",
            "base_url": f"http://127.0.0.1:{openai_server.port}/v1",
            "api_key": value,
        },
    ) as rlm:
        result = rlm.completion("abcdef", root_prompt="how long?")
    assert result.response == "6"
    assert openai_server.requests[0]["headers"]["authorization"] == f"Bearer {value}"
    for name in ("rlmd.db", "rlmd.db-wal"):
        path = rlmd_home / name
        if path.exists():
            assert value.encode() not in path.read_bytes()


def test_a_one_character_key_leaves_the_models_code_as_written(
    openai_server: FakeServer, rlmd_home: Path
) -> None:
    """A local server that takes any key, given "x": every x of the model's code was
    replaced by [REDACTED] before it ran and in the store."""
    from rlmd import RLM
    from rlmd.store import Store

    code = "xs = [3, 1, 2]\nFINAL(max(xs))"
    openai_server.default = lambda request: openai_reply(f"```repl\n{code}\n```")
    kwargs = {"model_name": "m", "base_url": openai_server_url(openai_server), "api_key": "x"}
    with RLM(backend="openai", backend_kwargs=kwargs) as rlm:
        result = rlm.completion("abc", root_prompt="q")
    assert openai_server.requests[0]["headers"]["authorization"] == "Bearer x"
    assert result.response == "3"
    with Store() as store:
        cells = [node["data"] for node in store.nodes(result.run_id) if node["kind"] == "cell"]
    assert [cell["code"].strip() for cell in cells] == [code]


# ----------------------------------------------------------------------------- prices


def test_max_usd_refuses_a_model_with_no_known_price(
    openai_server: FakeServer, rlmd_home: Path
) -> None:
    """A proxy model with no price counted as $0, so `--max-usd 0.5` let 10M tokens through:
    the run is now refused before its first call, and binds once the model has a price."""
    entry = f'[models.proxy]\nprovider = "openai"\nmodel = "m"\nbase_url = "{openai_server_url(openai_server)}"\n'
    (rlmd_home / "config.toml").write_text(entry)
    run = ("run", "q", "--context", "-", "--model", "proxy", "--json")

    refused = rlmd(*run, "--max-usd", "0.5", home=rlmd_home, input="x")
    assert refused.returncode == 2, refused.stderr
    assert "'proxy' has no known price" in refused.stderr
    assert "price_input and price_output" in refused.stderr
    assert openai_server.requests == []

    openai_server.default = lambda request: openai_reply("```repl\nFINAL('done')\n```")
    unbudgeted = rlmd(*run, home=rlmd_home, input="x")  # no USD budget: nothing to refuse
    assert unbudgeted.returncode == 0, unbudgeted.stderr
    assert json.loads(unbudgeted.stdout)["answer"] == "done"

    # priced: 18 tokens a call at $10,000 per 1M is $0.18; the budget ends the run
    (rlmd_home / "config.toml").write_text(entry + "price_input = 1e4\nprice_output = 1e4\n")
    openai_server.default = lambda request: openai_reply("```repl\nprint(1)\n```")
    budgeted = rlmd(*run, "--max-usd", "0.5", home=rlmd_home, input="x")
    assert json.loads(budgeted.stdout)["status"] == "max_usd", budgeted.stderr


def test_rlm_max_budget_refuses_an_unpriced_model_and_prices_known_ones(
    openai_server: FakeServer, rlmd_home: Path
) -> None:
    from rlmd import RLM

    openai_server.default = lambda request: openai_reply("```repl\nFINAL('done')\n```")
    kwargs = {"model_name": "m", "base_url": openai_server_url(openai_server), "api_key": "k"}
    with RLM(backend="openai", backend_kwargs=kwargs, max_budget=0.5) as rlm:
        with pytest.raises(ValueError, match="'root' has no known price"):
            rlm.completion("abc", root_prompt="q")
    assert openai_server.requests == []
    priced = {**kwargs, "price_input": 0.0, "price_output": 0.0}  # a server you do not pay for
    with RLM(backend="openai", backend_kwargs=priced, max_budget=0.5) as rlm:
        assert rlm.completion("abc", root_prompt="q").response == "done"
    with RLM(backend="openai", backend_kwargs={"model_name": "gpt-4.1-mini"}) as rlm:
        spec = rlm.registry.spec("root")  # the official API: rlmd's price table
        assert spec.priced and spec.price_input and spec.price_input > 0


def openai_server_url(server: FakeServer) -> str:
    return f"http://127.0.0.1:{server.port}/v1"


# ----------------------------------------------------------------------------- in a run


def out_of_tokens_reply(request: dict[str, Any]) -> Reply:
    """A reasoning model that spent its whole output cap before writing a word."""
    status, body, headers = openai_reply("")
    assert isinstance(body, dict)
    body["choices"][0]["finish_reason"] = "length"
    return status, body, headers


async def test_a_sub_model_out_of_output_tokens_is_an_error_in_the_repl_not_an_empty_answer(
    openai_server: FakeServer, key: str, tmp_path: Path
) -> None:
    from helpers.scripted import last_user, repl, scripted_registry, turn_of

    from rlmd.engine import Budget, RunConfig, run_task
    from rlmd.store import Store

    openai_server.default = out_of_tokens_reply
    seen: list[list[dict]] = []

    def root(messages: list[dict]) -> str:
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl("print(llm_query_batched(['a', 'b']))\nFINAL(llm_query('explain'))")
        return repl("FINAL('the model saw the error')")

    registry = scripted_registry(root=root)
    registry.add(openai_spec(openai_server, name="sub", max_output_tokens=16))
    store = Store(tmp_path / "t.db")
    # The turn raises (its FINAL's call) and is folded: what it printed stays in the note.
    config = RunConfig(root_model="root", sub_model="sub", budget=Budget(max_depth=1))
    try:
        result = await run_task("q", "ctx", config, get_model=registry.get, sinks=(store.record,))
    finally:
        await registry.aclose()
    feedback = last_user(seen[1])
    # each batched slot says so, and the FINAL's call raised the same
    assert "[\"Error: the sub-model 'sub' ran out of output tokens (16)" in feedback
    assert feedback.count("ran out of output tokens (16) before answering") >= 3
    assert result.answer == "the model saw the error"
    calls = [n for n in store.nodes(result.run_id) if n["kind"] == "model_call"]
    assert [c["data"].get("finish_reason") for c in calls if c["data"].get("role") == "sub"] == [
        "length"
    ] * 3


def _default_temperature_only(request: dict[str, Any]) -> Reply:
    """A root model that, like OpenAI's reasoning models, refuses any temperature but 1, and
    sends the same cell on turns 0-2, then its ``FINAL``."""
    body = request["body"]
    if body.get("temperature", 1) != 1:
        message = f"Unsupported value: 'temperature' does not support {body['temperature']}"
        return error_reply(400, message)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return openai_reply(
        "```repl\nprint(len(context))\n```" if turns < 3 else "```repl\nFINAL(len(context))\n```"
    )


async def test_a_model_refusing_the_resample_temperature_keeps_the_reply_and_the_run(
    key: str,
) -> None:
    """The re-sample of a repeated turn fails (400): the reply stands and the run goes on,
    without re-sampling again (it failed the run before)."""
    from rlmd.engine import Budget, RunConfig, run_task
    from rlmd.models.registry import Registry

    server = FakeServer(_default_temperature_only)
    registry = Registry()
    registry.add(openai_spec(server, name="root"))
    # The fake counts the assistant turns it is shown; a folded repeat would hide them.
    config = RunConfig(
        root_model="root",
        sub_model="root",
        budget=Budget(max_iterations=6),
        fold_failed_turns=False,
    )
    try:
        result = await run_task("q", "abcd", config, get_model=registry.get)
    finally:
        await registry.aclose()
        server.close()
    assert (result.status, result.answer, result.error) == ("completed", "4", None)
    sampled = [r["body"].get("temperature") for r in server.requests]
    assert sampled == [None, None, 0.7, None, None]  # one refused re-sample, then none


def test_a_lone_surrogate_printed_by_model_code_reaches_the_server_as_a_replacement(
    openai_server: FakeServer, rlmd_home: Path
) -> None:
    """Model code can print a lone surrogate (no UTF-8 encoding exists for it); the next
    request still goes out, with U+FFFD in its place, and the run completes."""
    from rlmd import RLM

    replies = iter(
        [
            "```repl\nprint('done' + chr(0xD800) + 'b')\n```",
            '```repl\nFINAL("done")\n```',
        ]
    )
    openai_server.default = lambda request: openai_reply(next(replies))
    with RLM(
        backend="openai",
        backend_kwargs={
            "model_name": "m",
            "base_url": f"http://127.0.0.1:{openai_server.port}/v1",
            "api_key": "x",
        },
    ) as rlm:
        result = rlm.completion("some context", root_prompt="what?")
    assert result.response == "done"
    assert len(openai_server.requests) == 2
    sent = json.dumps(openai_server.requests[1]["body"]["messages"], ensure_ascii=False)
    assert "done\ufffdb" in sent
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in sent)

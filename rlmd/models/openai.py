"""OpenAI and every OpenAI-compatible server (vLLM, llama.cpp server, Ollama, OpenRouter).

One code path, the official ``openai`` SDK's ``AsyncOpenAI`` on ``/v1/chat/completions``:

* ``spec.base_url`` unset: api.openai.com, key from ``$OPENAI_API_KEY`` (or the variable
  named by ``spec.api_key_env``); ``max_completion_tokens`` carries the output cap.
* ``spec.base_url`` set: that server. With ``spec.api_key_env`` set the key is required;
  without it a dummy key is sent, never ``$OPENAI_API_KEY`` (a local server must not
  receive the user's OpenAI key). ``max_tokens`` carries the output cap (what these
  servers understand). ``spec.options["max_tokens_param"]`` overrides either choice.
* Streaming: requests to a ``base_url`` server are streamed (``spec.options["stream"]``
  overrides, for either kind of endpoint). When the engine gives up on a call (its wall-clock
  budget ran out, the task was cancelled) the connection closes and a llama.cpp server stops
  generating at its next token; without streaming it finishes the whole reply first. Usage
  comes from the last chunk (``stream_options.include_usage``, where the server supports it;
  ``spec.options["stream_usage"] = False`` leaves the option out), else it is counted locally.
  A server that ignores ``"stream": true`` and answers one JSON body (some OpenAI-compatible
  proxies do) is read as a non-streamed reply.
* A reply with no text and no finish reason (an empty or non-JSON body, no choices, a
  stream with no events) raises :class:`~rlmd.models.base.EmptyReply`, naming the server.
* Repetition: a streamed reply that writes the same lines again and again ends after their
  first copy, and the stream is closed (:mod:`rlmd.models.repetition`,
  ``options.repeat_guard``).
* Stop strings are sent as ``stop`` (at most 4, the API's limit) and, when streaming, also
  matched on the streamed text, so :attr:`Completion.stop_sequence` is exact.

Retries, timeouts and error redaction: :mod:`rlmd.models.retry`.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import time
from typing import Any

from rlmd.models import clients
from rlmd.models.base import (
    Completion,
    EmptyReply,
    Message,
    Model,
    ModelError,
    ModelNotAvailable,
    ModelSpec,
    cut_at_stop,
)
from rlmd.models.repetition import FINISH_REASON, RepeatGuard
from rlmd.models.retry import DEFAULT_BASE_DELAY_S, call_with_retries
from rlmd.redact import remove_values

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DUMMY_KEY = "rlmd-no-key"


class OpenAIModel(Model):
    """A model behind the OpenAI chat completions API.

    ``spec.sampling`` is passed to the request as is (``temperature``, ``top_p``, ``seed``...;
    a key the SDK has no parameter for, such as vLLM's ``top_k``, in the body).
    ``spec.options``: ``max_tokens_param`` (see the module docstring), ``retry_base_delay_s``
    (first backoff in seconds, default 0.5).
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self._client: Any = None

    @property
    def streams(self) -> bool:
        """Whether requests are streamed (default: only to a ``base_url`` server)."""
        return bool(self.spec.options.get("stream", self.spec.base_url is not None))

    @property
    def reports_stop(self) -> bool:  # type: ignore[override]
        """Exact only when streaming: a non-streamed ``finish_reason`` of ``"stop"`` does not
        say whether a stop string or the end of the turn ended the reply."""
        return self.streams

    @property
    def key_env(self) -> str:
        """The environment variable the key is read from."""
        return self.spec.api_key_env or DEFAULT_KEY_ENV

    def _api_key(self) -> str | None:
        """The key to send, or ``None`` when a required key is missing. A key given in code
        (``options["api_key"]``, the Python API) wins; it is never recorded."""
        if self.spec.options.get("api_key"):
            return str(self.spec.options["api_key"])
        if self.spec.base_url and not self.spec.api_key_env:
            return DUMMY_KEY
        return os.environ.get(self.key_env) or None

    def availability(self) -> str | None:
        """``None``, or ``"set OPENAI_API_KEY"`` (the configured variable) when the key is missing."""
        return None if self._api_key() else f"set {self.key_env}"

    def _get_client(self) -> Any:
        if self._client is None:
            key = self._api_key()
            if key is None:
                raise ModelNotAvailable(f"{self.name}: set {self.key_env}")
            base_url, timeout = self.spec.base_url, self.spec.timeout_s

            def make() -> Any:
                import openai

                return openai.AsyncOpenAI(
                    api_key=key, base_url=base_url, timeout=timeout, max_retries=0
                )

            self._client = clients.acquire(("openai", key, base_url, timeout), make)
        return self._client

    async def _complete(
        self,
        messages: list[Message],
        max_tokens: int,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """One chat completion (streamed, see the module docstring); usage from the
        response, else counted locally.

        Raises:
            ModelNotAvailable: the key is not set.
            ModelError: HTTP error, timeout or connection failure after the retries, or an
                empty reply (naming the server).
        """
        import openai

        client = self._get_client()
        key = self._api_key() or ""
        secrets = (key,) if key != DUMMY_KEY else ()
        param = self.spec.options.get(
            "max_tokens_param", "max_tokens" if self.spec.base_url else "max_completion_tokens"
        )
        # The SDK's request transform walks every field against its param types, ~0.4 ms a
        # message (17 ms for a 40-message history; openai 3.60, measured in session 21).
        # What rlmd builds is plain JSON already: it goes as ``extra_body``, which the SDK
        # merges into the body as sent (its keys win); sampling stays checked by ``create``.
        body: dict[str, Any] = {"messages": messages, param: max_tokens}
        request: dict[str, Any] = {"model": self.spec.model, "messages": [], "extra_body": body}
        if stop:
            body["stop"] = list(stop)[:4]
        # A sampling key ``create()`` has no parameter for (``top_k``, ``min_p``,
        # ``repeat_penalty``: vLLM's and llama.cpp's) raised TypeError on every call; it goes
        # in the body as is, as the config promises.
        known = _create_params()
        for name, value in {**self.spec.sampling, **(sampling or {})}.items():
            if name in known:
                request[name] = value
            else:
                body.setdefault(name, value)
        stream = self.streams
        if stream:
            request["stream"] = True
            if self.spec.options.get("stream_usage", True):
                body["stream_options"] = {"include_usage": True}

        async def attempt() -> tuple[str, str | None, Any, str | None]:
            try:
                response = await client.chat.completions.create(**request)
                if isinstance(response, openai.AsyncStream) and _is_json(response.response):
                    response = await _read_body(response)  # the server ignored "stream"
                if isinstance(response, openai.AsyncStream):
                    reply = await _consume(response, stop, self.repeat_guard())
                else:
                    reply = _read_completion(response)
            except json.JSONDecodeError:
                raise EmptyReply(str(client.base_url), "the body is not JSON") from None
            except _NotText as exc:
                raise ModelError(
                    f"{client.base_url} sent a reply that is not text ({exc})"
                ) from None
            if not reply[0] and reply[1] is None:
                raise EmptyReply(str(client.base_url), "no text and no finish reason")
            return reply

        start = time.monotonic()
        text, finish_reason, usage, hit = await call_with_retries(
            attempt,
            what=self.name,
            max_retries=self.spec.max_retries,
            timeout_s=self.spec.timeout_s,
            transient=(openai.APIConnectionError,),
            secrets=secrets,
            base_delay_s=self.spec.options.get("retry_base_delay_s", DEFAULT_BASE_DELAY_S),
        )
        latency = time.monotonic() - start
        text = remove_values(text, secrets)  # a server that echoes the key back
        return self._completion(
            messages,
            text,
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            latency_s=latency,
            finish_reason=finish_reason,
            stop_sequence=hit,
        )

    async def aclose(self) -> None:
        """Let go of the HTTP client (closed once no model of this loop uses it)."""
        if self._client is not None:
            client, self._client = self._client, None
            await clients.release(client)


@functools.cache
def _create_params() -> frozenset[str]:
    """The keyword parameters of the SDK's ``chat.completions.create``."""
    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters)


class _NotText(ValueError):
    """A reply's content is neither text nor a list of text parts."""


def _text(content: Any) -> str:
    """A message's (or a streamed delta's) content as text: a string; the text parts of a
    list, the content-parts form some servers answer with (it failed the run with
    ``AttributeError: 'list' object has no attribute 'find'``); ``""`` for none.

    Raises:
        _NotText: any other value (a number, an object).
    """
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else getattr(part, "text", part)
            if not isinstance(text, str):
                raise _NotText(f"a content part of type {type(part).__name__}")
            parts.append(text)
        return "".join(parts)
    raise _NotText(f"its content is of type {type(content).__name__}")


def _is_json(response: Any) -> bool:
    """Whether an HTTP response's ``content-type`` is JSON (not ``text/event-stream``)."""
    content_type = response.headers.get("content-type", "").split(";")[0].strip()
    return bool(content_type.endswith("json"))


async def _read_body(stream: Any) -> Any:
    """The ``ChatCompletion`` in the one JSON body a server sent to a streamed request.

    Raises:
        json.JSONDecodeError: the body is empty or not JSON.
    """
    from openai.types.chat import ChatCompletion

    try:
        data = json.loads(await stream.response.aread())
    finally:
        await stream.close()
    return ChatCompletion.model_construct(**data) if isinstance(data, dict) else None


def _read_completion(response: Any) -> tuple[str, str | None, Any, str | None]:
    """``(text, finish_reason, usage, None)`` of a non-streamed chat completion; empty
    text and no finish reason when it has no choices (or is not a chat completion)."""
    choice = _first_choice(getattr(response, "choices", None))
    message = _part(getattr(choice, "message", None), "message")
    text = _text(getattr(message, "content", None))
    usage = getattr(response, "usage", None)
    return text, _reason(getattr(choice, "finish_reason", None)), usage, None


def _reason(value: Any) -> str | None:
    """A finish reason as the server gave it, if it is text (``{"x": 1}`` went into the
    trajectory as it was)."""
    return value if isinstance(value, str) and value else None


_JSON_VALUES = (str, int, float, bool, list, dict)


def _first_choice(choices: Any) -> Any:
    """The first of a reply's (or a chunk's) ``choices``, ``None`` when it has none.

    Raises:
        _NotText: ``choices`` is not a list of objects: it failed the run with
            ``AttributeError: 'str' object has no attribute 'message'`` (review22).
    """
    if not choices:
        return None
    if not isinstance(choices, list):
        raise _NotText(f"its choices are a {type(choices).__name__}, not a list")
    return _part(choices[0], "choice")


def _part(value: Any, what: str) -> Any:
    """``value`` (a choice, a message, a delta) if it is an object or ``None``.

    Raises:
        _NotText: a plain JSON value where the object should be.
    """
    if isinstance(value, _JSON_VALUES):
        raise _NotText(f"a {what} of type {type(value).__name__}")
    return value


async def _consume(
    stream: Any, stop: list[str] | None, guard: RepeatGuard | None = None
) -> tuple[str, str | None, Any, str | None]:
    """Read a streamed chat completion: ``(text, finish_reason, usage, stop string hit)``.

    Stops reading at the first stop string (the text before it is returned), or when
    ``guard`` sees the reply repeating itself (its kept text, ``finish_reason``
    ``"repetition"``), and always closes the stream, also when cancelled, so the server sees
    the client go (and stops generating).
    """
    parts: list[str] = []
    finish: str | None = None
    usage: Any = None
    longest = max((len(s) for s in stop or ()), default=0)
    tail = ""
    try:
        async for chunk in stream:
            if getattr(chunk, "usage", None) is not None:
                usage = chunk.usage
            choice = _first_choice(getattr(chunk, "choices", None))
            if choice is None:
                continue
            delta = _text(getattr(_part(getattr(choice, "delta", None), "delta"), "content", None))
            if delta:
                parts.append(delta)
                if stop:
                    tail = (tail + delta)[-(longest + len(delta)) :]
                    if any(s in tail for s in stop):
                        text, hit = cut_at_stop("".join(parts), stop)
                        return text, "stop", usage, hit
                if guard is not None and guard.feed(delta):
                    return guard.kept or "", FINISH_REASON, usage, None
            finish = _reason(getattr(choice, "finish_reason", None)) or finish
    finally:
        await stream.close()
    return "".join(parts), finish, usage, None

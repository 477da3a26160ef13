"""Anthropic's Messages API through the official ``anthropic`` SDK (``AsyncAnthropic``).

Chat messages are mapped to what ``/v1/messages`` accepts: system messages are joined
(blank line between them) into ``system=``; consecutive messages of the same role are merged
into one (blank line between them). The key is read from ``$ANTHROPIC_API_KEY`` or the
variable named by ``spec.api_key_env``; ``spec.base_url`` points the SDK at another host.
A reply with no text and no stop reason (an empty or non-JSON body, no content) raises
:class:`~rlmd.models.base.EmptyReply`, naming the server.

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
    reported_tokens,
)
from rlmd.models.retry import DEFAULT_BASE_DELAY_S, call_with_retries
from rlmd.redact import remove_values

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}


def to_anthropic(messages: list[Message]) -> tuple[str | None, list[dict[str, str]]]:
    """Split chat messages into ``(system, messages)`` for the Messages API.

    Returns:
        The joined system text (``None`` if there is none) and the user/assistant messages
        with consecutive same-role messages merged.
    """
    system: list[str] = []
    merged: list[dict[str, str]] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            system.append(content)
        elif merged and merged[-1]["role"] == role:
            merged[-1]["content"] += "\n\n" + content
        else:
            merged.append({"role": role, "content": content})
    return ("\n\n".join(system) if system else None), merged


@functools.cache
def _create_params() -> frozenset[str]:
    """The keyword parameters of the SDK's ``messages.create``."""
    from anthropic.resources.messages import AsyncMessages

    return frozenset(inspect.signature(AsyncMessages.create).parameters)


class _NotText(ValueError):
    """A reply's content is not a list of blocks, or a text block's text is not text."""


def _text(response: Any) -> str:
    """The text blocks of a Messages API response, joined (other blocks, such as
    ``thinking``, are left out).

    Raises:
        _NotText: content that is not a list of blocks (a string was read as no text at
            all), or a text block whose text is not a string (it failed the call with
            ``TypeError: sequence item 0: expected str instance``; review22).
    """
    content = getattr(response, "content", None)
    if content is None:
        return ""
    if not isinstance(content, list):
        raise _NotText(f"its content is a {type(content).__name__}, not a list of blocks")
    parts = []
    for block in content:
        if isinstance(block, str | int | float | bool | list) or block is None:
            raise _NotText(f"a content block of type {type(block).__name__}")
        get = block.get if isinstance(block, dict) else functools.partial(getattr, block)
        if get("type", None) != "text":  # a block type the SDK does not know stays a dict
            continue
        text = get("text", None)
        if not isinstance(text, str):
            raise _NotText(f"a text block whose text is a {type(text).__name__}")
        parts.append(text)
    return "".join(parts)


def _word(value: Any) -> str | None:
    """A stop reason or stop sequence as the server gave it, if it is text (a dict raised
    ``TypeError: unhashable type`` out of the call, review22)."""
    return value if isinstance(value, str) and value else None


class AnthropicModel(Model):
    """A Claude model.

    ``spec.sampling`` is sent as is (``temperature``, ``top_p``...): as ``messages.create``
    arguments where it has them, else in the body (``extra_body``).
    ``spec.options["retry_base_delay_s"]``: first backoff in seconds (default 0.5).
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self._client: Any = None

    @property
    def key_env(self) -> str:
        """The environment variable the key is read from."""
        return self.spec.api_key_env or DEFAULT_KEY_ENV

    def availability(self) -> str | None:
        """``None``, or ``"set ANTHROPIC_API_KEY"`` (the configured variable) when the key is missing."""
        return None if self._api_key() else f"set {self.key_env}"

    def _api_key(self) -> str | None:
        """A key given in code (``options["api_key"]``) wins over the environment variable."""
        return str(self.spec.options.get("api_key") or "") or os.environ.get(self.key_env) or None

    def _get_client(self) -> tuple[Any, str]:
        key = self._api_key()
        if not key:
            raise ModelNotAvailable(f"{self.name}: set {self.key_env}")
        if self._client is None:
            base_url, timeout = self.spec.base_url, self.spec.timeout_s

            def make() -> Any:
                import anthropic

                return anthropic.AsyncAnthropic(
                    api_key=key, base_url=base_url, timeout=timeout, max_retries=0
                )

            self._client = clients.acquire(("anthropic", key, base_url, timeout), make)
        return self._client, key

    async def _complete(
        self,
        messages: list[Message],
        max_tokens: int,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """One Messages API call; usage from the response, else counted locally.
        ``stop`` is sent as ``stop_sequences``.

        Raises:
            ModelNotAvailable: the key is not set.
            ModelError: no user/assistant message, or HTTP error, timeout or connection
                failure after the retries, or an empty reply (naming the server).
        """
        import anthropic

        client, key = self._get_client()
        system, chat = to_anthropic(messages)
        if not chat:
            raise ModelError(f"{self.name}: no user message to answer")
        request: dict[str, Any] = {"model": self.spec.model, "max_tokens": max_tokens}
        request["messages"] = chat
        if system is not None:
            request["system"] = system
        if stop:
            request["stop_sequences"] = list(stop)
        # A sampling key ``create()`` has no parameter for goes in the body as is: anthropic
        # 2.16's ``create()`` has none for ``temperature``, ``top_p`` or ``top_k``, so a
        # model configured with ``temperature = 0`` failed every call with TypeError.
        known, extra = _create_params(), {}
        for name, value in self.spec.sampling.items():
            if name in known:
                request[name] = value
            else:
                extra[name] = value
        if extra:
            request["extra_body"] = extra
        # ``sampling`` (a re-sample's temperature and seed) is not sent: the Messages API of
        # this SDK takes neither, and its models do not decode greedily, so asking again is
        # a re-sample already.

        async def attempt() -> tuple[Any, str]:
            try:
                response = await client.messages.create(**request)
                text = _text(response)
            except json.JSONDecodeError:
                raise EmptyReply(str(client.base_url), "the body is not JSON") from None
            except _NotText as exc:
                raise ModelError(
                    f"{client.base_url} sent a reply that is not text ({exc})"
                ) from None
            if not text and _word(getattr(response, "stop_reason", None)) is None:
                raise EmptyReply(str(client.base_url), "no text and no stop reason")
            return response, text

        start = time.monotonic()
        response, text = await call_with_retries(
            attempt,
            what=self.name,
            max_retries=self.spec.max_retries,
            timeout_s=self.spec.timeout_s,
            transient=(anthropic.APIConnectionError,),
            secrets=(key,),
            base_delay_s=self.spec.options.get("retry_base_delay_s", DEFAULT_BASE_DELAY_S),
        )
        latency = time.monotonic() - start

        text = remove_values(text, (key,))  # a server that echoes the key back
        usage = getattr(response, "usage", None)
        # prompt-cache reads and writes are input tokens too; a count that is not one (a
        # string: TypeError out of the call, review22) is left out, as _completion does
        fresh, *cached = (
            reported_tokens(getattr(usage, name, None))
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        input_tokens = None if fresh is None else fresh + sum(n or 0 for n in cached)
        reason = _word(getattr(response, "stop_reason", None))
        return self._completion(
            messages,
            text,
            input_tokens=input_tokens,
            output_tokens=getattr(usage, "output_tokens", None),
            latency_s=latency,
            finish_reason=_FINISH.get(reason or "", reason),
            stop_sequence=(
                _word(getattr(response, "stop_sequence", None))
                if reason == "stop_sequence"
                else None
            ),
        )

    async def aclose(self) -> None:
        """Let go of the HTTP client (closed once no model of this loop uses it)."""
        if self._client is not None:
            client, self._client = self._client, None
            await clients.release(client)

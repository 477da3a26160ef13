"""The one model interface every provider implements.

A provider turns a list of chat messages into a :class:`Completion`. Everything the engine
needs to account for a call (tokens, latency, USD) comes back on the completion, so the
engine never has to know which SDK answered.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlmd.models.repetition import (
    FINISH_REASON,
    GuardSettings,
    RepeatGuard,
    guard_settings,
    trim_repetition,
)

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same ``str`` when it has
    none): what a provider is sent, so also what a local tokenizer counts."""
    if text.isascii() or not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def encodable(messages: list[Message]) -> list[Message]:
    """``messages`` with every lone surrogate in a content replaced by U+FFFD.

    Model code can print one (``print(chr(0xD800))``, a file read with
    ``errors="surrogateescape"``) and the REPL passes it through, but no provider can send
    it: UTF-8 cannot encode it (llama.cpp's tokenizer raises) and JSON servers reject its
    escape. Returns the same list when nothing needed replacing (the usual, ASCII case).
    """

    def bad(m: Message) -> bool:
        c = m.get("content")
        return isinstance(c, str) and not c.isascii() and bool(_LONE_SURROGATE.search(c))

    if not any(bad(m) for m in messages):
        return messages
    return [{**m, "content": encodable_text(m["content"])} if bad(m) else m for m in messages]


_COUNTER: Callable[[str], int] | None = None
""":func:`rlmd.models.tokens.count_tokens`, once imported (on first use: not at start-up)."""


def _token_counter() -> Callable[[str], int]:
    global _COUNTER
    from rlmd.models.tokens import count_tokens

    _COUNTER = count_tokens
    return count_tokens


class ModelError(Exception):
    """A model call failed for good (after retries), or the model is not usable.

    ``retryable`` says whether the cause was transient (rate limit, server error, timeout);
    by the time the engine sees this error the retries are already spent. ``status_code``
    is the HTTP status of the last failed request, when there was one.
    """

    def __init__(
        self, message: str, *, retryable: bool = False, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


class EmptyReply(ModelError):
    """A server answered a request successfully but with no reply in it: no text and no
    finish reason (an empty or non-JSON body, no choices, an event stream with no events).

    Raised instead of returning ``""``, which would read as a model that said nothing. Not
    retryable: a proxy that answers this way does so every time. The message names the
    server (its base URL) and what was missing.
    """

    def __init__(self, server: str, what: str) -> None:
        super().__init__(f"{server} sent an empty reply ({what})")


class ModelNotAvailable(ModelError):
    """The model cannot be used on this machine now (missing key, file, or package).

    The message says the exact step that fixes it (for example ``rlmd models pull NAME``).
    """


FREE_PROVIDERS = ("local", "scripted")
"""Providers whose calls cost nothing (they run on this machine): priced without a price."""


@dataclass
class ModelSpec:
    """A named model from the registry (TOML config or ``provider:model`` shorthand).

    Attributes:
        name: the registry name (``"qwen2.5-coder-1.5b"``, ``"openai:gpt-4.1-mini"``).
        provider: ``"openai" | "anthropic" | "local" | "scripted"``.
        model: the provider's model id; for ``local`` a known model name or a GGUF path;
            for ``scripted`` a script file path.
        base_url: OpenAI-compatible server URL (vLLM, llama.cpp server, Ollama, OpenRouter).
        api_key_env: the environment variable that holds the key; the key itself is never
            stored in a spec, the store, a log or a sandbox.
        context_window: the model's window in tokens (prompt + completion).
        max_output_tokens: cap on generated tokens per call (small models loop without it).
        price_input: USD per 1,000,000 input tokens; ``None``: not known (see :attr:`priced`).
        price_output: USD per 1,000,000 output tokens; ``None``: not known.
        sampling: extra sampling arguments passed to the provider (temperature, top_p, seed).
        n_threads: CPU threads for ``local`` models (default 1: measured on a
            shared 2-core machine, two spinning ggml threads collapse to ~1.4 tok/s when a core is shared).
        timeout_s: per-request timeout in seconds.
        max_retries: retries on rate limits, server errors and timeouts.
        options: provider-specific extras (for ``scripted``: ``callable``; for ``local``:
            ``n_ctx``, ``lora_path``); for every provider ``repeat_guard``
            (:mod:`rlmd.models.repetition`: a reply that writes the same lines again and
            again ends there, ``finish_reason = "repetition"``; ``false`` turns it off).
    """

    name: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = 32_768
    max_output_tokens: int = 1_024
    price_input: float | None = None
    price_output: float | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    n_threads: int = 1
    timeout_s: float = 600.0
    max_retries: int = 3
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def priced(self) -> bool:
        """Whether :meth:`cost_usd` is what the calls really cost: both prices are known
        (configured, or from :data:`rlmd.models.registry.HOSTED_MODELS`), or the provider
        runs on this machine (:data:`FREE_PROVIDERS`). A run with a USD budget refuses an
        unpriced model (:func:`rlmd.runner.check_models`): its calls would count as $0."""
        known = self.price_input is not None and self.price_output is not None
        return known or self.provider in FREE_PROVIDERS

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        """USD for one call, from the per-million-token prices; an unknown price counts as
        0 (see :attr:`priced`)."""
        price_in, price_out = self.price_input or 0.0, self.price_output or 0.0
        return (input_tokens * price_in + output_tokens * price_out) / 1e6

    def public_dict(self) -> dict[str, Any]:
        """The spec as stored in trajectories: no callables, never a key (only its env name).
        Prices are ``None`` only when unknown: a model on this machine records 0.0."""
        free = 0.0 if self.provider in FREE_PROVIDERS else None
        return {
            "name": self.name,
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "price_input": free if self.price_input is None else self.price_input,
            "price_output": free if self.price_output is None else self.price_output,
            "sampling": dict(self.sampling),
        }


@dataclass
class Completion:
    """What one model call returned.

    Attributes:
        text: the generated text.
        input_tokens / output_tokens: as reported by the provider, else counted locally.
        latency_s: wall-clock seconds of the call, retries included.
        cost_usd: from the spec's price table.
        finish_reason: the provider's reason (``"stop"``, ``"length"``), if any, or
            ``"repetition"`` when the repetition guard ended the reply
            (:mod:`rlmd.models.repetition`).
        model: the registry name of the model that answered.
        stop_sequence: the stop string that ended the reply (it is not in ``text``), when
            the provider reports it or :meth:`Model.complete` cut the text there; ``None``
            when no stop string was met or the provider cannot tell (see
            :attr:`Model.reports_stop`).
    """

    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cost_usd: float
    model: str
    finish_reason: str | None = None
    stop_sequence: str | None = None


def cut_at_stop(text: str, stop: list[str] | tuple[str, ...] | None) -> tuple[str, str | None]:
    """``text`` up to the first occurrence of any string in ``stop``, and that string.

    Returns:
        ``(text, None)`` when no stop string occurs (or ``stop`` is empty), else the text
        before the earliest occurrence and the stop string found there.
    """
    best: tuple[int, str] | None = None
    for s in stop or ():
        if s:
            i = text.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
    if best is None:
        return text, None
    return text[: best[0]], best[1]


class Model(abc.ABC):
    """One async interface for every provider.

    Subclasses implement :meth:`_complete`; :meth:`complete` adds nothing but is the only
    entry point the engine uses, so cross-cutting behaviour lives in one place.
    """

    reports_stop: bool = True
    """Whether :attr:`Completion.stop_sequence` is reliable: ``False`` for a provider that
    stops at a stop string server-side but cannot say whether it did (its
    ``finish_reason`` is ``"stop"`` for both)."""

    per_run: bool = False
    """Whether each run tree needs its own instance (state that must not carry over from one
    task to the next, like a script's position); see :meth:`Registry.for_run`."""

    MESSAGE_TOKENS_REMEMBERED = 4096
    """How many message contents :meth:`count_messages` remembers the count of."""

    def __init__(self, spec: ModelSpec) -> None:
        """A model for ``spec``.

        Raises:
            ValueError: ``spec.options["repeat_guard"]`` is malformed (see
                :func:`rlmd.models.repetition.guard_settings`).
        """
        self.spec = spec
        self._message_tokens: dict[str, int] = {}
        self.repeat_settings: GuardSettings | None = guard_settings(spec.name, spec.options)

    def repeat_guard(self) -> RepeatGuard | None:
        """A fresh :class:`~rlmd.models.repetition.RepeatGuard` for one streamed reply, or
        ``None`` when the model's ``options.repeat_guard`` is ``false``."""
        settings = self.repeat_settings
        return None if settings is None else RepeatGuard(settings)

    @property
    def name(self) -> str:
        return self.spec.name

    async def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """Generate one reply to ``messages``.

        Args:
            messages: chat messages, oldest first.
            max_tokens: cap on generated tokens; defaults to ``spec.max_output_tokens``.
            stop: strings that end the reply at their first occurrence (excluded from the
                text). Passed to the provider (OpenAI ``stop``, Anthropic ``stop_sequences``,
                llama.cpp ``stop``); the text is also cut here, for a server that ignores it.
            sampling: sampling arguments for this call only, over ``spec.sampling``
                (``temperature``, ``seed``; the engine's re-sample of a repeated turn).
                Anthropic's Messages API takes neither; it ignores them.

        A reply that ends in the same lines written again and again (the repetition guard,
        :mod:`rlmd.models.repetition`) is ended after their first copy with
        ``finish_reason = "repetition"``: while streaming by the providers that stream, and
        here for a reply that reached ``max_tokens``.

        Returns:
            The :class:`Completion` with usage and cost.

        Raises:
            ModelNotAvailable: the model cannot run here (no key, no file, no package).
            ModelError: the call failed after the configured retries.
            asyncio.CancelledError: the call was cancelled; the request is abandoned.
        """
        stop = [s for s in stop or () if s] or None
        c = await self._complete(
            encodable(messages),
            max_tokens or self.spec.max_output_tokens,
            stop,
            dict(sampling or {}),
        )
        if stop:
            text, hit = cut_at_stop(c.text, stop)
            if hit is not None:
                c.text, c.stop_sequence, c.finish_reason = text, hit, "stop"
        if c.finish_reason == "length" and self.repeat_settings is not None:
            kept = trim_repetition(c.text, self.repeat_settings)
            if kept is not None:
                c.text, c.finish_reason = kept, FINISH_REASON
        return c

    @abc.abstractmethod
    async def _complete(
        self,
        messages: list[Message],
        max_tokens: int,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion: ...

    def _completion(
        self,
        messages: list[Message],
        text: str,
        *,
        input_tokens: int | None,
        output_tokens: int | None,
        latency_s: float,
        finish_reason: str | None,
        stop_sequence: str | None = None,
    ) -> Completion:
        """The :class:`Completion` of one call: token counts the provider did not report are
        counted here (:meth:`count_messages`, :meth:`count_tokens`), and priced by the spec.
        A reported count that is not a whole number from 0 to :data:`MAX_REPORTED_TOKENS`
        counts as not reported: a server's ``"prompt_tokens": "ten"`` failed the run with
        ``TypeError: can't multiply sequence by non-int``, a negative one gave tokens back to
        the budget, and 1e30 made a call the store could not write."""
        input_tokens = reported_tokens(input_tokens)
        output_tokens = reported_tokens(output_tokens)
        if input_tokens is None:
            input_tokens = self.count_messages(messages)
        if output_tokens is None:
            # Remembered like a message's content: the loop sends this reply back as one
            # with the next turn (it was counted twice, once here and once there).
            output_tokens = self._content_tokens(text)
        return Completion(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_s=latency_s,
            cost_usd=self.spec.cost_usd(input_tokens, output_tokens),
            model=self.name,
            finish_reason=finish_reason,
            stop_sequence=stop_sequence,
        )

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this model's prompt (exact where the tokenizer is local,
        else the estimate of :func:`rlmd.models.tokens.count_tokens`)."""
        counter = _COUNTER
        if counter is None:  # the import statement at every call was a fifth of its cost
            counter = _token_counter()
        return counter(text)

    def count_messages(self, messages: list[Message]) -> int:
        """Tokens a chat prompt takes: contents plus ~4 tokens of framing per message
        (OpenAI cookbook, "How to count tokens with tiktoken").

        Each content is counted once and remembered (the last
        :attr:`MESSAGE_TOKENS_REMEMBERED`): a loop's history is re-sent every iteration, and
        recounting all of it made counting grow with the square of the iterations. A
        lookup costs one dict probe (the message keeps the same ``str``, whose hash Python
        caches)."""
        memo, total = self._message_tokens, 2
        for m in messages:
            content = m.get("content") or ""
            n = memo.get(content)
            if n is None:
                n = self._content_tokens(content)
            total += n + 4
        return total

    def _content_tokens(self, content: str) -> int:
        """:meth:`count_tokens` of ``content``, remembered (see :meth:`count_messages`)."""
        memo = self._message_tokens
        n = memo.get(content)
        if n is None:
            n = memo[content] = self.count_tokens(content)
            if len(memo) > self.MESSAGE_TOKENS_REMEMBERED:
                del memo[next(iter(memo))]  # the oldest
        return n

    def availability(self) -> str | None:
        """``None`` when usable now, else a one-line reason with the fix."""
        return None

    async def aclose(self) -> None:  # noqa: B027 (optional hook; the default has nothing to release)
        """Release clients, threads and loaded weights."""


MAX_REPORTED_TOKENS = 10**9
"""Largest token count taken from a provider for one call: a thousand times the largest
context windows. A server's ``"prompt_tokens": 1e30`` (or 2**63) was taken as is: the run's
totals and cost became absurd, and the store could not write the call (SQLite integers end
at 2**63 - 1), so the trajectory lost the reply, its tokens and its cost (review22)."""


def reported_tokens(count: Any) -> int | None:
    """A token count as a provider reported it, if it is one: a whole number from 0 to
    :data:`MAX_REPORTED_TOKENS` (``12.0`` too); else ``None`` (a string, a bool, a negative,
    fractional or impossibly large number)."""
    if isinstance(count, bool):
        return None
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if isinstance(count, int) and 0 <= count <= MAX_REPORTED_TOKENS:
        return count
    return None

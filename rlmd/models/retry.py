"""The one retry policy of the SDK providers: exponential backoff with full jitter.

The SDK clients are created with ``max_retries=0`` so that this is the only policy.

Retried (up to ``spec.max_retries`` times after the first attempt):
  * HTTP 429 (rate limit), 408 (request timeout) and any 5xx (incl. Anthropic's 529);
  * no response within ``spec.timeout_s`` seconds (each attempt has its own timeout);
  * connection errors (the SDK's ``APIConnectionError``, Python's ``ConnectionError``).
Not retried: any other 4xx (bad request, auth, not found, ...) and every other exception.

Backoff before retry ``n`` (0-based): a uniform random delay in
``[0, min(max_delay_s, base_delay_s * 2**n)]`` ("full jitter", AWS Architecture Blog,
"Exponential Backoff And Jitter", 2015), but at least the server's ``Retry-After``
seconds when it sends one (capped at ``max_delay_s``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from rlmd.models.base import ModelError
from rlmd.redact import redact

T = TypeVar("T")

DEFAULT_BASE_DELAY_S = 0.5
DEFAULT_MAX_DELAY_S = 30.0


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an SDK status error, else ``None``."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def is_retryable(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``exc`` is worth another attempt (see the module docstring)."""
    if isinstance(exc, TimeoutError | ConnectionError) or (
        transient and isinstance(exc, transient)
    ):
        return True
    code = status_code(exc)
    return code is not None and (code in (408, 429) or code >= 500)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After: <seconds>`` response header, if the error carries one."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def describe(exc: BaseException, timeout_s: float) -> str:
    """A one-line description of a failed attempt (not yet redacted)."""
    if isinstance(exc, TimeoutError):
        return f"no response within {timeout_s:g} s"
    if isinstance(exc, ModelError):  # raised by the provider itself: already a sentence
        return str(exc)
    code = status_code(exc)
    text = str(exc) or type(exc).__name__
    if code is not None:
        return f"HTTP {code}: {text}" if str(code) not in text else text
    return f"{type(exc).__name__}: {text}"


def backoff_s(
    attempt: int,
    base_delay_s: float = DEFAULT_BASE_DELAY_S,
    max_delay_s: float = DEFAULT_MAX_DELAY_S,
    retry_after: float | None = None,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry)."""
    delay = rand() * min(max_delay_s, base_delay_s * 2**attempt)
    if retry_after is not None:
        delay = max(delay, min(retry_after, max_delay_s))
    return delay


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    max_retries: int,
    timeout_s: float,
    transient: tuple[type[BaseException], ...] = (),
    secrets: Iterable[str] = (),
    base_delay_s: float = DEFAULT_BASE_DELAY_S,
    max_delay_s: float = DEFAULT_MAX_DELAY_S,
) -> T:
    """Await ``attempt()`` until it succeeds, retrying transient failures.

    Args:
        attempt: makes one request (a fresh coroutine per call).
        what: prefix of error messages, e.g. the model's registry name.
        max_retries: retries after the first attempt (0 = one attempt only).
        timeout_s: seconds each attempt may take before it is cancelled and counted as a
            timeout.
        transient: SDK exception types to retry (e.g. ``openai.APIConnectionError``).
        secrets: literal values (API keys) that must not appear in the error message.
        base_delay_s / max_delay_s: backoff parameters, in seconds.

    Returns:
        What ``attempt()`` returned.

    Raises:
        ModelError: the last failure, redacted, with ``retryable`` telling whether it was
            transient. The SDK exception is not chained as ``__cause__``: its text may hold
            request data.
        asyncio.CancelledError: the caller cancelled; no retry.
    """
    secrets = tuple(secrets)
    n = 0
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                return await attempt()
        except Exception as exc:
            retryable = is_retryable(exc, transient)
            if not retryable or n >= max_retries:
                tries = f" (after {n + 1} attempts)" if n else ""
                message = redact(f"{what}: {describe(exc, timeout_s)}{tries}", secrets)
                raise ModelError(
                    message, retryable=retryable, status_code=status_code(exc)
                ) from None
            delay = backoff_s(n, base_delay_s, max_delay_s, retry_after_s(exc))
        n += 1
        await asyncio.sleep(delay)

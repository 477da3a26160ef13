"""Remove secrets from anything rlmd stores or logs.

:func:`redact` replaces with ``[REDACTED]``:

* the value of every environment variable whose name looks like a secret
  (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_KEY``, ``*_PASSWORD``), plus the variables
  registered with :func:`register_secret_env` (the registry registers every spec's
  ``api_key_env``), and any extra values passed in ``secrets``;
* strings shaped like common API keys: ``sk-...`` (OpenAI), ``sk-ant-...`` (Anthropic),
  ``ghp_...``-style GitHub tokens, ``hf_...`` Hugging Face tokens, ``AKIA...`` AWS key ids.

Only values of a credible length are secrets: :data:`MIN_SECRET_LEN` (8) characters or more,
whether from the environment or passed in (``FOO_TOKEN=1`` or a local server's key ``"x"``
would otherwise wipe every "1" or "x" of stored code and messages). A shorter key is used but
not hidden. The secret values found in the environment are cached and found
again whenever ``os.environ`` changes (checked at every call by comparing it with a snapshot,
about a microsecond) or a variable is registered, so keys set later are covered too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8
"""Characters a value needs to be redacted: shorter ones are too common in ordinary text."""

_SECRET_NAME = re.compile(r".*_(API_KEY|KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
# Common API key shapes. The first letter is matched before the look-behind so that the
# regex engine can skip quickly over text that cannot start a key (~0.2 s for 10 MB).
_KEY_SHAPES = re.compile(
    r"""
    [sghA](?<![A-Za-z0-9_\-].)         # first letter, not inside a longer word
    (?: k-ant-[A-Za-z0-9_\-]{8,}       # sk-ant-...       Anthropic
      | k-[A-Za-z0-9_\-]{16,}          # sk-..., sk-proj- OpenAI
      | h[pousr]_[A-Za-z0-9]{20,}      # ghp_..., gho_... GitHub
      | ithub_pat_[A-Za-z0-9_]{20,}    # github_pat_...   GitHub
      | f_[A-Za-z0-9]{20,}             # hf_...           Hugging Face
      | KIA[0-9A-Z]{16}                # AKIA...          AWS access key id
    )
    """,
    re.VERBOSE,
)
_KEY_MARKS = ("k-", "f_", "hp_", "ho_", "hu_", "hs_", "hr_", "ithub_pat_", "KIA")
"""A substring every match of ``_KEY_SHAPES`` holds (the text after its first letter): text
with none of them is not searched (``in`` is a fast C scan; the regex costs ~20 ns per
character and a call's overhead per string)."""
_registered: set[str] = set()
_generation = 0  # bumped by register_secret_env: invalidates the cache below
# (generation, snapshot of the environment, its secret values sorted longest first)
_cache: tuple[int, Mapping[Any, Any], tuple[str, ...]] | None = None


def register_secret_env(name: str | None) -> None:
    """Treat the environment variable ``name`` as a secret even if its name does not look like one."""
    global _generation
    if name and name not in _registered:
        _registered.add(name)
        _generation += 1


def _environ_data() -> Mapping[Any, Any]:
    """The environment as a cheap-to-compare mapping: ``os.environ``'s own (encoded) dict on
    CPython and PyPy, a decoded copy elsewhere."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else dict(os.environ)


def _env_secrets() -> tuple[str, ...]:
    """The secret values in the environment, longest first: cached, and recomputed when
    ``os.environ`` differs from the snapshot taken with them (a dict comparison, where
    unchanged values compare by identity) or a variable was registered since."""
    global _cache
    generation, env, cache = _generation, _environ_data(), _cache
    if cache is not None and cache[0] == generation and cache[1] == env:
        return cache[2]
    snapshot = dict(env)  # taken first: a change made meanwhile shows at the next call
    values = set(
        credible(v for k, v in os.environ.items() if _SECRET_NAME.match(k) or k in _registered)
    )
    literals = tuple(sorted(values, key=len, reverse=True))
    _cache = (generation, snapshot, literals)
    return literals


def credible(values: Iterable[str]) -> list[str]:
    """The ``values`` long enough to be redacted (:data:`MIN_SECRET_LEN` characters or more)."""
    return [v for v in values if v and len(v) >= MIN_SECRET_LEN]


def secret_values(extra: Iterable[str] = ()) -> frozenset[str]:
    """The secret strings :func:`redact` currently removes (env values and credible ``extra``)."""
    return frozenset((*_env_secrets(), *credible(extra)))


def remove_values(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each credible value of ``secrets`` replaced by ``[REDACTED]``, and
    nothing else changed (no environment values, no key shapes): for a model's reply, whose
    code runs as written, when the server might echo the key back."""
    return _replace(text, tuple(sorted(credible(secrets), key=len, reverse=True)))


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``obj`` with secrets replaced by ``[REDACTED]``.

    Args:
        obj: a string, or dicts / lists / tuples nesting strings (dict keys are kept as they
            are); any other value is returned unchanged.
        secrets: extra literal values to remove (for example an API key the caller holds);
            those shorter than :data:`MIN_SECRET_LEN` are left in the text.

    Returns:
        The same shape as ``obj``; strings without secrets are returned as they are.
    """
    return _walk(obj, _literals(secrets))


def text_redactor(secrets: Iterable[str] = ()) -> Callable[[str], str]:
    """The string step of :func:`redact`, for a caller that walks a payload itself (the
    store makes an event JSON-safe and removes its secrets in one pass): a function from a
    string to the string with the current secrets (as :func:`redact` finds them at this
    call) and key-shaped strings replaced by ``[REDACTED]``."""
    literals = _literals(secrets)
    return lambda text: _scrub(text, literals)


def may_redact_json(text: str, secrets: Iterable[str] = ()) -> bool:
    """Whether :func:`text_redactor` (with ``secrets``) might change a string held in the
    value whose compact ASCII JSON (``ensure_ascii``) is ``text``: ``False`` only when it
    changes none, so a caller can skip walking the value. A key-shaped match holds one of
    :data:`_KEY_MARKS`, and a secret is looked for as it is; both are printable ASCII
    without ``"`` or ``\\`` (a secret that is not is always "might"), which JSON writes
    as themselves: a string holding one puts it in ``text``."""
    for mark in _KEY_MARKS:
        if mark in text:
            return True
    for value in _literals(secrets):
        if value in text or not _as_itself_in_json(value):
            return True
    return False


def _as_itself_in_json(value: str) -> bool:
    """Whether ASCII JSON writes every character of ``value`` as itself."""
    return value.isascii() and value.isprintable() and '"' not in value and "\\" not in value


def _literals(secrets: Iterable[str]) -> tuple[str, ...]:
    """The environment's secret values and the credible ``secrets``, longest first."""
    literals: tuple[str, ...] = _env_secrets()
    extra = credible(secrets)
    if extra:
        literals = tuple(sorted(set(literals).union(extra), key=len, reverse=True))
    return literals


def _replace(text: str, literals: tuple[str, ...]) -> str:
    """``text`` with each of ``literals`` (longest first) replaced by ``[REDACTED]``."""
    for value in literals:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _scrub(text: str, literals: tuple[str, ...]) -> str:
    text = _replace(text, literals)
    for mark in _KEY_MARKS:
        if mark in text:
            return _KEY_SHAPES.sub(REDACTED, text)
    return text


def _walk(obj: Any, literals: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        return _scrub(obj, literals)
    if isinstance(obj, dict):
        return {k: _walk(v, literals) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, literals) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_walk(v, literals) for v in obj)
    return obj

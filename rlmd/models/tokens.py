"""Count tokens without a network: tiktoken ``o200k_base`` if its data is cached, else an estimate.

tiktoken downloads its BPE file on first use. rlmd never lets it: the encoding is used only
if the file is already in tiktoken's cache folder (``$TIKTOKEN_CACHE_DIR``, else
``$DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``) and has the expected SHA-256.
That check is made once per process.

Otherwise the count is an estimate of one token per 4 characters, OpenAI's published rule
of thumb for English text ("What are tokens and how to count them?", OpenAI Help Center:
"1 token ~= 4 chars in English"). Code and English are close to it; text in other scripts
takes more tokens than estimated.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Any

CHARS_PER_TOKEN = 4
"""The estimate's ratio: characters per token (OpenAI's rule of thumb for English)."""

ENCODING = "o200k_base"
_BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_BPE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

_lock = threading.Lock()
_tried = False
_encoding: Any = None


def tiktoken_cache_file() -> str | None:
    """Where tiktoken caches the ``o200k_base`` file (mirrors ``tiktoken.load``), or
    ``None`` when caching is disabled (``TIKTOKEN_CACHE_DIR=""``)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return os.path.join(cache_dir, hashlib.sha1(_BPE_URL.encode()).hexdigest())


def _load_encoding() -> Any:
    """The tiktoken encoding if it loads from the local cache, else ``None``. Never downloads."""
    path = tiktoken_cache_file()
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != _BPE_SHA256:
                return None  # tiktoken would delete it and download again
        import tiktoken

        return tiktoken.get_encoding(ENCODING)
    except Exception:
        return None


def encoding() -> Any:
    """The cached tiktoken ``o200k_base`` encoding, or ``None`` (tried once per process)."""
    global _tried, _encoding
    if not _tried:
        with _lock:
            if not _tried:
                _encoding = _load_encoding()
                _tried = True
    return _encoding


def estimate_tokens(text: str) -> int:
    """Estimated tokens in ``text``: ``ceil(len(text) / 4)`` (characters, not bytes)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def count_tokens(text: str) -> int:
    """Tokens in ``text`` (an int >= 0).

    Exact for ``o200k_base`` when tiktoken's data is cached locally (special-token strings
    such as ``<|endoftext|>`` are counted as ordinary text), else :func:`estimate_tokens`.
    Never uses the network and never raises for any ``str``.
    """
    if not text:
        return 0
    enc = encoding()
    if enc is None:
        return estimate_tokens(text)
    return len(enc.encode_ordinary(text))


def _reset_for_tests() -> None:
    """Forget the once-per-process result so a test can try loading again."""
    global _tried, _encoding
    with _lock:
        _tried, _encoding = False, None

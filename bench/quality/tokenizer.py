"""Token counters for sizing contexts and truncating the plain baseline's prompt.

The counter that matters is the model's own: a context "beyond the window" means beyond
the window in the model's tokens. For a GGUF model, :func:`gguf_tokenizer` loads only its
vocabulary (``llama_cpp.Llama(vocab_only=True)``, about 0.5 s) and counts exactly. Without
one, :func:`estimate_tokenizer` uses a fixed characters-per-token ratio; the manifest of a
task set records which counter sized it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Tokenizer:
    name: str
    _impl: Any = None
    chars_per_token: float = 4.0

    def count(self, text: str) -> int:
        if self._impl is None:
            return max(1, round(len(text) / self.chars_per_token)) if text else 0
        return len(self._impl.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def head(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` of at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        if self._impl is None:
            return text[: int(max_tokens * self.chars_per_token)]
        toks = self._impl.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if len(toks) <= max_tokens:
            return text
        return self._impl.detokenize(toks[:max_tokens]).decode("utf-8", errors="ignore")


def gguf_tokenizer(path: Path) -> Tokenizer:
    import llama_cpp

    impl = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    return Tokenizer(f"gguf:{Path(path).name}", impl)


def estimate_tokenizer(chars_per_token: float = 4.0) -> Tokenizer:
    return Tokenizer(f"estimate:{chars_per_token:g}-chars-per-token", None, chars_per_token)

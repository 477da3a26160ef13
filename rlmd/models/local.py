"""GGUF models run in process by llama-cpp-python (``pip install 'rlmd[local]'``).

``spec.model`` is a known local model name (see :mod:`rlmd.models.pull`; its file comes from
``rlmd models pull NAME``) or the path of a ``.gguf`` file. The model is loaded on the first
call and kept until :meth:`LocalModel.aclose`.

* Chat: ``Llama.create_chat_completion``, which applies the GGUF's own chat template.
* Sampling: greedy (``temperature=0``) with a fixed seed unless ``spec.sampling`` (or a
  call's own ``sampling``, over it) says otherwise; any ``create_chat_completion`` argument
  may be given there (``top_p``, ``repeat_penalty``, ``stop``...).
* Threads: ``spec.n_threads`` (default 1: measured on a shared 2-core machine, two
  spinning ggml threads collapse when a core is shared).
* Context: ``spec.options["n_ctx"]`` tokens, else ``min(spec.context_window, 8192)``.
* LoRA: ``spec.options["lora_path"]``, a llama.cpp LoRA GGUF applied on top of the model
  (``Llama(lora_path=...)``; the models ``rlmd train`` fine-tunes, :mod:`rlmd.train.gguf_lora`).
* Concurrency: one ``Llama`` is not thread-safe, so calls run one at a time in a worker
  thread (``asyncio.to_thread``) under a lock; waiting calls hold no thread. Loads of
  different models run one at a time in a process (``_LOAD_LOCK``: llama-cpp-python
  redirects the process's stdout and stderr while it loads).
* Cancellation and ``spec.timeout_s``: generation is stopped at the next token by forcing
  the end-of-sequence token; prompt processing itself cannot be interrupted.
* Stop strings: the reply is streamed and matched here, so generation ends at the first
  stop string and :attr:`Completion.stop_sequence` says which one (llama.cpp's own ``stop``
  does not report it). Usage is then counted with the model's tokenizer.
* Repetition: a streamed reply (one with stop strings: the engine's root turns) that writes
  the same lines again and again ends after their first copy (:mod:`rlmd.models.repetition`,
  ``options.repeat_guard``); a reply without stop strings is not streamed and is trimmed
  only once it reaches ``max_tokens`` (:meth:`Model.complete`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmd.models.base import (
    Completion,
    Message,
    Model,
    ModelError,
    ModelNotAvailable,
    ModelSpec,
    cut_at_stop,
    encodable_text,
)
from rlmd.models.pull import KNOWN_LOCAL_MODELS, local_model_path
from rlmd.models.repetition import FINISH_REASON, RepeatGuard

DEFAULT_SEED = 1234

_LOAD_LOCK = threading.Lock()
"""Held while any :class:`LocalModel` constructs its ``Llama``: with ``verbose=False``
llama-cpp-python silences a load by pointing the process's file descriptors 1 and 2 at
``/dev/null`` and back (``suppress_stdout_stderr``, not thread-safe). Two loads at once (two
sample models of ``rlmd train rollout --parallel 2``, session 14) interleaved the save and
restore, and the process's stdout and stderr stayed ``/dev/null`` for good: every progress
line, the summary table and any later error went nowhere. Output printed by another thread
*during* a load is still lost (the redirect is process-wide)."""
MAX_DEFAULT_N_CTX = 8192
INSTALL_HINT = "pip install 'rlmd[local]'"


class _Stopped(Exception):
    """Raised from a decode once the call was cancelled or timed out (see :func:`_checked`)."""


class _Abort:
    """A logits processor that, once triggered, leaves only the end-of-sequence token."""

    def __init__(self, eos: int, deadline: float) -> None:
        self.eos = eos
        self.deadline = deadline
        self.cancelled = threading.Event()
        self.timed_out = False

    def stopped(self) -> bool:
        """Whether the call should stop: cancelled, or past its deadline (then timed out)."""
        if not self.cancelled.is_set() and time.monotonic() > self.deadline:
            self.timed_out = True
            self.cancelled.set()
        return self.cancelled.is_set()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.stopped():
            scores[:] = float("-inf")
            scores[self.eos] = 0.0
        return scores


def _checked(llm: Any, current: Callable[[], _Abort | None]) -> None:
    """Make ``llm`` check the running call's :class:`_Abort` before each decode, raising
    :class:`_Stopped`. The logits processor acts only between generated tokens, so a
    cancelled or timed-out call went on through its whole prompt (minutes for thousands of
    tokens on a loaded CPU: a timed-out 1.5B call held the next run's model for 8.5 minutes,
    bench/RESULTS.md, issue 13 session 10); prompts are decoded in batches of ``n_batch``
    tokens, so it now stops at the next batch. llama-cpp-python (pinned 0.3.36) decodes
    through ``Llama._ctx.decode``; without that attribute nothing is changed."""
    ctx: Any = getattr(llm, "_ctx", None)
    decode = getattr(ctx, "decode", None)
    if decode is None:
        return

    def checked(batch: Any) -> None:
        abort = current()
        if abort is not None and abort.stopped():
            raise _Stopped
        decode(batch)

    ctx.decode = checked


def _stream_until(
    chunks: Any, stop: list[str], abort: _Abort, guard: RepeatGuard | None = None
) -> dict:
    """Read llama-cpp-python's streamed chat chunks until a stop string, or until ``guard``
    sees the reply repeating itself (then its kept text, ``finish_reason`` ``"repetition"``);
    returns a response dict shaped like the non-streamed one (no ``usage``) plus
    ``stop_sequence``."""
    parts: list[str] = []
    finish, hit = None, None
    longest = max(len(s) for s in stop)
    tail = ""
    try:
        for chunk in chunks:
            choice = chunk["choices"][0]
            delta = (choice.get("delta") or {}).get("content") or ""
            if delta:
                parts.append(delta)
                tail = (tail + delta)[-(longest + len(delta)) :]
                if any(s in tail for s in stop):
                    text, hit = cut_at_stop("".join(parts), stop)
                    parts, finish = [text], "stop"
                    abort.cancelled.set()  # the remaining tokens are end-of-sequence
                    break
                if guard is not None and guard.feed(delta):
                    parts, finish = [guard.kept or ""], FINISH_REASON
                    abort.cancelled.set()
                    break
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return {
        "choices": [{"message": {"content": "".join(parts)}, "finish_reason": finish}],
        "stop_sequence": hit,
    }


class LocalModel(Model):
    """A GGUF model in this process (see the module docstring).

    ``count_tokens`` is exact (the model's own tokenizer) once the model is loaded, and the
    4-characters-per-token estimate before.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self._llm: Any = None
        self._lock = threading.Lock()  # guards self._llm: one call at a time
        self._abort: _Abort | None = None  # the running call's (under self._lock)
        self._async_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        # The engine sizes prompts by spec.context_window: make it the window really loaded.
        spec.context_window = self.n_ctx

    @property
    def n_ctx(self) -> int:
        """The context size the model is loaded with, in tokens."""
        return int(
            self.spec.options.get("n_ctx") or min(self.spec.context_window, MAX_DEFAULT_N_CTX)
        )

    def model_path(self) -> Path:
        """The GGUF file to load.

        Raises:
            ModelNotAvailable: a known model that is not pulled (the message has the exact
                ``rlmd models pull NAME`` command), or a path that does not exist.
        """
        name = self.spec.model
        if name in KNOWN_LOCAL_MODELS:
            path = local_model_path(name)
            if path is None:
                raise ModelNotAvailable(
                    f"{self.name}: not downloaded; run `rlmd models pull {name}`"
                )
            return path
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotAvailable(f"{self.name}: GGUF file not found: {path}")
        return path

    def availability(self) -> str | None:
        """``None``, or why the model cannot load (package missing, file missing)."""
        if self._llm is not None:
            return None
        if importlib.util.find_spec("llama_cpp") is None:
            return f"llama-cpp-python is not installed; run `{INSTALL_HINT}`"
        try:
            self.model_path()
        except ModelNotAvailable as exc:
            return str(exc).removeprefix(f"{self.name}: ")
        return None

    def _load(self) -> Any:
        """Load the model (caller holds ``self._lock``)."""
        if self._llm is None:
            try:
                import llama_cpp
            except ImportError:
                raise ModelNotAvailable(
                    f"{self.name}: llama-cpp-python is not installed; run `{INSTALL_HINT}`"
                ) from None
            path = self.model_path()
            try:
                with _LOAD_LOCK:  # see _LOAD_LOCK: one load at a time in this process
                    self._llm = llama_cpp.Llama(
                        model_path=str(path),
                        n_ctx=self.n_ctx,
                        n_threads=self.spec.n_threads,
                        n_threads_batch=self.spec.n_threads,
                        seed=int(self.spec.sampling.get("seed", DEFAULT_SEED)),
                        lora_path=self.spec.options.get("lora_path"),
                        verbose=False,
                    )
            except Exception as exc:
                raise ModelError(f"{self.name}: loading {path} failed: {exc}") from exc
            _checked(self._llm, lambda: self._abort)
            self._message_tokens.clear()  # counted by the estimate; now the tokenizer is here
        return self._llm

    def _generate(
        self,
        messages: list[Message],
        max_tokens: int,
        abort: _Abort,
        stop: list[str] | None,
        sampling: dict[str, Any] | None = None,
    ) -> dict:
        with self._lock:
            llm = self._load()
            import llama_cpp  # loaded by now

            self._abort = abort  # checked before every decode (_checked)
            abort.eos = llm.token_eos()
            kwargs: dict[str, Any] = {"temperature": 0.0, "seed": DEFAULT_SEED}
            kwargs.update(self.spec.sampling)
            kwargs.update(sampling or {})
            kwargs["logits_processor"] = llama_cpp.LogitsProcessorList([abort])
            try:
                if stop:
                    return _stream_until(
                        llm.create_chat_completion(
                            messages=messages, max_tokens=max_tokens, stream=True, **kwargs
                        ),
                        stop,
                        abort,
                        self.repeat_guard(),
                    )
                return llm.create_chat_completion(
                    messages=messages, max_tokens=max_tokens, **kwargs
                )
            except _Stopped:  # the caller has gone, or will raise the timeout
                return {"choices": [{"message": {"content": ""}}]}
            except ValueError as exc:
                # e.g. "Requested tokens (9000) exceed context window of 8192"
                raise ModelError(f"{self.name}: {exc}") from None
            except Exception as exc:
                raise ModelError(
                    f"{self.name}: generation failed: {type(exc).__name__}: {exc}"
                ) from exc

    def _async_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._async_locks.get(loop)
        if lock is None:
            self._async_locks = {k: v for k, v in self._async_locks.items() if not k.is_closed()}
            lock = self._async_locks[loop] = asyncio.Lock()
        return lock

    async def _complete(
        self,
        messages: list[Message],
        max_tokens: int,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """Generate a reply in a worker thread (loading the model first if needed).

        Raises:
            ModelNotAvailable: llama-cpp-python missing, or the GGUF file missing.
            ModelError: the load failed, the prompt does not fit ``n_ctx``, or no reply
                within ``spec.timeout_s`` seconds (``retryable=True``).
        """
        start = time.monotonic()
        abort = _Abort(eos=-1, deadline=start + self.spec.timeout_s)
        async with self._async_lock():
            if time.monotonic() > abort.deadline:  # waited for the lock too long
                abort.timed_out = True
                raise ModelError(
                    f"{self.name}: no reply within {self.spec.timeout_s:g} s", retryable=True
                )
            try:
                response = await asyncio.to_thread(
                    self._generate, messages, max_tokens, abort, stop, sampling
                )
            except asyncio.CancelledError:
                abort.cancelled.set()  # the worker thread stops at its next token
                raise
        if abort.timed_out:
            raise ModelError(
                f"{self.name}: no reply within {self.spec.timeout_s:g} s", retryable=True
            )
        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
        usage = response.get("usage") or {}
        return self._completion(
            messages,
            text,
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            latency_s=time.monotonic() - start,
            finish_reason=choice.get("finish_reason"),
            stop_sequence=response.get("stop_sequence"),
        )

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the model's tokenizer once loaded (no BOS), else the estimate."""
        llm = self._llm
        if llm is None or not text:
            return super().count_tokens(text)
        # as sent: a lone surrogate (model code can print one) has no UTF-8 encoding
        data = encodable_text(text).encode("utf-8")
        return len(llm.tokenize(data, add_bos=False, special=False))

    async def aclose(self) -> None:
        """Free the weights (waits for a running generation to finish)."""

        def close() -> None:
            with self._lock:
                llm, self._llm = self._llm, None
                if llm is not None:
                    llm.close()

        await asyncio.to_thread(close)

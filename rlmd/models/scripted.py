"""Scripted models: deterministic replies, so a whole run is reproducible without a model.

Select one with ``scripted:FILE.json`` or ``scripted:path/to/file.py:function_name`` (CLI and
config), or from Python with ``ModelSpec(..., provider="scripted", options={"callable": fn})``.

Script file format (JSON)::

    {
      "responses": ["first reply", "second reply"],
      "rules": [
        {"match": "(?i)summari[sz]e", "response": "A summary."}
      ],
      "default": "reply once responses run out",
      "delay_s": 0.0
    }

For each call, against the content of the **last user message**:

1. ``rules`` are tried in order; the first whose ``match`` regex is found in it
   (``re.search`` with ``re.DOTALL``) gives the reply. Rules are not consumed, so
   concurrent or batched sub-calls get the same reply whatever order they run in.
2. Otherwise the next item of ``responses`` is consumed. Calls take items in the order they
   start, and concurrent calls never take the same item.
3. When ``responses`` is used up: ``default`` if given, else
   ``ModelError("script exhausted after N responses")``.

All keys are optional. ``delay_s`` (seconds, default 0) is slept before each reply to
simulate latency. A plain JSON list ``["a", "b"]`` is shorthand for ``{"responses": [...]}``.

Python callables: ``fn(messages: list[dict]) -> str`` (it may also be ``async``); it
receives the full chat messages and its return value is the reply.

Usage is counted with :func:`rlmd.models.tokens.count_tokens` (prompt: the messages plus
framing, see ``Model.count_messages``; output: the reply), and the cost comes from the
spec's prices, so USD budgets can be tested without a provider.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmd.models.base import Completion, Message, Model, ModelError, ModelNotAvailable, ModelSpec

_KEYS = {"responses", "rules", "default", "delay_s"}


@dataclass
class Script:
    """A parsed script file (see the module docstring)."""

    responses: list[str] = field(default_factory=list)
    rules: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    default: str | None = None
    delay_s: float = 0.0

    @classmethod
    def parse(cls, data: Any, source: str = "script") -> Script:
        """Build a script from decoded JSON.

        Raises:
            ModelError: unknown key, wrong type, or a bad regex (the message names ``source``).
        """

        def bad(why: str) -> ModelError:
            return ModelError(f"{source}: {why}")

        if isinstance(data, list):
            data = {"responses": data}
        if not isinstance(data, dict):
            raise bad("expected a JSON object or list")
        unknown = set(data) - _KEYS
        if unknown:
            raise bad(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
        responses = data.get("responses", [])
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise bad('"responses" must be a list of strings')
        default = data.get("default")
        if default is not None and not isinstance(default, str):
            raise bad('"default" must be a string')
        delay = data.get("delay_s", 0.0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise bad('"delay_s" must be a number of seconds >= 0')
        rules = []
        for i, rule in enumerate(data.get("rules", [])):
            if (
                not isinstance(rule, dict)
                or set(rule) != {"match", "response"}
                or not all(isinstance(v, str) for v in rule.values())
            ):
                raise bad(f'rules[{i}] must be {{"match": str, "response": str}}')
            try:
                rules.append((re.compile(rule["match"], re.DOTALL), rule["response"]))
            except re.error as exc:
                raise bad(f"rules[{i}].match is not a valid regex: {exc}") from None
        return cls(list(responses), rules, default, float(delay))


def last_user_message(messages: list[Message]) -> str:
    """The content of the last ``user`` message ("" if there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message.get("content") or ""
    return ""


def load_callable(ref: str) -> Callable[..., Any]:
    """Import ``"path/to/file.py:function_name"`` and return the function.

    Raises:
        ModelNotAvailable: the file does not exist.
        ModelError: the file cannot be imported or has no such callable.
    """
    file, _, func = ref.rpartition(":")
    path = Path(file).expanduser()
    if not path.is_file():
        raise ModelNotAvailable(f"scripted model file not found: {path}")
    module_name = f"_rlmd_scripted_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ModelError(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise ModelError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ModelError(f"{path} has no function {func!r}")
    return fn


class ScriptedModel(Model):
    """Replies from a script file or a Python callable (see the module docstring).

    The source is ``spec.options["callable"]`` if set, else ``spec.model``: a ``.json``
    script path or ``file.py:function``. It is loaded on the first call. Each run tree gets
    its own instance (``per_run``): a daemon's next task starts at the first response again.
    """

    per_run = True

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self._lock = threading.Lock()
        self._script: Script | None = None
        self._fn: Callable[..., Any] | None = spec.options.get("callable")
        self._next = 0

    def _source_ref(self) -> tuple[str, Path]:
        """``("json" | "py", file path)`` of a file source."""
        ref = self.spec.model
        if re.search(r"\.py:[A-Za-z_]\w*$", ref):
            return "py", Path(ref.rpartition(":")[0]).expanduser()
        return "json", Path(ref).expanduser()

    def availability(self) -> str | None:
        """``None``, or a reason when the script file does not exist."""
        if self._fn is not None or self._script is not None:
            return None
        _, path = self._source_ref()
        return None if path.is_file() else f"script file not found: {path}"

    def _load(self) -> None:
        with self._lock:
            if self._fn is not None or self._script is not None:
                return
            kind, path = self._source_ref()
            if kind == "py":
                self._fn = load_callable(self.spec.model)
                return
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise ModelNotAvailable(f"script file not found: {path}") from None
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ModelError(f"{path}: invalid JSON: {exc}") from None
            self._script = Script.parse(data, str(path))

    def _pick(self, messages: list[Message]) -> str:
        script = self._script
        assert script is not None
        prompt = last_user_message(messages)
        for pattern, response in script.rules:
            if pattern.search(prompt):
                return response
        with self._lock:
            if self._next < len(script.responses):
                self._next += 1
                return script.responses[self._next - 1]
        if script.default is not None:
            return script.default
        raise ModelError(f"{self.name}: script exhausted after {len(script.responses)} responses")

    async def _complete(
        self,
        messages: list[Message],
        max_tokens: int,
        stop: list[str] | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> Completion:
        """The scripted reply; ``max_tokens`` is not applied (the script is replayed as is).
        ``stop`` cuts the reply (in :meth:`Model.complete`), as a server would.

        Raises:
            ModelNotAvailable: the script file does not exist.
            ModelError: bad script, exhausted script, or the callable raised.
        """
        start = time.monotonic()
        self._load()
        if self._fn is not None:
            try:
                text = self._fn(messages)
                if inspect.isawaitable(text):
                    text = await text
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(
                    f"{self.name}: callable raised {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(text, str):
                raise ModelError(f"{self.name}: callable returned {type(text).__name__}, not str")
        else:
            text = self._pick(messages)
            if self._script and self._script.delay_s:
                await asyncio.sleep(self._script.delay_s)
        return self._completion(
            messages,
            text,
            input_tokens=None,
            output_tokens=None,
            latency_s=time.monotonic() - start,
            finish_reason="stop",
        )

    @property
    def consumed(self) -> int:
        """How many ``responses`` items have been used so far."""
        return self._next

"""Scripted-model helpers for engine tests: reply builders, conversation readers and a
registry of scripted callables."""

from __future__ import annotations

import re
from collections.abc import Callable

from rlmd import config
from rlmd.models.base import ModelSpec
from rlmd.models.registry import Registry


def repl(code: str) -> str:
    """A model reply holding one ```repl block."""
    return f"Let me look.\n```repl\n{code.strip()}\n```\n"


def last_user(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def question_of(messages: list[dict]) -> str:
    """The question of the run this conversation belongs to (from its first user turn)."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    m = re.match(r"Question: (.*?)\n\nAbout `context`", first, re.DOTALL)
    return m.group(1) if m else first


def turn_of(messages: list[dict]) -> int:
    """0 for the first root call of a run, 1 for the second, ...: the engine's "Turn N of M"
    note closing the last user message, else the replies so far (a turn folded out of the
    model's view, see ``fold_failed_turns``, leaves no reply behind but moves the note on)."""
    last = messages[-1]["content"] if messages[-1]["role"] == "user" else ""
    notes = re.findall(r"^Turn (\d+) of \d+", last, re.M)
    if notes:
        return int(notes[-1]) - 1
    return sum(1 for m in messages if m["role"] == "assistant")


def scripted_registry(**models: Callable[[list[dict]], str] | dict) -> Registry:
    """A registry whose models are scripted callables: ``name=fn`` or
    ``name={"callable": fn, "price_input": ..., "context_window": ...}``."""
    registry = config.load(None).registry()
    for name, value in models.items():
        opts = value if isinstance(value, dict) else {"callable": value}
        fn = opts.pop("callable")
        spec = ModelSpec(
            name=name, provider="scripted", model=name, options={"callable": fn}, **opts
        )
        registry.add(spec)
    return registry

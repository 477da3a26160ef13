"""A fake host for sandbox tests: answers the kernel's host calls (``llm_query``, tools) and
records them; ``run``/``ok`` execute a cell (``ok`` asserts it raised nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmd.sandbox.base import CallError, CellResult, Sandbox


class FakeHost:
    """A CallHandler that records every call and answers predictably."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.delay = delay

    async def __call__(self, fn: str, args: dict[str, Any]) -> Any:
        self.calls.append((fn, args))
        if self.delay:
            await asyncio.sleep(self.delay)
        if fn == "llm_query":
            if args["prompt"] == "fail":
                raise CallError("the model is down")
            if args["prompt"] == "crash":
                raise KeyError("oops")
            return f"answer to {args['prompt']}" + (f" by {args['model']}" if args["model"] else "")
        if fn == "llm_query_batched":
            return [f"answer to {p}" for p in args["prompts"]]
        if fn == "rlm_query":
            return f"rlm({args['prompt']}, {args['context']!r})"
        if fn == "rlm_query_batched":
            contexts = args["contexts"] or [None] * len(args["prompts"])
            return [f"rlm({p}, {c!r})" for p, c in zip(args["prompts"], contexts, strict=True)]
        if fn == "tool":
            if args["name"] == "broken":
                raise CallError("tool exploded")
            return {"tool": args["name"], "args": args["args"], "kwargs": args["kwargs"]}
        raise CallError(f"unknown fn {fn}")


async def run(sb: Sandbox, code: str, **kw: Any) -> CellResult:
    return await sb.execute(code, **kw)


async def ok(sb: Sandbox, code: str, **kw: Any) -> CellResult:
    r = await sb.execute(code, **kw)
    assert r.error is None, r.error
    return r

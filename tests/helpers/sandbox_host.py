"""A fake host for sandbox tests: answers the kernel's host calls (``llm_query``, tools) and
records them; ``run``/``ok`` execute a cell (``ok`` asserts it raised nothing)."""

from __future__ import annotations

import asyncio
import time
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


def started_mark(condition: str = "True") -> str:
    """Cell code that, once ``condition`` holds in the REPL, calls ``llm_query('started')``
    from a side thread: :func:`until_called` then knows the cell is really running, while the
    cell's main thread never waits on the host (so an interrupt lands in the cell's own code)."""
    return (
        "import threading as _threading\n"
        "def _mark():\n"
        f"    while not ({condition}):\n"
        "        pass\n"
        "    try:\n"
        "        llm_query('started')\n"
        "    except BaseException:\n"  # failed by the interrupt that the mark let in: fine
        "        pass\n"
        "_threading.Thread(target=_mark, daemon=True).start()\n"
    )


async def until_called(host: FakeHost, prompt: str = "started", within_s: float = 60.0) -> None:
    """Wait until the sandbox has called ``llm_query(prompt)`` (a deadline, not a guess)."""
    deadline = time.monotonic() + within_s
    while not any(fn == "llm_query" and a.get("prompt") == prompt for fn, a in host.calls):
        assert time.monotonic() < deadline, f"no llm_query({prompt!r}) within {within_s} s"
        await asyncio.sleep(0.01)

"""Scripted models for the daemon tests and the load benchmark (standard library only: the
daemon imports this file by path through ``scripted:FILE.py:FUNCTION``).

``cells``: the question is a JSON object ``{"cells": [code, ...], "sleep_s": s}``; turn *i*
replies with cell *i* (prefixed with a line that reads ``context``), and once the cells are
used up with ``FINAL('done')``. ``sleep_s`` (seconds, optional) is awaited before every reply,
so a run can be caught in the middle of a model call; ``gate`` (a file path, optional): every
reply waits until that file exists, so a test holds the run in a model call for exactly as
long as it needs (no guess at how long the machine takes to get there). A plain-text prompt (a sub-call from
``llm_query``) gets ``"sub: <first 40 characters>"``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path


def _question(messages: list[dict]) -> str | None:
    for m in messages:
        if m.get("role") == "user":
            found = re.match(r"Question: (.*?)\n\nAbout `context`", m["content"], re.DOTALL)
            return found.group(1) if found else None
    return None


async def cells(messages: list[dict]) -> str:
    question = _question(messages)
    if question is None:
        last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return f"sub: {last[:40]}"
    try:
        spec = json.loads(question)
    except ValueError:
        spec = {"cells": []}
    if spec.get("gate"):
        gate = Path(spec["gate"])
        while not gate.exists():
            await asyncio.sleep(0.02)
    if spec.get("sleep_s"):
        await asyncio.sleep(float(spec["sleep_s"]))
    turn = sum(1 for m in messages if m["role"] == "assistant")
    todo = spec.get("cells") or []
    code = todo[turn] if turn < len(todo) else "FINAL('done')"
    return f"```repl\n_n = len(context)\n{code}\n```"


def system_echo(messages: list[dict]) -> str:
    """Answers with the system prompt's workspace note (what the model was told)."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    note = (
        system.split("About this workspace:", 1)[1].strip()
        if "About this workspace:" in system
        else ""
    )
    if sum(1 for m in messages if m["role"] == "assistant") == 0:
        return "```repl\n_n = len(context)\nprint('looked')\n```"
    return "```repl\nFINAL(" + repr(note or "no note") + ")\n```"

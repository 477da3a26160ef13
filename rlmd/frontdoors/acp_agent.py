"""``rlmd acp``: the daemon as an Agent Client Protocol agent on stdio (the
``agent-client-protocol`` SDK), for editors such as Zed.

A session is a workspace (the session's ``cwd``); a prompt is a task in it. While the task
runs, ``session/update`` streams what it does: each root iteration and the root model's
reasoning as thought chunks, each REPL cell as an ``execute`` tool call (code in, output
out), each sub-call and child run as a ``think`` tool call, then the answer as the agent's
message (labelled when a budget stopped the run). ``session/cancel`` cancels the task's whole
run tree. Follow-up prompts in a session run in the same workspace, so the REPL's variables
carry over.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp.schema import (
    AgentCapabilities,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
)

import rlmd
from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    IterationStarted,
    ModelCallFinished,
    RunFinished,
    RunStarted,
    type_of,
)
from rlmd.frontdoors.acp_stdio import LINE_LIMIT_BYTES, CheckedStdio
from rlmd.frontdoors.link import DaemonLink, LazyLink, ending
from rlmd.server.client import RpcError

#: run status → ACP stop reason (anything else ends the turn normally, the message says why)
STOP_REASONS: dict[str, StopReason] = {
    "cancelled": "cancelled",
    "max_tokens": "max_tokens",
    "max_iterations": "max_turn_requests",
    "max_subcalls": "max_turn_requests",
}
_REPL_BLOCK = re.compile(r"```repl\n.*?(```|$)", re.DOTALL)


@dataclass
class Defaults:
    """Models (``{"root", "sub"}``) and budgets (``rlmd.task.start``'s ``budgets.*``) for
    every prompt."""

    models: dict[str, str] = field(default_factory=dict)
    budgets: dict[str, Any] = field(default_factory=dict)


@dataclass
class Session:
    workspace: str
    #: the run id of the task the current prompt runs, while it runs
    run_id: str | None = None
    cancelled: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def question_of(blocks: list[Any]) -> str:
    """The task's question from a prompt's content blocks: the text, links named, embedded
    text resources appended (each under its URI)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"({block.uri})")
        elif isinstance(block, EmbeddedResourceContentBlock):
            text = getattr(block.resource, "text", None)
            if text is not None:
                parts.append(f"\n{block.resource.uri}:\n{text}")
    return "\n".join(p for p in parts if p).strip()


def updates_for(event: dict[str, Any]) -> list[Any]:
    """The ``session/update`` payloads for one ``rlmd/event`` (summary detail) of the task."""
    kind, depth, data = type_of(event["kind"]), event.get("depth") or 0, event.get("data") or {}
    where = f" (depth {depth})" if depth else ""
    if kind is IterationStarted and depth == 0:
        return [acp.update_agent_thought_text(f"Iteration {data.get('index', 0) + 1}\n")]
    if kind is ModelCallFinished and data.get("role") == "root" and depth == 0:
        reasoning = _REPL_BLOCK.sub("", data.get("response") or "").strip()
        return [acp.update_agent_thought_text(reasoning + "\n")] if reasoning else []
    if kind is CellStarted:
        code = data.get("code") or ""
        first = next((ln for ln in code.splitlines() if ln.strip()), "")
        return [
            acp.start_tool_call(
                event["node_id"],
                f"Python cell{where}: {first[:60]}",
                kind="execute",
                status="in_progress",
                raw_input={"code": code},
            )
        ]
    if kind is CellFinished:
        error = data.get("error")
        shown = "".join(
            [data.get("stdout") or "", data.get("stderr") or "", f"\n{error}" if error else ""]
        )
        return [
            acp.update_tool_call(
                event["node_id"],
                status="failed" if error else "completed",
                content=[acp.tool_content(acp.text_block(shown or "(no output)"))],
                raw_output={k: data.get(k) for k in ("stdout", "stderr", "error", "final")},
            )
        ]
    if kind is ModelCallFinished and data.get("role") == "sub":
        reply = data.get("error") or data.get("response") or ""
        return [
            acp.start_tool_call(
                event["node_id"],
                f"Sub-call{where}: {data.get('model')}",
                kind="think",
                status="failed" if data.get("error") else "completed",
                content=[acp.tool_content(acp.text_block(reply))],
            )
        ]
    if kind is RunStarted and depth:
        return [
            acp.start_tool_call(
                f"run-{event['run_id']}",
                f"Child run (depth {depth}): {(data.get('question') or '')[:80]}",
                kind="think",
                status="in_progress",
            )
        ]
    if kind is RunFinished and depth:
        answer = data.get("answer") or data.get("error") or data.get("status") or ""
        return [
            acp.update_tool_call(
                f"run-{event['run_id']}",
                status="completed" if data.get("status") == "completed" else "failed",
                content=[acp.tool_content(acp.text_block(answer))],
            )
        ]
    return []


class RlmdAgent:
    """The ACP agent (an :class:`acp.Agent`): sessions map to daemon workspaces."""

    def __init__(self, defaults: Defaults, *, autostart: bool = True) -> None:
        self.defaults = defaults
        self.sessions: dict[str, Session] = {}
        self._client: Any = None
        self._link = LazyLink(autostart=autostart)

    def on_connect(self, conn: Any) -> None:
        self._client = conn

    async def link(self) -> DaemonLink:
        try:
            return await self._link.get()
        except ConnectionError as exc:
            raise acp.RequestError(-32603, str(exc)) from exc

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=False, prompt_capabilities=PromptCapabilities(embedded_context=True)
            ),
            agent_info=Implementation(name="rlmd", title="rlmd", version=rlmd.__version__),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        folder = Path(cwd).expanduser()
        if not folder.is_absolute():  # "" was the folder rlmd acp started in
            raise acp.RequestError.invalid_params(
                {"cwd": f"must be an absolute path (ACP), not {cwd!r}"}
            )
        if not folder.is_dir():
            raise acp.RequestError.invalid_params({"cwd": f"not a folder: {cwd}"})
        session_id = uuid.uuid4().hex
        self.sessions[session_id] = Session(str(folder.resolve()))
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        session = self._session(session_id)
        question = question_of(prompt)
        if not question:
            raise acp.RequestError.invalid_params({"prompt": "the prompt has no text"})
        params = {
            "workspace": session.workspace,
            "question": question,
            "models": dict(self.defaults.models),
            "budgets": dict(self.defaults.budgets),
        }
        async with session.lock:  # one prompt at a time per session
            session.cancelled = False
            link = await self.link()
            status: dict[str, Any] = {}
            try:
                async for note in link.follow(params):
                    if note["method"] == "rlmd/taskStatus":
                        status = note["params"]
                        session.run_id = status["run_id"]
                        if session.cancelled:  # cancelled before the run id was known
                            await link.command("rlmd.task.cancel", {"run_id": session.run_id})
                            session.cancelled = False
                        continue
                    for update in updates_for(note["params"]):
                        await self._client.session_update(session_id=session_id, update=update)
            except RpcError as exc:
                raise acp.RequestError(exc.code, exc.message, exc.data) from exc
            except ConnectionError as exc:
                raise acp.RequestError(-32603, str(exc)) from exc
            finally:
                session.run_id = None
            await self._client.session_update(
                session_id=session_id, update=acp.update_agent_message_text(_message(status))
            )
            return PromptResponse(
                stop_reason=STOP_REASONS.get(status.get("status") or "", "end_turn"),
                field_meta={
                    "rlmd": {"run_id": status.get("run_id"), "status": status.get("status")}
                },
            )

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            return
        if session.run_id is None:
            session.cancelled = True
            return
        link = await self.link()
        try:
            await link.command("rlmd.task.cancel", {"run_id": session.run_id})
        except RpcError:
            pass  # it finished meanwhile

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"sessionId": f"no session {session_id}"})
        return session


def _message(status: dict[str, Any]) -> str:
    answer = status.get("answer")
    how = ending(status)
    if how == "completed":
        return answer or "(no answer)"
    return f"{answer}\n\n({how})" if answer else f"({how})"


def main(defaults: Defaults, *, autostart: bool = True) -> int:
    """Serve ACP on stdin/stdout until the client closes it; returns the exit code."""
    # cast: the SDK routes only the methods an agent defines (the rest answer "method not
    # found"), so RlmdAgent implements the protocol's required part, not all of it
    agent = cast(acp.Agent, RlmdAgent(defaults, autostart=autostart))
    asyncio.run(_serve(agent))
    return 0


async def _serve(agent: acp.Agent) -> None:
    """:func:`acp.run_agent` over stdin/stdout through :class:`CheckedStdio`: a line that
    is not a JSON-RPC message is answered and skipped (the SDK's reader logged a traceback,
    and ``42`` or ``null`` stopped the agent)."""
    reader, writer = await acp.stdio_streams(limit=LINE_LIMIT_BYTES)
    notifications = frozenset({acp.meta.AGENT_METHODS["session_cancel"]})  # the one rlmd takes
    await acp.run_agent(agent, CheckedStdio(reader, writer, notifications=notifications))

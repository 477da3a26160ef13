"""``rlmd mcp``: the daemon as a Model Context Protocol server on stdio (the ``mcp`` SDK).

Tools (each one daemon command, see ``docs/protocol.md``):

``ask(question, workspace?, models?, budgets?)``
    runs a task in the workspace (default: the folder ``rlmd mcp`` was started in) and
    returns the answer, how the run ended, ``path:line`` citations found in the answer, the
    run id and usage. Progress notifications (iteration, cell, sub-calls, tokens, spend) go
    to a client that sent a progress token; cancelling the request cancels the run tree.
``runs(limit?, search?, status?, workspace?)``, ``trajectory(run_id, messages?)``,
``cancel(run_id)``, ``workspace_variables(workspace?, offset?, limit?, match?)``
    the store and the workspace, read-only but for ``cancel``.
``exec_cell(code, workspace?, timeout_s?)``
    only with ``rlmd mcp --allow-exec``: runs a cell in the workspace's REPL.

Resources: ``rlmd://runs`` (recent runs, with their trajectory URIs) and
``rlmd://runs/{run_id}`` (a run's trajectory, as ``rlmd export`` writes it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

import rlmd
from rlmd import config
from rlmd.frontdoors.link import DaemonLink, LazyLink, TaskProgress, citations, ending
from rlmd.frontdoors.mcp_stdio import checked_stdio_server
from rlmd.kernel.protocol import MAX_VARS_PAGE
from rlmd.server.client import RpcError

INSTRUCTIONS = (
    "rlmd answers questions about a whole codebase with a Recursive Language Model: the "
    "code is loaded as `context` in a Python REPL kept warm between questions, and a model "
    "inspects it with code and sub-model calls. Use `ask` for questions that need reading "
    "much of the repository; answers cite path:line."
)


@dataclass
class Defaults:
    """What ``ask`` uses when the call does not say: the workspace folder, models
    (``{"root", "sub"}``) and budgets (``rlmd.task.start``'s ``budgets.*``)."""

    workspace: Path
    models: dict[str, str] = field(default_factory=dict)
    budgets: dict[str, Any] = field(default_factory=dict)


class Bridge:
    """The daemon connection, opened on first use (so the MCP handshake never waits for a
    daemon to start)."""

    def __init__(self, autostart: bool = True) -> None:
        self._link = LazyLink(autostart=autostart)

    async def link(self) -> DaemonLink:
        try:
            return await self._link.get()
        except ConnectionError as exc:
            raise ToolError(str(exc)) from exc

    async def command(self, name: str, params: dict[str, Any] | None = None) -> Any:
        link = await self.link()
        try:
            return await link.command(name, params)
        except RpcError as exc:
            raise ToolError(exc.message) from exc
        except (ConnectionError, TimeoutError) as exc:
            raise ToolError(f"the rlmd daemon did not answer {name}: {exc}") from exc


def _trimmed_run(run: dict[str, Any]) -> dict[str, Any]:
    keep: tuple[str, ...] = ("id", "status", "question", "answer", "answer_source", "error")
    keep += ("root_model",)
    keep += ("workspace", "iterations", "started_at", "finished_at", "tree")
    return {k: run.get(k) for k in keep} | {"uri": f"rlmd://runs/{run['id']}"}


def _without_messages(node: Any) -> Any:
    """The tree with each model call's ``messages`` replaced by their count (the prompts
    repeat the whole conversation every turn)."""
    if isinstance(node, list):
        return [_without_messages(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_messages(v) for k, v in node.items() if k != "messages"}
    if isinstance(node.get("messages"), list):
        out["messages_count"] = len(node["messages"])
    return out


def build_server(defaults: Defaults, *, allow_exec: bool = False, autostart: bool = True):
    """The MCP server (an :class:`mcp.server.mcpserver.MCPServer`, not started)."""
    bridge = Bridge(autostart)
    server: MCPServer = MCPServer(
        "rlmd", instructions=INSTRUCTIONS, version=rlmd.__version__, log_level="WARNING"
    )

    def folder(workspace: str | None) -> str:
        """The workspace a tool call names, which must lie inside the server's root (a
        relative one is relative to it)."""
        if not workspace:
            return str(defaults.workspace)
        path = (defaults.workspace / Path(workspace).expanduser()).resolve()
        if not path.is_relative_to(defaults.workspace):
            raise ToolError(
                f"workspace {workspace!r} ({path}) is outside {defaults.workspace}, the folder "
                "this rlmd mcp server serves; a workspace must be that folder or one inside it "
                "(start rlmd mcp with --workspace to serve another)"
            )
        return str(path)

    def client_models(models: dict[str, str] | None) -> dict[str, str]:
        """``models`` as the client named them, each one the user configured (the built-ins,
        the user config) or gave ``rlmd mcp``: never a file (``scripted:``, ``local:PATH``)
        the daemon would load and run, nor a hosted model the user did not choose."""
        if not models:
            return {}
        try:
            allowed = config.user_model_names() | set(defaults.models.values())
            config.check_model_names(
                [(f"models.{k}", v) for k, v in models.items()], "ask", allowed, "an MCP client"
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return models

    async def run_ref(run_id: str) -> str:
        """``run_id``, or for ``last`` the newest run's id (as the CLI's ``rlmd show last``)."""
        if run_id != "last":
            return run_id
        runs = (await bridge.command("rlmd.runs.list", {"limit": 1}))["runs"]
        if not runs:
            raise ToolError("no runs recorded yet")
        return str(runs[0]["id"])

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False))
    async def ask(
        question: str,
        ctx: Context,
        workspace: str | None = None,
        models: dict[str, str] | None = None,
        budgets: dict[str, float] | None = None,
    ) -> CallToolResult:
        """Answer a question about a codebase with a Recursive Language Model (the code is
        loaded as `context` in a warm Python REPL; the model reads it with code and
        sub-model calls). workspace: the project folder, inside the server's (the default);
        models: {"root": name, "sub": name}, names the user configured; budgets: {"max_iterations", "max_depth",
        "max_seconds", "max_tokens", "max_usd", "max_subcalls"}. Returns the answer with
        path:line citations, how the run ended, the run id and usage."""
        params = {
            "workspace": folder(workspace),
            "question": question,
            "models": {**defaults.models, **client_models(models)},
            "budgets": {**defaults.budgets, **(budgets or {})},
        }
        link = await bridge.link()
        progress = TaskProgress()
        status: dict[str, Any] = {}
        said = ""
        try:
            async for note in link.follow(params):
                progress.update(note)
                if note["method"] == "rlmd/taskStatus":
                    status = note["params"]
                if progress.line() != said:  # one notification per change, not per event
                    said = progress.line()
                    await ctx.report_progress(progress.iterations, None, said)
        except RpcError as exc:
            raise ToolError(exc.message) from exc
        except ConnectionError as exc:
            raise ToolError(str(exc)) from exc
        except BaseException:
            # the client cancelled the request (or the server stops): stop the run tree
            if status.get("run_id") and status.get("state") != "finished":
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await link.command("rlmd.task.cancel", {"run_id": status["run_id"]})
            raise
        return _answer_result(status)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def runs(
        limit: int = 20,
        search: str | None = None,
        status: str | None = None,
        workspace: str | None = None,
    ) -> dict[str, Any]:
        """Recorded runs, newest first (search: full text over questions, answers, code and
        outputs; status: completed, cancelled, max_iterations, failed...)."""
        params: dict[str, Any] = {"limit": max(1, min(limit, 500))}
        if search:
            params["search"] = search
        if status:
            params["status"] = status
        if workspace:
            params["workspace"] = folder(workspace)
        result = await bridge.command("rlmd.runs.list", params)
        return {"runs": [_trimmed_run(r) for r in result["runs"]]}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def trajectory(run_id: str, messages: bool = False) -> dict[str, Any]:
        """A run's recorded tree: iterations, model calls, cells (code, output) and child
        runs. run_id: an id, a unique prefix, or "last". messages: include every model
        call's full prompt (large)."""
        run_id = await run_ref(run_id)
        result = await bridge.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        if result.get("run") is None:
            return {"run": None, "task": result.get("task")}
        tree = result["tree"]
        return {"run": tree if messages else _without_messages(tree)}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    async def cancel(run_id: str) -> dict[str, Any]:
        """Cancel a queued or running task and its whole run tree (child runs too)."""
        return await bridge.command("rlmd.task.cancel", {"run_id": run_id})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def workspace_variables(
        workspace: str | None = None, offset: int = 0, limit: int = 200, match: str = ""
    ) -> dict[str, Any]:
        """The variables the workspace's REPL holds (name, type, size, preview), which a
        next question can use: one page of them sorted by name, `limit` (1 to 2000) from
        `offset`, only names containing `match` if given. `total` says how many there are;
        `next_offset` is where the next page starts (null: this is the last one)."""
        params: dict[str, Any] = {
            "workspace": folder(workspace),
            "offset": max(0, offset),
            "limit": max(1, min(limit, MAX_VARS_PAGE)),
        }
        if match:
            params["match"] = match
        return await bridge.command("rlmd.workspace.variables", params)

    if allow_exec:

        @server.tool(annotations=ToolAnnotations(destructive_hint=True))
        async def exec_cell(
            code: str, workspace: str | None = None, timeout_s: float = 60.0
        ) -> dict[str, Any]:
            """Run Python in the workspace's REPL (the same REPL the model uses: it sees the
            model's variables and the next question sees yours). Returns stdout, stderr,
            the error and the variables set."""
            return await bridge.command(
                "rlmd.workspace.exec",
                {"workspace": folder(workspace), "code": code, "timeout_s": timeout_s},
            )

    @server.resource("rlmd://runs", mime_type="application/json")
    async def recent_runs() -> str:
        """The 50 most recent runs, each with its trajectory's URI."""
        result = await bridge.command("rlmd.runs.list", {"limit": 50})
        return json.dumps([_trimmed_run(r) for r in result["runs"]], ensure_ascii=False)

    @server.resource("rlmd://runs/{run_id}", mime_type="application/json")
    async def run_trajectory(run_id: str) -> str:
        """A run's trajectory (the tree ``rlmd export`` writes)."""
        run_id = await run_ref(run_id)
        result = await bridge.command("rlmd.runs.get", {"run_id": run_id, "tree": True})
        return json.dumps(
            {"format": "rlmd-trajectory", "version": 1, "run": result.get("tree")},
            ensure_ascii=False,
        )

    return server


def _answer_result(status: dict[str, Any]) -> CallToolResult:
    usage = (status.get("final_usage") or {}).get("total") or status.get("usage") or {}
    cited = citations(status.get("answer"), status.get("workspace") or ".")
    how = ending(status)
    structured = {
        "answer": status.get("answer"),
        "run_id": status.get("run_id"),
        "status": status.get("status"),
        "ending": how,
        "answer_source": status.get("answer_source"),
        "error": status.get("error"),
        "citations": cited,
        "iterations": status.get("iterations"),
        "usage": usage,
    }
    tokens = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    footer = (
        f"[rlmd run {status.get('run_id')} · {how} · {status.get('iterations')} iterations · "
        f"{tokens:,} tokens · ${usage.get('cost_usd') or 0:.4f}]"
    )
    text = f"{status.get('answer') or '(no answer)'}\n\n{footer}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=status.get("status") in ("failed", "sandbox_failed"),
    )


def main(defaults: Defaults, *, allow_exec: bool = False, autostart: bool = True) -> int:
    """Serve MCP on stdin/stdout until the client closes it; returns the exit code. A line
    that is not a JSON-RPC message is answered and skipped (:mod:`.mcp_stdio`)."""
    server = build_server(defaults, allow_exec=allow_exec, autostart=autostart)
    anyio.run(_serve_stdio, server)
    return 0


async def _serve_stdio(server: MCPServer) -> None:
    """``MCPServer.run_stdio_async`` with :func:`.mcp_stdio.checked_stdio_server` for the SDK's
    ``stdio_server`` (the SDK offers no other way to give its stdio transport a stdin)."""
    lowlevel = server._lowlevel_server
    async with checked_stdio_server() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

"""The ``mcp`` and ``acp`` subcommands of ``rlmd`` (arguments and dispatch): the front doors
of :mod:`rlmd.frontdoors`, each a stdio server over the user's daemon."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any

EXTRA_HINT = "install it with: pip install 'rlmd[{extra}]'"


def _task_defaults(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", help="root model (default: config [run] model)")
    p.add_argument("--sub-model", help="model for sub-calls and child runs")
    p.add_argument("--max-iterations", type=int, help="root turns per loop")
    p.add_argument("--max-depth", type=int, help="RLM loops run at depths 0..N-1")
    p.add_argument("--max-seconds", type=float, help="wall-clock budget per task, seconds")
    p.add_argument("--max-tokens", type=int, help="token budget per task (whole tree)")
    p.add_argument("--max-usd", type=float, help="USD budget per task (whole tree)")
    p.add_argument("--no-start", action="store_true", help="fail instead of starting a daemon")


def add_door_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``mcp`` and ``acp`` to the ``rlmd`` subparsers."""
    m = sub.add_parser(
        "mcp", help="serve the daemon as an MCP server on stdio (Claude Code, Cursor, VS Code)"
    )
    _task_defaults(m)
    m.add_argument("--workspace", "-w", help="project folder (default: the current folder)")
    m.add_argument(
        "--allow-exec",
        action="store_true",
        help="offer the exec_cell tool (the MCP client may run Python in the workspace REPL)",
    )
    a = sub.add_parser(
        "acp",
        help="serve the daemon as an ACP agent on stdio (Zed...): a session's folder is its workspace",
    )
    _task_defaults(a)


def _models_and_budgets(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]]:
    models = {k: v for k, v in (("root", args.model), ("sub", args.sub_model)) if v}
    names = ("max_iterations", "max_depth", "max_seconds", "max_tokens", "max_usd")
    budgets = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    return models, budgets


def workspace_folder(given: str | None) -> tuple[Path | None, str | None]:
    """``--workspace`` (``None``: the current folder) resolved, and ``None``; or ``None`` and
    why it cannot be a workspace (:func:`folder_problem`, a symbolic link loop, a current
    folder that was deleted: ``Path.resolve()`` raised those, a traceback)."""
    try:
        folder = Path(given or ".").expanduser().resolve()
    except FileNotFoundError:  # os.getcwd(): the current folder is gone
        return None, "the current folder is gone (deleted?); cd to a folder or give --workspace"
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        why = getattr(exc, "strerror", None) or os.strerror(errno.ELOOP)
        return None, f"--workspace {given}: {why[:1].lower()}{why[1:]}"
    said = folder_problem(folder)
    return (None, said) if said else (folder, None)


def folder_problem(workspace: Path) -> str | None:
    """Why ``--workspace`` (resolved) cannot be a workspace, else ``None``: no such folder,
    or not a folder (a file was "no such folder" too, review17)."""
    if workspace.is_dir():
        return None
    if workspace.exists():
        return f"--workspace {workspace} is not a folder"
    return f"--workspace: no such folder: {workspace}"


def _stdio_problem() -> str | None:
    """Why stdin/stdout cannot carry ACP (the SDK's asyncio pipes take only pipes, sockets
    and terminals: not a file nor /dev/null), else ``None``."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return f"{name} is closed; an editor starts rlmd acp with pipes on stdin and stdout"
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
            return (
                f"{name} is not a pipe, a socket or a terminal (a file, /dev/null?); an editor "
                "(Zed...) starts rlmd acp with pipes on stdin and stdout"
            )
    return None


def run_door_command(args: argparse.Namespace) -> int:
    """Run ``mcp`` / ``acp``; returns the exit code (2: the extra is not installed)."""
    models, budgets = _models_and_budgets(args)
    try:
        if args.command == "mcp":
            from rlmd.frontdoors import mcp_server

            workspace, said = workspace_folder(args.workspace)
            if workspace is None:
                print(f"rlmd mcp: {said}", file=sys.stderr)
                return 2

            defaults = mcp_server.Defaults(workspace, models, budgets)
            return mcp_server.main(
                defaults, allow_exec=args.allow_exec, autostart=not args.no_start
            )
        from rlmd.frontdoors import acp_agent

        problem = _stdio_problem()
        if problem:
            print(f"rlmd acp: {problem}", file=sys.stderr)
            return 2
        return acp_agent.main(acp_agent.Defaults(models, budgets), autostart=not args.no_start)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "acp"):
            print(
                f"rlmd {args.command}: {exc.name} is not installed; "
                + EXTRA_HINT.format(extra=args.command),
                file=sys.stderr,
            )
            return 2
        raise

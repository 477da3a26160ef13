"""The daemon's commands: ``workspace/executeCommand`` names → handlers (no pygls here).

Each command takes **one** argument, a JSON object (``arguments: [{...}]``; no argument means
``{}``), checked field by field by :class:`~rlmd.server.params.Params`, and returns one JSON
object. ``docs/protocol.md`` documents every parameter and result; keep the two in step.
Handlers raise :class:`~rlmd.server.errors.CommandError` for anything the client should see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from rlmd import config, paths
from rlmd.config import BUDGET_KEYS, build_run_config
from rlmd.engine.budget import COUNT_FIELDS, BudgetError
from rlmd.engine.events import new_id
from rlmd.kernel import protocol
from rlmd.models.base import ModelNotAvailable
from rlmd.runner import check_models
from rlmd.sandbox import BACKENDS
from rlmd.sandbox.base import SandboxError
from rlmd.server.core import DaemonCore
from rlmd.server.errors import (
    BUSY,
    CHECKPOINT_FAILED,
    SANDBOX_FAILED,
    SHUTTING_DOWN,
    UNAVAILABLE,
    CommandError,
    invalid,
    not_found,
)
from rlmd.server.hub import DETAILS
from rlmd.server.params import Params
from rlmd.server.tasks import Task
from rlmd.store.queries import RunQueryError
from rlmd.workspace import checkpoint as ckpt_mod
from rlmd.workspace.listing import matching
from rlmd.workspace.manager import CellNotRun, CheckpointNotWritten, Workspace

PROGRESS_MODES = ("all", "own", "none")
MAX_QUESTION = 200_000
MAX_CODE = 1_000_000
VARIABLES_WAIT_S = 5.0
MAX_OFFSET = 10**9
MAX_MATCH = 200


@dataclass
class CallContext:
    """Who is calling: the connection (``id``, ``detail``, ``progress_mode``) and the
    ``workDoneToken`` the client put on the request, if any."""

    caller: Any
    work_done_token: str | int | None = None


Handler = Callable[[DaemonCore, Params, CallContext], Awaitable[Mapping[str, Any]]]
COMMANDS: dict[str, Handler] = {}


def command(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        COMMANDS[name] = fn
        return fn

    return register


async def execute(core: DaemonCore, name: str, raw: Any, ctx: CallContext) -> dict[str, Any]:
    """Run command ``name`` with parameter object ``raw``.

    Raises:
        CommandError: unknown command, bad parameters, or the command failed.
    """
    handler = COMMANDS.get(name)
    if handler is None:
        raise invalid(f"unknown command {name!r}; known: {', '.join(sorted(COMMANDS))}", "command")
    return dict(await handler(core, Params(raw), ctx))


# -- helpers ------------------------------------------------------------------------------


def _folder(p: Params, key: str = "workspace", *, exists: bool = True) -> str:
    """The project folder named by ``key`` (a path or a ``file://`` URI), resolved. With
    ``exists=False`` a folder that is gone is named as it was (its resolved parents), so an
    open workspace whose folder was deleted can still be closed, reset or listed."""
    value = p.text(key, required=True, max_len=4096)
    assert value is not None
    if value.startswith("file://"):
        uri = urlparse(value)
        if uri.netloc not in ("", "localhost"):  # file://home/me/proj opened /me/proj
            raise invalid(
                f"{key}: {value!r} names the host {uri.netloc!r}; a folder here is "
                "file:///path (three slashes) or file://localhost/path",
                key,
            )
        value = unquote(uri.path)
        if "\x00" in value:  # %00: past the check on the text as sent (review13)
            raise invalid(f"{key} must not contain NUL characters", key)
    try:
        return str(Path(value).expanduser().resolve(strict=True))
    except (OSError, RuntimeError, UnicodeError):  # UnicodeError: no file has that name
        if not exists and Path(value).expanduser().is_absolute():
            try:
                value.encode("utf-8")  # a lone surrogate names no folder, gone or not
                return str(Path(value).expanduser().resolve())
            except (OSError, RuntimeError, UnicodeError):
                pass
        raise invalid(f"{key}: no such folder: {value}", key) from None


def _workspace(core: DaemonCore, folder: str, sandbox: str | None = None) -> Workspace:
    """The workspace of ``folder``, checking the backend it would run (``sandbox``, the
    request's choice, else its config's) against :func:`_check_backend`."""
    try:
        ws = core.workspaces.get(folder)
        assert ws is not None
        _check_backend(core, ws.folder, sandbox or ws.settings.sandbox)
    except NotADirectoryError as exc:
        raise invalid(str(exc), "workspace") from None
    except ValueError as exc:
        raise CommandError(UNAVAILABLE, f"the project config is invalid: {exc}") from None
    return ws


def _check_backend(core: DaemonCore, folder: str, backend: str) -> None:
    """Over the socket, model code may run in the daemon's own process (``inprocess``) only
    when the user's config says ``[daemon] allow_inprocess = true``: any local process of
    the user can reach the socket, and in-process code reads everything the daemon can.

    Raises:
        CommandError: ``UNAVAILABLE``, naming the setting.
        ValueError: the config is invalid.
    """
    if backend != "inprocess" or core.mode != "socket":
        return
    settings, _ = core.settings_for(folder)
    if not config.allow_inprocess(settings):
        raise CommandError(
            UNAVAILABLE,
            "the 'inprocess' sandbox runs model code inside the daemon, unisolated; over the "
            "socket it needs '[daemon] allow_inprocess = true' in your user config "
            f"({paths.user_config_path()})",
            {"field": "sandbox"},
        )


def _busy_error(ws: Workspace) -> CommandError:
    return CommandError(
        BUSY,
        f"workspace {ws.folder} is busy ({ws.holder or 'in use'}; {len(ws.waiting)} waiting); "
        "pass queue=true to wait in line",
        {"holder": ws.holder, "queued": list(ws.waiting)},
    )


def _live_tasks_in(core: DaemonCore, ws: Workspace) -> list[Task]:
    return [t for t in core.tasks.live() if t.workspace == ws.folder]


async def _stop_tasks(core: DaemonCore, ws: Workspace, cancel: bool) -> list[str]:
    live = _live_tasks_in(core, ws)
    if live and not cancel:
        raise CommandError(
            BUSY,
            f"workspace {ws.folder} has {len(live)} live task(s); pass cancel_tasks=true "
            "to cancel them first",
            {"tasks": [t.run_id for t in live]},
        )
    handles = []
    for task in live:
        core.tasks.cancel(task.run_id)
        if task.handle is not None:
            handles.append(task.handle)
    if handles:
        await asyncio.wait(handles, timeout=30)
    return [t.run_id for t in live]


# -- tasks --------------------------------------------------------------------------------


@command("rlmd.task.start")
async def task_start(core: DaemonCore, p: Params, ctx: CallContext) -> Mapping[str, Any]:
    core.check_open()
    folder = _folder(p)
    question = p.text("question", required=True, max_len=MAX_QUESTION)
    models = p.obj("models")
    root = models.text("root", max_len=500)
    sub = models.text("sub", max_len=500)
    by_depth_p = models.obj("by_depth")
    by_depth: dict[int, str] = {}
    for key in list(by_depth_p.raw):
        if not key.isdigit() or not 0 <= int(key) <= 64:
            raise invalid(
                f"models.by_depth keys must be depths 0..64, got {key!r}", "models.by_depth"
            )
        name = by_depth_p.text(key, required=True, max_len=500)
        assert name is not None
        by_depth[int(key)] = name
    by_depth_p.done()
    models.done()
    sandbox = p.text("sandbox", choices=BACKENDS)
    budgets = p.obj("budgets")
    budget: dict[str, Any] = {}
    # types and an upper bound here; the lower bounds are Budget's alone (below), so a
    # -1 and a 0 get the same message (this check said ">= 0" for -1 while Budget refuses 0)
    for key in sorted(BUDGET_KEYS):
        if key in COUNT_FIELDS:
            budget[key] = budgets.integer(key, maximum=10**12)
        else:
            budget[key] = budgets.number(key, maximum=1e12)
    budgets.done()
    queue = p.boolean("queue", default=True)
    p.done()

    ws = _workspace(core, folder, sandbox)
    if not queue and (ws.busy or ws.waiting):
        raise _busy_error(ws)
    if sandbox and ws.sandbox is not None and ws.settings.sandbox != sandbox:
        raise invalid(
            f"workspace {ws.folder} runs the {ws.settings.sandbox!r} sandbox; reset or close it "
            f"before asking for {sandbox!r}, or leave sandbox out",
            "sandbox",
        )
    try:
        settings, registry = core.settings_for(ws.folder)
        config = build_run_config(
            settings,
            model=root,
            sub_model=sub,
            sandbox=sandbox or ws.settings.sandbox,
            budget=budget,
            workspace=Path(ws.folder),
        )
        config.models_by_depth.update(by_depth)
        check_models(registry, config)
        config.validate_tools()
    except ModelNotAvailable as exc:
        raise CommandError(UNAVAILABLE, str(exc)) from None
    except KeyError as exc:
        raise invalid(str(exc.args[0]) if exc.args else str(exc), "models") from None
    except BudgetError as exc:  # a limit the engine refuses (0 seconds): the request's field
        raise invalid(f"budgets.{exc.field} {exc.reason}", f"budgets.{exc.field}") from None
    except (ValueError, TypeError) as exc:
        raise invalid(str(exc)) from None
    if sandbox and ws.sandbox is None:
        ws.settings.sandbox = sandbox
    task = Task(
        run_id=new_id(),
        workspace=ws.folder,
        question=question or "",
        config=config,
        registry=registry,
        origin=getattr(ctx.caller, "id", None),
    )
    if ctx.work_done_token is not None and hasattr(ctx.caller, "claim_progress"):
        ctx.caller.claim_progress(task.run_id, ctx.work_done_token)
    return core.tasks.start(task)


@command("rlmd.task.cancel")
async def task_cancel(core: DaemonCore, p: Params, ctx: CallContext) -> Mapping[str, Any]:
    run_id = p.text("run_id", required=True, max_len=200)
    p.done()
    assert run_id is not None
    return core.tasks.cancel(run_id)


@command("rlmd.task.status")
async def task_status(core: DaemonCore, p: Params, ctx: CallContext) -> Mapping[str, Any]:
    run_id = p.text("run_id", required=True, max_len=200)
    p.done()
    assert run_id is not None
    task = core.tasks.get(run_id)
    if task is not None:
        return core.tasks.status(task)
    try:
        run = core.store.get_run(run_id)
    except ValueError as exc:
        raise invalid(str(exc), "run_id") from None
    if run is None:
        raise not_found(f"no task or run {run_id!r}")
    return {
        "run_id": run["id"],
        "workspace": run.get("workspace"),
        "question": run.get("question"),
        "state": "running" if run.get("status") == "running" else "finished",
        "status": run.get("status"),
        "queue_position": None,
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "iterations": run.get("iterations"),
        "final_usage": run.get("usage"),
        "answer": run.get("answer"),
        "answer_source": run.get("answer_source"),
        "error": run.get("error"),
        "source": "store",
    }


@command("rlmd.task.list")
async def task_list(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    folder = _folder(p, exists=False) if p.raw.get("workspace") is not None else None
    p.text("workspace", max_len=4096)
    p.done()
    tasks = [core.tasks.status(t) for t in core.tasks.live()]
    if folder:
        tasks = [t for t in tasks if t["workspace"] == folder]
    return {"tasks": tasks}


# -- runs ---------------------------------------------------------------------------------


@command("rlmd.runs.list")
async def runs_list(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    limit = p.integer("limit", default=50, minimum=1, maximum=500)
    offset = p.integer("offset", default=0, minimum=0, maximum=10**9)
    raw_status = p.raw.get("status")
    status: str | list[str] | None
    if isinstance(raw_status, list):
        p._read.add("status")
        if (
            not raw_status
            or not all(isinstance(s, str) and s for s in raw_status)
            or len(raw_status) > 20
        ):
            raise invalid("status must be a string or a list of 1-20 strings", "status")
        status = list(raw_status)
    else:
        status = p.text("status", max_len=50)
    search = p.text("search", max_len=1000)
    workspace = _folder(p, exists=False) if p.raw.get("workspace") is not None else None
    p.text("workspace", max_len=4096)
    root_only = p.boolean("root_only", default=True)
    p.done()
    assert limit is not None and offset is not None
    try:
        runs = core.store.list_runs(
            limit=limit,
            offset=offset,
            status=status,
            root_only=root_only,
            search=search,
            workspace=workspace,
        )
    except RunQueryError as exc:  # an unknown status, more search words than one query takes
        raise invalid(str(exc), exc.param) from None
    return {
        "runs": runs,
        "offset": offset,
        "limit": limit,
        "next_offset": offset + len(runs) if len(runs) == limit else None,
    }


@command("rlmd.runs.get")
async def runs_get(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    run_id = p.text("run_id", required=True, max_len=200)
    with_tree = p.boolean("tree", default=False)
    p.done()
    assert run_id is not None
    try:
        run = core.store.get_run(run_id)
        if run is None:
            task = core.tasks.get(run_id)
            if task is None:
                raise not_found(f"no run {run_id!r}")
            # Queued (or just launched): not in the store yet, but the daemon knows it.
            return {"run": None, "task": core.tasks.status(task)}
        result: dict[str, Any] = {"run": run}
        if with_tree:
            result["tree"] = core.store.tree(run["id"])
    except ValueError as exc:
        raise invalid(str(exc), "run_id") from None
    return result


# -- workspaces ---------------------------------------------------------------------------


@command("rlmd.workspace.open")
async def workspace_open(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    core.check_open()
    folder = _folder(p)
    sandbox = p.text("sandbox", choices=BACKENDS)
    p.done()
    ws = _workspace(core, folder, sandbox)
    if sandbox and ws.sandbox is not None and ws.settings.sandbox != sandbox:
        raise invalid(
            f"workspace {ws.folder} runs the {ws.settings.sandbox!r} sandbox; reset it first",
            "sandbox",
        )
    async with ws.hold("open"):
        if sandbox and ws.sandbox is None:
            ws.settings.sandbox = sandbox
        try:
            started = await ws.ensure_started()
        except (SandboxError, OSError) as exc:
            raise CommandError(SANDBOX_FAILED, f"the sandbox could not start: {exc}") from None
    return {**ws.describe(), "started": started}


@command("rlmd.workspace.close")
async def workspace_close(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    folder = _folder(p, exists=False)
    checkpoint = p.boolean("checkpoint", default=True)
    cancel = p.boolean("cancel_tasks", default=False)
    p.done()
    ws = core.workspaces.find(folder)
    if ws is None:
        raise not_found(f"workspace {folder} is not open")
    cancelled = await _stop_tasks(core, ws, cancel)
    try:
        await core.workspaces.close(ws, checkpoint=checkpoint)
    except CheckpointNotWritten as exc:
        raise CommandError(CHECKPOINT_FAILED, str(exc)) from None
    return {
        "workspace": ws.folder,
        "state": "closed",
        "cancelled": cancelled,
        "last_checkpoint": ws.last_checkpoint,
    }


@command("rlmd.workspace.reset")
async def workspace_reset(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    folder = _folder(p, exists=False)
    cancel = p.boolean("cancel_tasks", default=False)
    p.done()
    ws = core.workspaces.find(folder)
    if ws is None or Path(folder).is_dir():
        ws = _workspace(core, folder)
    cancelled = await _stop_tasks(core, ws, cancel)
    async with ws.hold("reset"):
        await ws.reset()
    return {**ws.describe(), "cancelled": cancelled}


@command("rlmd.workspace.list")
async def workspace_list(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    p.done()
    return {"workspaces": [ws.describe() for ws in core.workspaces.workspaces.values()]}


@command("rlmd.workspace.variables")
async def workspace_variables(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    """One page of a workspace's variables, sorted by name (see ``docs/protocol.md``):
    the live REPL's when its sandbox runs (paged in the kernel: previews are made for this
    page only), else its checkpoint's (read once for a walk through the pages)."""
    folder = _folder(p, exists=False)
    offset = p.integer("offset", default=0, minimum=0, maximum=MAX_OFFSET)
    limit = p.integer(
        "limit", default=protocol.VARS_PAGE, minimum=1, maximum=protocol.MAX_VARS_PAGE
    )
    match = p.text("match", default="", max_len=MAX_MATCH, allow_empty=True)
    p.done()
    assert offset is not None and limit is not None and match is not None
    ws = core.workspaces.find(folder)
    if ws is not None and ws.sandbox is not None:
        try:
            page = await asyncio.wait_for(ws.variables(offset, limit, match), VARIABLES_WAIT_S)
        except TimeoutError:
            raise CommandError(
                BUSY, "a cell is running in this workspace; ask again when it is done"
            ) from None
        except SandboxError as exc:
            raise CommandError(SANDBOX_FAILED, str(exc)) from None
        return {
            "workspace": ws.folder,
            "source": "repl",
            "variables": [v.__dict__ for v in page.variables],
            "total": page.total,
            "offset": offset,
            "next_offset": page.next_offset,
            "not_restored": ws.last_restore["not_restored"] if ws.last_restore else {},
        }
    listing = await core.checkpoint_listings.get(ckpt_mod.checkpoint_path(folder))
    if listing is None:
        return {
            "workspace": folder,
            "source": "none",
            "variables": [],
            "total": 0,
            "offset": offset,
            "next_offset": None,
            "not_restored": {},
            "checkpoint_taken_at": None,
        }
    names = listing.names
    if match:  # a pass over every name: in a thread when there are many
        names = await _maybe_in_thread(len(names), matching, names, match)
    variables = listing.page(names, offset, limit)  # as the kernel described them when saved
    end = offset + len(variables)
    return {
        "workspace": folder,
        "source": "checkpoint",
        "variables": variables,
        "total": len(names),
        "offset": offset,
        "next_offset": end if variables and end < len(names) else None,
        "not_restored": listing.skipped,
        "checkpoint_taken_at": listing.taken_at,
    }


async def _maybe_in_thread(n: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, in a worker thread when it goes over ``n`` > 10,000 items."""
    return await asyncio.to_thread(fn, *args) if n > 10_000 else fn(*args)


@command("rlmd.workspace.exec")
async def workspace_exec(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    core.check_open()
    folder = _folder(p)
    code = p.text("code", required=True, max_len=MAX_CODE, allow_empty=True)
    timeout = p.number("timeout_s", default=60.0, minimum=0.1, maximum=3600.0)
    queue = p.boolean("queue", default=True)
    p.done()
    ws = _workspace(core, folder)
    if not queue and (ws.busy or ws.waiting):
        raise _busy_error(ws)
    holder = f"cell-{new_id()}"
    t0 = time.monotonic()
    async with ws.hold(holder):
        waited = time.monotonic() - t0
        try:
            result = await ws.run_cell(code or "", timeout)
        except CellNotRun as exc:
            raise CommandError(SHUTTING_DOWN, str(exc)) from None
        except (SandboxError, OSError) as exc:
            raise CommandError(SANDBOX_FAILED, f"the sandbox failed: {exc}") from None
    out = dict(result.__dict__)
    out["variables"] = [v.__dict__ for v in result.variables]
    out["waited_s"] = round(waited, 4)
    out["workspace"] = ws.folder
    return out


# -- models, health, subscription ---------------------------------------------------------


@command("rlmd.models.list")
async def models_list(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    folder = _folder(p) if p.raw.get("workspace") is not None else None
    p.text("workspace", max_len=4096)
    p.done()
    try:
        settings, registry = core.settings_for(folder)
    except ValueError as exc:
        raise CommandError(UNAVAILABLE, f"the config is invalid: {exc}") from None
    models = []
    for spec, reason in registry.list():
        models.append(
            {
                "name": spec.name,
                "provider": spec.provider,
                "model": spec.model,
                "context_window": spec.context_window,
                "max_output_tokens": spec.max_output_tokens,
                "price_input": spec.price_input,
                "price_output": spec.price_output,
                "usable": reason is None,
                "reason": reason,
            }
        )
    defaults = {k: v for k, v in settings.run.items() if isinstance(v, str | int | float)}
    return {
        "models": models,
        "run_defaults": defaults,
        "config_files": [str(s) for s in settings.sources],
    }


@command("rlmd.health")
async def health(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    p.done()
    return core.health()


@command("rlmd.subscribe")
async def subscribe(core: DaemonCore, p: Params, ctx: CallContext) -> dict[str, Any]:
    events = p.text("events", choices=DETAILS)
    progress = p.text("progress", choices=PROGRESS_MODES)
    p.done()
    caller = ctx.caller
    if events is not None:
        caller.detail = events
    if progress is not None:
        caller.progress_mode = progress
    return {"events": caller.detail, "progress": caller.progress_mode, "client_id": caller.id}

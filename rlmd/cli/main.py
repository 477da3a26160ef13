"""The ``rlmd`` command.

    rlmd run QUESTION [--context PATH] [--model NAME] [--sub-model NAME] [--sandbox NAME]
             [--max-depth N] [--max-iterations N] [--max-tokens N] [--max-usd X]
             [--max-seconds S] [--max-subcalls N] [--cell-timeout S] [--threads N] [--json]
    rlmd ask QUESTION [--workspace DIR] [--model NAME] [--sub-model NAME] [--max-... N]
             [--json] [--quiet] [--no-queue] [--no-start]
    rlmd runs [--limit N] [--status S] [--search TEXT]
    rlmd show RUN
    rlmd export RUN [--format json|jsonl|otlp] [--output FILE] [--endpoint URL]
    rlmd models
    rlmd models pull NAME
    rlmd serve [--stdio] [--idle-timeout S] [--log-file FILE]
    rlmd attach --stdio [--no-start]
    rlmd doctor [--json] [--no-sandboxes]
    rlmd mcp | acp [--workspace DIR] [--model NAME] [--max-usd X] ...
    rlmd sandbox build NAME | ls [--json] | reap
    rlmd train tasks|rollout|summary|export|export-rollouts|import-rollouts|sft|grpo|convert

Exit codes: 0 success (``run``, ``ask``: the run completed), 1 the run ended without
completing (budget, failure; ``ask``: also the daemon went away), 2 bad usage or
configuration (unknown model, model not installed; ``ask``: the daemon refused the task or
could not be reached), 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import gc
import json
import math
import os
import re
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from typing import NoReturn

from rlmd import isolation, paths
from rlmd.cli.budget_flags import add_run_flags
from rlmd.cli.term import LazyConsole, markup, message
from rlmd.sandbox import BACKENDS

err = LazyConsole(stderr=True, highlight=False, soft_wrap=True)
out = LazyConsole(highlight=False, soft_wrap=True)


class _Parser(argparse.ArgumentParser):
    """argparse, saying how to pass a value that starts with ``-``: ``--workspace -dash``
    read ``-dash`` as an option and said only "expected one argument" (``rlmd run '-x?'``:
    "the following arguments are required: question"). The value is not
    taken as is: ``--workspace --model x`` (a forgotten value) must stay an error. Every
    subcommand's parser is one of these (argparse gives subparsers their parent's class)."""

    _words: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        needs = re.fullmatch(r"argument (\S+): expected one argument", message)
        if needs:
            names = needs.group(1).split("/")
            for word, value in zip(self._words, self._words[1:], strict=False):
                known = value.split("=")[0] in self._option_string_actions
                if word in names and value.startswith("-") and value != "-" and not known:
                    message += (
                        f"; {value!r} reads as an option: write {names[0]}={value}"
                        f" (or ./{value} for a path)"
                    )
                    break
        elif message.startswith("the following arguments are required") and "--" not in self._words:
            stray = [
                w
                for w in self._words
                if w.startswith("-")
                and w != "-"
                and w.split("=")[0] not in self._option_string_actions
            ]
            if stray:  # rlmd run "-x is what?" / rlmd models pull -x
                message += (
                    f"; {stray[0]!r} reads as an option: a value that starts with '-' goes "
                    f"after -- ({self.prog} -- {stray[0]})"
                )
        super().error(message)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``rlmd`` parser; with ``command="run"`` or ``"ask"`` only ``run`` and ``ask`` are
    added (all the others cost ~20 ms of ``rlmd run``'s start-up, most of it in gettext
    look-ups)."""
    p = _Parser(prog="rlmd", description="Recursive Language Models as a local tool.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="answer a question about a context (a folder, a file, or text)")
    r.add_argument("question")
    r.add_argument(
        "--context", "-c", help="folder (codebase), file (.json/.jsonl/text) or '-' for stdin"
    )
    r.add_argument("--model", "-m", help="root model: a registry name or provider:model")
    r.add_argument(
        "--sub-model",
        help="model for sub-calls and child runs (default: [run] sub_model, else the root "
        "model; for a LoRA adapter `rlmd train sft` registered, its base model)",
    )
    r.add_argument(
        "--sandbox",
        choices=list(BACKENDS),
        help="REPL backend (default subprocess; e2b and modal need their extra and credentials)",
    )
    r.add_argument(
        "--template",
        help="container sandbox template (sandboxes/NAME); implies --sandbox container",
    )
    add_run_flags(r)
    r.add_argument("--threads", type=int, help="CPU threads for local models (default 1)")
    r.add_argument(
        "--no-extraction",
        action="store_true",
        help="when a budget runs out, end with no answer instead of one extraction call",
    )
    r.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the answer"
    )
    r.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress on stderr (warnings, the answer's notices and the trajectory line stay)",
    )
    r.add_argument(
        "--cluster",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run child runs on a Ray cluster (the user config's [cluster], or ADDRESS: "
        "auto | HOST:PORT | ray://HOST:PORT); needs the ray extra (docs/cluster.md)",
    )
    r.add_argument(
        "--samples",
        type=int,
        default=1,
        help=f"self-consistency: K root runs in parallel, answers voted (default 1, at most "
        f"{MAX_SAMPLES})",
    )
    from rlmd.cli.ask import add_parser as add_ask_command

    add_ask_command(sub)
    if command in ("run", "ask"):
        return p

    ls = sub.add_parser("runs", help="list recorded runs, newest first")
    ls.add_argument(
        "--limit",
        type=int,
        default=20,
        help=f"most runs listed (default 20, at most {MAX_RUNS_LIMIT:,})",
    )
    ls.add_argument(
        "--status", help="only runs that ended so (completed, max_iterations, failed, ...)"
    )
    ls.add_argument("--search", help="full-text search over questions, code, outputs and answers")
    ls.add_argument(
        "--json", action="store_true", help="print the runs as one JSON list (with tree totals)"
    )

    s = sub.add_parser("show", help="print a run's tree")
    s.add_argument("run", help="run id, a unique prefix, or 'last'")

    e = sub.add_parser("export", help="write a run (with its child runs) as JSON or JSONL")
    e.add_argument("run", help="run id, a unique prefix, or 'last'")
    e.add_argument(
        "--format",
        choices=["json", "jsonl", "otlp"],
        default="json",
        help="otlp: send OpenTelemetry spans to an OTLP/HTTP receiver (needs rlmd[otel])",
    )
    e.add_argument("--output", "-o", help="file to write (default stdout)")
    e.add_argument(
        "--endpoint",
        help="with --format otlp: the traces URL (default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318/v1/traces)",
    )
    e.add_argument(
        "--include-content",
        action="store_true",
        help="with --format otlp: attach prompts, outputs, questions, answers and code",
    )

    m = sub.add_parser("models", help="list models and whether they are usable now")
    msub = m.add_subparsers(dest="models_command")
    pull = msub.add_parser("pull", help="install a known local model into the rlmd home")
    pull.add_argument("name")

    from rlmd.cli.doors import add_door_commands
    from rlmd.cli.sandbox import add_parser as add_sandbox_command
    from rlmd.cli.serve import add_server_commands

    add_sandbox_command(sub)
    from rlmd.cli.train import add_parser as add_train_command

    add_train_command(sub)

    add_server_commands(sub)
    add_door_commands(sub)
    t = sub.add_parser("tui", help="the terminal UI: browse, search and follow runs; launch tasks")
    t.add_argument("--socket", help="daemon socket (default: the rlmd home's)")
    t.add_argument("--store", help="trajectory store to browse when no daemon runs")
    t.add_argument("--no-daemon", action="store_true", help="browse the store read-only")
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the ``rlmd`` process itself (not a call from Python code)
        _pause_collector()
    try:
        return _main(argv)
    except BrokenPipeError:
        # Whoever read stdout went away (`rlmd runs --json | head -1`): stop quietly, as
        # cat does, instead of a traceback; stdout goes to /dev/null so the interpreter's
        # own flush at exit does not raise again.
        _drop_stdout()
        return 1
    except OSError as exc:
        # stdout on a full disk or a failing device (`rlmd export last > big.json`): a
        # traceback said it. A stream write names no file; any other OSError is not this.
        if exc.filename is not None or exc.errno not in _WRITE_ERRNOS:
            raise
        _drop_stdout()
        err.print(f"[red]error:[/] cannot write the output: {markup(exc.strerror or str(exc))}")
        return 1
    finally:
        _start_up_done()


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF}
"""A write to stdout failed for want of room or a device, or stdout is closed
(:mod:`rlmd.cli.ending`): said in one line, not a traceback."""


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit does not raise."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # AttributeError: stdout is None (closed)
        pass


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = _parser(words[0] if words else None).parse_args(argv)
    if args.command != "run":
        _start_up_done()
    problem = _check_args(args)
    if problem:
        err.print(f"[red]error:[/] {markup(str(problem))}")
        return 2
    try:
        paths.home()
    except OSError as exc:
        where = paths.home_location()
        blocker = next((p for p in (where, *where.parents) if p.is_file()), None)
        if exc.errno in (errno.EEXIST, errno.ENOTDIR) and blocker is not None:
            # "[Errno 17] File exists ... set RLMD_HOME to a writable folder" (review18)
            err.print(
                f"[red]error:[/] the rlmd home {markup(str(where))} cannot be made: "
                f"{markup(str(blocker))} is a file. Set RLMD_HOME to a folder."
            )
            return 2
        err.print(
            f"[red]error:[/] cannot use the rlmd home folder: {markup(str(exc))}. Set RLMD_HOME "
            "to a writable folder."
        )
        return 2
    try:
        return {
            "run": cmd_run,
            "ask": cmd_ask,
            "runs": cmd_runs,
            "show": cmd_show,
            "export": cmd_export,
            "models": cmd_models,
            "serve": cmd_server,
            "attach": cmd_server,
            "doctor": cmd_server,
            "tui": cmd_tui,
            "sandbox": cmd_sandbox,
            "train": cmd_train,
            "mcp": cmd_door,
            "acp": cmd_door,
        }[args.command](args)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return 130
    except sqlite3.DatabaseError as exc:  # a damaged or foreign rlmd.db: say how to recover
        store = paths.store_path()
        if not os.access(store.parent, os.W_OK):  # "unable to open database file"
            err.print(
                f"[red]error:[/] the trajectory store {markup(str(store))} cannot be used: "
                f"{markup(str(exc))}; its folder is not writable (a read-only file system?). "
                "Set RLMD_HOME to a writable folder."
            )
            return 2
        err.print(
            f"[red]error:[/] the trajectory store {markup(str(store))} cannot be used: "
            f"{markup(str(exc))}. Move it aside (mv {markup(str(store))} "
            f"{markup(str(store))}.broken) and rlmd starts a new one; rlmd doctor explains."
        )
        return 1
    except OSError as exc:  # the run/ or models/ folder of a read-only home: a traceback
        if not (isinstance(exc.filename, str) and paths.in_home(exc.filename)):
            raise
        fix = (
            "Set RLMD_HOME to a writable folder."
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            else "Move that path aside, or set RLMD_HOME to another folder."
        )
        err.print(f"[red]error:[/] cannot use the rlmd home folder: {markup(str(exc))}. {fix}")
        return 2
    except Exception as exc:  # noqa: BLE001 - only the store's own errors are handled here
        # (rlmd.store.schema is not imported on every start: a StoreError means it was)
        schema = sys.modules.get("rlmd.store.schema")
        if schema is None or not isinstance(exc, schema.StoreError):
            raise
        err.print(f"[red]error:[/] {markup(str(exc))}")  # a store written by a newer rlmd
        return 1


MAX_SAMPLES = 32
"""The most ``rlmd run --samples``: each sample runs at once with a REPL (a kernel process) of
its own."""

MAX_RUNS_LIMIT = 10**9
"""The most runs ``rlmd runs --limit`` lists (SQLite takes no more than 2**63 - 1)."""


_NOT_EMPTY = {
    "run": ("context", "template"),
    "runs": ("search", "status"),
    "export": ("output",),
    "serve": ("log_file",),
    "mcp": ("workspace",),
    "ask": ("workspace",),
    "tui": ("store", "socket"),
}
"""Options whose empty value is a mistake (an unset shell variable): ``--context ""`` loaded
the current folder as the codebase, ``--output ""`` wrote to stdout, ``--template ""`` and
``--status ""`` were ignored or matched nothing ("no runs recorded yet")."""


def _check_args(args: argparse.Namespace) -> str | None:
    """A message for arguments that parse but make no sense, else ``None``."""
    for name in _NOT_EMPTY.get(args.command, ()):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            flag = "--" + name.replace("_", "-")
            return f"{flag} is empty (an unset shell variable?); leave it out for the default"
    if args.command == "runs" and not 1 <= args.limit <= MAX_RUNS_LIMIT:
        # 2**63 reached SQLite and ended in an OverflowError traceback
        return f"--limit must be from 1 to {MAX_RUNS_LIMIT:,}, got {args.limit}"
    if args.command == "attach" and not (math.isfinite(args.timeout) and args.timeout > 0):
        # -1 said "could not start the rlmd daemon ... see daemon.log", which had no error
        return f"--timeout must be a number of seconds > 0, got {args.timeout}"
    if args.command == "serve":
        for name in ("idle_timeout", "client_stall", "max_message_bytes", "max_client_buffer"):
            value = getattr(args, name, None)
            if value is not None and not (math.isfinite(value) and value >= 0):
                return f"--{name.replace('_', '-')} must be a number >= 0, got {value}"
    if args.command == "ask":
        from rlmd.cli.ask import problem

        return problem(args)
    if args.command in ("mcp", "acp"):  # their budgets apply to every task they start
        from rlmd.cli.budget_flags import RUN_FLAGS, budget_flag_problem

        return budget_flag_problem(args, RUN_FLAGS)
    if args.command != "run":
        return None
    if not args.question.strip():
        return "the question is empty"
    if args.threads is not None and args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    # rlmd run's budget flags: checked by Budget as the run config is built, once the
    # codebase read has started (the engine's modules load after that: issue 16)
    return _sandbox_problem(args.sandbox, args.template)


def _sandbox_problem(sandbox: str | None, template: str | None) -> str | None:
    """Why the chosen sandbox cannot start here (an unknown template, missing cloud
    credentials), found before a run is recorded; else ``None``."""
    import os

    if template:
        from rlmd.sandbox import SandboxError
        from rlmd.sandbox.docker import images

        try:
            images.template_path(template)
        except (SandboxError, ValueError) as exc:
            return str(exc)
    if sandbox == "e2b":
        from rlmd.sandbox.cloud.e2b import API_KEY_ENV

        if not os.environ.get(API_KEY_ENV):
            return f"--sandbox e2b needs {API_KEY_ENV} set (create a key in the E2B dashboard)"
    if sandbox == "modal":
        from rlmd.sandbox.cloud.modal import _credentials_missing

        return _credentials_missing()
    return None


_gc_paused = False


def _pause_collector() -> None:
    """Keep the cyclic garbage collector off while rlmd imports its modules (see
    :func:`_start_up_done`). Only for the ``rlmd`` process itself, never for a caller's."""
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


def _start_up_done() -> None:
    """Freeze what start-up made (modules, classes, functions: they live as long as the
    process) and turn the collector back on. Start-up makes tens of thousands of long-lived
    objects, and the collector walked them again and again as they piled up: ~15 % of
    ``rlmd run``'s time to the first model request."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.freeze()
        gc.enable()


def _read_context(arg: str | None):
    if arg is None:
        return None
    if arg == "-":
        return _read_stdin()
    path = Path(arg)
    if not path.exists():
        if path.is_symlink():  # "no such file" named a link that is there
            target = os.readlink(path)
            raise FileNotFoundError(
                f"--context: {arg} is a symbolic link to {target}, which does not exist "
                "(or the links loop)"
            )
        raise FileNotFoundError(f"--context: no such file or folder: {arg}")
    return path


def _read_stdin() -> str:
    """The whole of stdin as text (bytes that are not UTF-8 replaced, as for a file).

    Raises:
        ValueError: stdin holds more than a context file may (``cat /dev/zero | rlmd run``
            grew rlmd until the machine ran out of memory).
    """
    from rlmd.context import MAX_CONTEXT_FILE_BYTES

    chunks, size = [], 0
    while chunk := sys.stdin.buffer.read(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_CONTEXT_FILE_BYTES:
            raise ValueError(
                f"--context -: stdin holds more than {MAX_CONTEXT_FILE_BYTES:,} bytes, the "
                "limit for one context (split it, or load it yourself and pass the pieces)"
            )
    return b"".join(chunks).decode("utf-8", errors="replace")


def _isolation_gap(run_config, required: bool) -> str | None:
    """The warning when the run's subprocess sandbox would be unisolated here.

    Raises:
        NotIsolated: it would be, and ``required``.
    """
    from rlmd.sandbox import create_sandbox

    if run_config.sandbox != "subprocess":
        return None
    sandbox = create_sandbox(run_config.sandbox, **run_config.sandbox_options)
    gap = isolation.check(sandbox, required=required)
    sandbox.warm()  # the run's kernel process starts up while the context loads
    return gap


_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end ``rlmd run`` as Ctrl-C does: the run is recorded as cancelled and its
kernels are stopped (exit 143)."""


class _Terminated(Exception):
    """SIGTERM arrived before the run's event loop took it over."""


def cmd_run(args: argparse.Namespace) -> int:
    """``rlmd run``; SIGTERM at any stage ends it with 143 (the codebase is read from the
    start, so a signal during start-up must not kill the process without its clean-up)."""
    if threading.current_thread() is not threading.main_thread():
        return _run_command(args)

    def terminate(signum: int, frame: object) -> None:
        raise _Terminated

    # until go() hands them to the loop; SIGHUP: the terminal closed (review18: the run was
    # left "running" for the next rlmd to mark interrupted, the kernel on until its cell ended)
    previous = {sig: signal.signal(sig, terminate) for sig in _ENDING_SIGNALS}
    try:
        return _run_command(args)
    except _Terminated:
        err.print("[yellow]terminated before the run started[/]")
        return 143
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_command(args: argparse.Namespace) -> int:
    try:
        if not 1 <= args.samples <= MAX_SAMPLES:
            # each sample runs with its own REPL at once: --samples 1000 started 1000 kernels
            raise ValueError(f"--samples must be from 1 to {MAX_SAMPLES}, not {args.samples}")
        for flag, value in (("--model", args.model), ("--sub-model", args.sub_model)):
            if value is not None and not value.strip():  # "$MODEL" unset: not the default
                raise ValueError(f"{flag} is empty; name a model (rlmd models lists them)")
        context = _read_context(args.context)
        project = context if isinstance(context, Path) and context.is_dir() else Path.cwd()
        if isinstance(context, Path):  # read while the rest of rlmd starts up (imports too)
            from rlmd.context import PendingLoad

            # see rlmd.context.Spool: it serves one run's own REPL (--samples K share a read)
            context = PendingLoad(context, spool=args.samples == 1)
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 2

    # The config (not the engine: rlmd.engine's names load on first use), then at once the
    # run's kernel (_isolation_gap), so both start while the codebase is still being read.
    from rlmd import config

    try:
        settings = config.load(project)
        registry = settings.registry()
        run_config = config.build_run_config(
            settings,
            model=args.model,
            sub_model=args.sub_model,
            sandbox=args.sandbox or ("container" if args.template else None),
            extraction=not args.no_extraction,
            workspace=project.resolve(),
            budget={
                "max_depth": args.max_depth,
                "max_iterations": args.max_iterations,
                "max_tokens": args.max_tokens,
                "max_usd": args.max_usd,
                "max_seconds": args.max_seconds,
                "max_subcalls": args.max_subcalls,
                "cell_timeout_s": args.cell_timeout,
            },
        )
        if args.template:
            run_config.sandbox_options = {**run_config.sandbox_options, "template": args.template}
        if args.threads:
            for name in {run_config.root_model, run_config.model_for_depth(1)}:
                registry.spec(name).n_threads = args.threads
        gap = _isolation_gap(run_config, config.require_isolation(settings, default=False))
        executor = None
        if args.cluster is not None:
            from rlmd.cluster import executor_for

            executor = executor_for(args.cluster)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        from rlmd.cli.budget_flags import RUN_FLAGS, named
        from rlmd.engine.budget import BudgetError  # loaded by rlmd.config already

        said = named(exc, RUN_FLAGS) if isinstance(exc, BudgetError) else message(exc)
        err.print(f"[red]error:[/] {markup(said)}")
        return 2
    except isolation.NotIsolated as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 2
    import asyncio

    from rlmd.models.base import ModelNotAvailable
    from rlmd.runner import run_question

    if gap:  # on every run, --quiet included: the user must know
        err.print(f"[bold yellow]warning:[/] {markup(gap)}")
    started: list[str] = []  # the root run's id once it has started (and is recorded)

    def note_start(event) -> None:
        if not started and event.depth == 0:
            started.append(event.run_id)

    if args.quiet:
        sinks: tuple = (note_start,)
    else:
        from rlmd.cli.progress import ProgressPrinter

        sinks = (note_start, ProgressPrinter(err.console))

    async def go():
        # SIGTERM (timeout(1), systemd, an editor) cancels like Ctrl-C: the run is recorded
        # as cancelled and its kernels are stopped instead of left orphaned.
        for sig in _ENDING_SIGNALS:
            asyncio.get_running_loop().add_signal_handler(sig, asyncio.current_task().cancel)
        try:
            if executor is not None:
                await executor.start()  # fails here, before the run, if no cluster answers
            return await run_question(
                args.question,
                context,
                run_config,
                registry=registry,
                sinks=sinks,
                executor=executor,
                samples=args.samples,
            )
        finally:
            await registry.aclose()
            if executor is not None:
                executor.close()

    import rlmd.store  # noqa: F401 - the run's store: imported with the collector paused

    _start_up_done()
    try:
        result = asyncio.run(go())
    except asyncio.CancelledError:
        if started:
            err.print("[yellow]terminated: the run is recorded as cancelled[/]")
        else:  # e.g. while the codebase was still loading: nothing was recorded
            err.print("[yellow]terminated before the run started[/]")
        return 143
    except (ModelNotAvailable, ConnectionError, RuntimeError) as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 2
    except (KeyError, ValueError) as exc:
        err.print(f"[red]error:[/] {markup(message(exc))}")
        return 2
    from rlmd.cli.ending import report

    ended = {
        "run_id": result.run_id,
        "status": result.status,
        "answer": result.answer,
        "answer_source": result.answer_source,
        "iterations": result.iterations,
        "usage": result.usage,
        "error": result.error,
        "vote": result.vote,
        "budget": run_config.budget.to_dict(),
    }
    return report(ended, err, as_json=args.json)


def _store():
    from rlmd.store import Store

    store = Store(paths.store_path())
    store.mark_interrupted()
    return store


def cmd_runs(args: argparse.Namespace) -> int:
    from rlmd.cli.render import runs_table
    from rlmd.store.queries import RunQueryError

    store = _store()
    try:
        runs = store.list_runs(limit=args.limit, status=args.status, search=args.search)
    except RunQueryError as exc:  # `--status complete`, a search too long to run
        flag = "--" if exc.param == "status" else ""  # "status 'x' is no run status..."
        err.print(f"[red]error:[/] {flag}{markup(str(exc))}")
        return 2
    if args.json:
        print(json.dumps(runs, default=str))
    elif not runs:
        filtered = args.search is not None or args.status is not None
        err.print("no runs match" if filtered else "no runs recorded yet: try rlmd run")
    else:
        out.print(runs_table(runs, width=out.width))
    return 0


def _find_run(store, ref: str):
    """The run named by an id, a unique id prefix, or ``last``; prints why not and returns
    ``None`` when there is no such run."""
    try:
        if ref == "last":
            runs = store.list_runs(limit=1)
            run = runs[0] if runs else None
        else:
            run = store.get_run(ref)
    except ValueError as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return None
    if run is None:
        err.print(f"[red]error:[/] no run {ref!r} (see rlmd runs)")
    return run


def cmd_show(args: argparse.Namespace) -> int:
    from rlmd.cli.render import run_summary, run_tree

    store = _store()
    run = _find_run(store, args.run)
    if run is None:
        return 2
    tree = store.tree(run["id"])
    out.print(run_summary(tree), soft_wrap=False)  # long answers wrap inside the panel
    try:
        drawn = run_tree(tree)
    except RecursionError:  # hundreds of nested child runs (an edited store, --max-depth 500)
        err.print(f"[red]error:[/] {_TOO_DEEP.format(run=run['id'], what='rlmd show draws')}")
        return 1
    out.print(drawn, soft_wrap=False)
    return 0


_TOO_DEEP = (
    "run {run}'s tree is nested deeper than {what}; "
    "rlmd export {run} --format jsonl writes it flat, a record a line"
)


def cmd_export(args: argparse.Namespace) -> int:
    from rlmd.store import export_run

    store = _store()
    run = _find_run(store, args.run)
    if run is None:
        return 2
    if args.format == "otlp":
        return _export_otlp(store.tree(run["id"]), args)
    try:
        text = export_run(store, run["id"], fmt=args.format)
    except RecursionError:  # JSON nests each child run in its parent: too deep to encode
        err.print(
            f"[red]error:[/] {_TOO_DEEP.format(run=run['id'], what='--format json can hold')}"
        )
        return 1
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            err.print(
                f"[red]error:[/] cannot write {markup(str(args.output))}: {markup(str(exc.strerror or exc))}"
            )
            return 2
        err.print(f"wrote {args.output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _export_otlp(tree: dict, args: argparse.Namespace) -> int:
    try:
        from rlmd.frontdoors.otel import export_tree
    except ModuleNotFoundError as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}; install it with: pip install 'rlmd[otel]'")
        return 2
    try:
        sent = export_tree(tree, args.endpoint, content=args.include_content)
    except ValueError as exc:  # not a URL of a receiver: nothing was sent
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 2
    except ConnectionError as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 1
    err.print(f"sent {sent} spans of run {tree['id']} (trace of root run {tree['root_run_id']})")
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    from rlmd_tui.app import run

    return run(args)


def cmd_sandbox(args: argparse.Namespace) -> int:
    from rlmd.cli.sandbox import run

    return run(args)


def cmd_train(args: argparse.Namespace) -> int:
    from rlmd.cli.train import run

    return run(args)


def cmd_server(args: argparse.Namespace) -> int:
    from rlmd.cli.serve import run_server_command

    return run_server_command(args)


def cmd_ask(args: argparse.Namespace) -> int:
    from rlmd.cli.ask import run

    return run(args, err)


def cmd_door(args: argparse.Namespace) -> int:
    from rlmd.cli.doors import run_door_command

    return run_door_command(args)


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from rlmd import config

    if args.models_command == "pull":
        from rlmd.models.pull import KNOWN_LOCAL_MODELS, pull

        if args.name not in KNOWN_LOCAL_MODELS:
            err.print(
                f"[red]error:[/] unknown local model {args.name!r}; known: {', '.join(KNOWN_LOCAL_MODELS)}"
            )
            return 2
        path = pull(args.name, progress=lambda msg: err.print(msg))
        print(path)
        return 0
    try:
        registry = config.load(Path.cwd()).registry()
    except ValueError as exc:  # a config file's error names the file and the key
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 2
    wide = out.width >= 110
    table = Table(pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("provider", no_wrap=True)
    if wide:
        table.add_column("model", overflow="fold")
    for name in ("window", "$/M in", "$/M out", "usable"):
        table.add_column(name, no_wrap=True, justify="left" if name == "usable" else "right")
    notes: list[str] = []  # why a model is not usable, one whole line each under the table
    for spec, reason in registry.list():
        if reason is not None:
            notes.append(f"{len(notes) + 1}. {markup(spec.name)}: {markup(reason)}")
        table.add_row(
            Text(spec.name),
            spec.provider,
            *([Text(spec.model)] if wide else []),
            f"{spec.context_window:,}",
            "?" if spec.price_input is None else f"{spec.price_input:g}",
            "?" if spec.price_output is None else f"{spec.price_output:g}",
            "[green]yes[/]" if reason is None else f"[yellow]no[/] (see {len(notes)})",
        )
    out.print(table)
    for note in notes:
        out.print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

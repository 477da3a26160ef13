"""``rlmd ask QUESTION``: one question from the shell, answered by the user's daemon in the
warm workspace of a folder.

``rlmd run`` is a process of its own: it reads the context, starts a sandbox, answers and
exits. ``rlmd ask`` hands the question to the daemon (starting it as ``rlmd attach`` does,
through :class:`rlmd.frontdoors.link.DaemonLink`) as one ``rlmd.task.start`` in the workspace
of a folder, so the codebase is loaded once and the REPL's variables are kept from one
question to the next, and follows the task: progress on stderr as ``rlmd run`` draws it
(:class:`rlmd.cli.progress.ProgressPrinter`), then the answer, ``--json`` object and exit
code of :mod:`rlmd.cli.ending`.

Exit codes: 0 the run completed; 1 it ended otherwise (a budget, a failure, cancelled from
another client) or the daemon went away while it ran; 2 bad usage, a flag the daemon's task
cannot carry, a daemon that refused the task (its message is printed) or could not be
reached; 130 Ctrl-C and 143 SIGTERM/SIGHUP, after the daemon was asked to cancel the task
(the daemon and the workspace stay up).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmd.cli.budget_flags import add_run_flags

if TYPE_CHECKING:
    import asyncio

    from rlmd.cli.term import LazyConsole
    from rlmd.frontdoors.link import DaemonLink

NOT_CARRIED: dict[str, tuple[str, str]] = {
    "context": (
        "--context",
        "rlmd ask's context is its workspace folder (--workspace/-w, default the current "
        "folder); for a file, text or stdin use rlmd run --context",
    ),
    "template": (
        "--template",
        "the daemon takes a workspace's container template from the config "
        "([workspace] sandbox_options.template), not per task; or use rlmd run --template",
    ),
    "threads": (
        "--threads",
        "the daemon loads local models with the config's n_threads ([models.NAME] "
        "n_threads), not per task; or use rlmd run --threads",
    ),
    "no_extraction": (
        "--no-extraction",
        "the daemon's task takes no such switch ([run] extraction = false in the config "
        "does it for every task); or use rlmd run --no-extraction",
    ),
    "cluster": (
        "--cluster",
        "the daemon's cluster is chosen when it starts (rlmd serve --cluster, or [cluster] "
        "in your config); or use rlmd run --cluster",
    ),
    "samples": (
        "--samples",
        "the daemon runs one trajectory per task; use rlmd run --samples",
    ),
}
"""``rlmd run`` flags that ``rlmd.task.start`` has no parameter for: the ``args`` attribute,
the flag, and what to do instead. ``rlmd ask`` refuses them (exit 2) rather than drop them."""

_SIGNAL_EXIT: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 143}
"""The exit code after each signal, as ``rlmd run`` has it."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``ask`` to the ``rlmd`` subparsers."""
    from rlmd.sandbox import BACKENDS

    a = sub.add_parser(
        "ask",
        help="ask the daemon about a folder, in its warm workspace (REPL variables kept "
        "between questions)",
        description="Answer QUESTION about the workspace folder through your rlmd daemon "
        "(started if none runs): the codebase is loaded once and the REPL's variables are "
        "kept from one ask to the next, across the CLI, the TUI, VS Code, MCP and ACP. "
        "Progress goes to stderr, the answer to stdout; exit codes as rlmd run's (0 "
        "completed, 1 ended otherwise or the daemon went away, 2 bad usage or refused by the "
        "daemon, 130 Ctrl-C, which cancels the task but leaves the daemon and workspace up). "
        "rlmd run's --context, --template, --threads, --no-extraction, --cluster and "
        "--samples have no counterpart in a daemon task and are refused.",
    )
    a.add_argument("question")
    a.add_argument(
        "--workspace",
        "-w",
        metavar="DIR",
        help="project folder; its codebase is the context (default: the current folder)",
    )
    a.add_argument("--model", "-m", help="root model: a registry name or provider:model")
    a.add_argument("--sub-model", help="model for sub-calls and child runs")
    a.add_argument(
        "--sandbox",
        choices=list(BACKENDS),
        help="REPL backend of the workspace (only when it has none running yet)",
    )
    add_run_flags(a)
    a.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the answer"
    )
    a.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress on stderr (warnings, the answer's notices and the trajectory line stay)",
    )
    a.add_argument(
        "--no-queue",
        action="store_true",
        help="fail at once when another task holds the workspace (default: wait in line)",
    )
    a.add_argument("--no-start", action="store_true", help="fail instead of starting a daemon")
    a.add_argument(
        "--start-timeout",
        type=float,
        default=15.0,
        help="seconds to wait for a daemon this command starts (default 15)",
    )
    for attr, (flag, _) in NOT_CARRIED.items():  # accepted only to be refused by name
        if attr == "no_extraction":
            a.add_argument(flag, action="store_true", default=None, help=argparse.SUPPRESS)
        elif attr == "cluster":
            a.add_argument(flag, nargs="?", const="", help=argparse.SUPPRESS)
        elif attr == "context":
            a.add_argument(flag, "-c", help=argparse.SUPPRESS)
        elif attr == "samples":
            a.add_argument(flag, type=int, help=argparse.SUPPRESS)
        else:
            a.add_argument(flag, help=argparse.SUPPRESS)


def problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``rlmd ask``'s arguments (before any daemon is asked), else
    ``None``: an empty question or model name, a flag of :data:`NOT_CARRIED` (but
    ``--samples 1``, which is what a task does), a budget
    :class:`~rlmd.engine.budget.Budget` refuses (named as the flag), a start timeout that is
    not a number of seconds > 0."""
    if not args.question.strip():
        return "the question is empty"
    for flag, value in (("--model", args.model), ("--sub-model", args.sub_model)):
        if value is not None and not value.strip():  # "$MODEL" unset: not the default
            return f"{flag} is empty; name a model (rlmd models lists them)"
    for attr, (flag, instead) in NOT_CARRIED.items():
        value = getattr(args, attr, None)
        if value is not None and not (attr == "samples" and value == 1):  # one: as a task is
            return f"rlmd ask cannot pass {flag} to the daemon: {instead}"
    if not (math.isfinite(args.start_timeout) and args.start_timeout > 0):
        return f"--start-timeout must be a number of seconds > 0, got {args.start_timeout}"
    from rlmd.cli.budget_flags import RUN_FLAGS, budget_flag_problem

    return budget_flag_problem(args, RUN_FLAGS)


def task_params(args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    """The ``rlmd.task.start`` parameters of ``args`` in ``workspace`` (a resolved folder):
    only what the user gave, so the daemon's config defaults apply to the rest."""
    from rlmd.cli.budget_flags import RUN_FLAGS

    params: dict[str, Any] = {
        "workspace": str(workspace),
        "question": args.question,
        "queue": not args.no_queue,
    }
    models = {k: v for k, v in (("root", args.model), ("sub", args.sub_model)) if v}
    if models:
        params["models"] = models
    if args.sandbox:
        params["sandbox"] = args.sandbox
    budgets = {
        field: getattr(args, attr)
        for field, attr in RUN_FLAGS.items()
        if getattr(args, attr) is not None
    }
    if budgets:
        params["budgets"] = budgets
    return params


def run(args: argparse.Namespace, err: LazyConsole) -> int:
    """``rlmd ask``: ask, follow, print; returns the exit code (see the module docstring).

    Raises:
        OSError: stdout cannot be written (``rlmd.cli.main`` says so).
    """
    import asyncio

    from rlmd.cli.doors import workspace_folder
    from rlmd.cli.term import markup

    if sys.stdout is None:  # `rlmd ask Q >&-`: the whole task would run to lose its answer
        err.print("[red]error:[/] stdout is closed: the answer would have nowhere to go")
        return 2
    workspace, said = workspace_folder(args.workspace)
    if workspace is None:
        err.print(f"[red]error:[/] {markup(str(said))}")
        return 2
    return asyncio.run(_Ask(args, workspace, err).main())


class _Ask:
    """One ``rlmd ask``: the daemon link, the task's run id once the daemon gave it, and
    what the user's signals asked for."""

    def __init__(self, args: argparse.Namespace, workspace: Path, err: LazyConsole) -> None:
        self.args, self.workspace, self.err = args, workspace, err
        self.link: DaemonLink | None = None
        self.run_id: str | None = None
        self.signum: int | None = None  # the first ending signal, if one came
        self.asked = False  # rlmd.task.start is on its way: its run id must be cancelled
        self._cancelling: asyncio.Task[None] | None = None
        self.ended = False  # the daemon said the task finished

    async def main(self) -> int:
        import asyncio

        from rlmd.cli.term import markup
        from rlmd.frontdoors.link import DaemonLink

        me = asyncio.current_task()
        assert me is not None
        self._signals(me)
        try:
            try:
                self.link = await DaemonLink.open(
                    autostart=not self.args.no_start, timeout_s=self.args.start_timeout
                )
            except ConnectionError as exc:
                self.err.print(f"[red]error:[/] {markup(str(exc))}")
                return 2
            except OSError as exc:  # PermissionError: an unsafe socket folder
                self.err.print(f"[red]error:[/] cannot reach the rlmd daemon: {markup(str(exc))}")
                return 2
            return await self._follow()
        except asyncio.CancelledError:
            me.uncancel()
            if self._cancelling is not None:  # let the cancel reach the daemon
                await asyncio.wait({self._cancelling}, timeout=5.0)
            return self._gave_up()
        finally:
            self._signals(None)
            if self.link is not None:
                if self._cancelling is not None:  # let a cancel on its way reach the daemon
                    await asyncio.wait({self._cancelling}, timeout=10.0)
                elif self.run_id is not None and not self.ended:
                    await self._abandon()
                await self.link.close()

    async def _abandon(self) -> None:
        """This command stops following its task for another reason than a signal (its
        stderr's reader went away: ``rlmd ask Q 2>&1 | head``; an error): cancel the task,
        which would otherwise run on in the daemon, holding the workspace and spending
        tokens, for an answer nobody reads. Quietly: stderr may be what failed."""
        import contextlib

        assert self.link is not None and self.run_id is not None
        with contextlib.suppress(Exception):
            await self.link.command("rlmd.task.cancel", {"run_id": self.run_id}, timeout=10.0)

    def _signals(self, me: asyncio.Task[Any] | None) -> None:
        """Take the ending signals over for task ``me``; with ``None``, give them back (a
        Ctrl-C is a ``KeyboardInterrupt`` again)."""
        import asyncio

        loop = asyncio.get_running_loop()
        for sig in _SIGNAL_EXIT:
            if me is None:
                loop.remove_signal_handler(sig)
            else:
                loop.add_signal_handler(sig, self._on_signal, sig, me)

    def _on_signal(self, signum: int, me: asyncio.Task[Any]) -> None:
        """The first signal once the task is asked for cancels it on the daemon (and this
        command waits for the daemon to say it ended); any other stops waiting at once."""
        if self.signum is not None or not self.asked:
            self.signum = self.signum or signum
            me.cancel()
            return
        self.signum = signum
        if self.run_id is not None:
            self._cancel()
        # else: rlmd.task.start is still on its way; its run id is cancelled on arrival

    def _cancel(self) -> None:
        """Send ``rlmd.task.cancel`` for the task, then say so. Sent first: after SIGHUP
        (the terminal closed) stderr is a hung-up tty and printing raises, which left the
        cancel unsent and this command waiting for a task that ran on."""
        import asyncio
        import contextlib

        from rlmd.cli.term import markup

        run_id = self.run_id
        assert run_id is not None and self.link is not None
        link = self.link

        async def cancel() -> None:
            try:
                await link.command("rlmd.task.cancel", {"run_id": run_id})
            except TimeoutError:  # a stopped or stuck daemon: its str() is empty
                self._say(
                    "[yellow]the daemon did not answer the cancel[/] (stopped or stuck? its "
                    f"log: {markup(_log_path())}; press Ctrl-C again to stop waiting)"
                )
            except Exception as exc:  # noqa: BLE001 - the run's end (or the loss) is reported
                self._say(f"[yellow]the daemon did not take the cancel:[/] {markup(exc)}")

        self._cancelling = asyncio.get_running_loop().create_task(cancel())
        with contextlib.suppress(OSError):
            self.err.print(
                f"[yellow]cancelling run {markup(run_id)}[/] (the daemon and the workspace "
                "stay up; press Ctrl-C again to stop waiting for it)"
            )

    def _say(self, text: str) -> None:
        """A line on stderr, if it can still be written (not a hung-up terminal)."""
        try:
            self.err.print(text)
        except OSError:
            pass

    def _gave_up(self) -> int:
        """Stopped by a signal before the task ended (or before it started)."""
        from rlmd.cli.term import markup

        code = _SIGNAL_EXIT.get(self.signum or signal.SIGINT, 130)
        if not self.asked:
            self.err.print("[yellow]interrupted before the task was asked for[/]")
        elif self.run_id is None:  # a second signal while rlmd.task.start was on its way
            self.err.print(
                "[yellow]interrupted before the daemon said which run it started[/] (rlmd "
                "runs lists it if it did)"
            )
        else:
            self.err.print(
                f"[yellow]stopped waiting: the daemon was asked to cancel run "
                f"{markup(self.run_id)}[/] (rlmd show {markup(self.run_id)} has what it did)"
            )
        return code

    async def _follow(self) -> int:
        from rlmd.cli.ending import report
        from rlmd.cli.term import markup
        from rlmd.engine.events import from_dict
        from rlmd.frontdoors.link import is_finished
        from rlmd.server.client import RpcError

        assert self.link is not None
        printer = None
        if not self.args.quiet:
            from rlmd.cli.progress import ProgressPrinter

            printer = ProgressPrinter(self.err.console)
        final: dict[str, Any] | None = None
        self.asked = True
        try:
            async for note in self.link.follow(task_params(self.args, self.workspace)):
                params = note["params"]
                if self.run_id is None:  # the status rlmd.task.start answered
                    self.run_id = str(params["run_id"])
                    if self.signum is not None:
                        self._cancel()
                    elif printer is not None and params.get("state") == "queued":
                        await self._say_queue(params)
                if note["method"] == "rlmd/event":
                    if printer is not None:
                        try:
                            event = from_dict(params)
                        except (KeyError, TypeError, ValueError):
                            event = None
                        if event is not None:
                            printer(event)
                elif is_finished(note):
                    final = params
                    self.ended = True
                    self._signals(None)  # the task is over: nothing left to cancel
        except RpcError as exc:  # refused: a busy workspace, bad params, a model not here
            self.err.print(
                f"[red]error:[/] the rlmd daemon refused the task: {markup(exc.message)}"
            )
            return 2
        except ConnectionError as exc:  # the daemon went away
            said = str(exc) if self.run_id else f"lost the rlmd daemon before it answered: {exc}"
            self.err.print(f"[red]error:[/] {markup(said)}")
            return 1
        except TimeoutError:
            self.err.print(
                "[red]error:[/] the rlmd daemon did not answer rlmd.task.start in time "
                f"(rlmd runs lists what it started; its log: {markup(_log_path())})"
            )
            return 1
        assert final is not None
        for line in final.get("notes") or []:  # sandbox restarts: variables lost
            self.err.print(f"[yellow]note:[/] {markup(line)}")
        ended = {
            **final,
            "usage": final.get("final_usage"),
            "vote": None,
        }
        extra = {"workspace": final.get("workspace"), "notes": list(final.get("notes") or [])}
        code = report(ended, self.err, as_json=self.args.json, extra=extra)
        if self.signum is not None:
            return _SIGNAL_EXIT.get(self.signum, 130)
        return code

    async def _say_queue(self, status: dict[str, Any]) -> None:
        """Say so when the task waits in line behind others in the workspace (the TUI's,
        VS Code's, another ask's)."""
        from rlmd.server.client import RpcError

        assert self.link is not None
        try:
            listed = await self.link.command("rlmd.task.list", {"workspace": status["workspace"]})
        except (RpcError, ConnectionError, TimeoutError):
            return  # only a courtesy: the task's own notifications still come
        mine = next((t for t in listed["tasks"] if t["run_id"] == status["run_id"]), None)
        if mine is None or mine.get("state") != "queued":
            return
        ahead = [
            t
            for t in listed["tasks"]
            if t["run_id"] != status["run_id"]
            and (t.get("created_at") or 0) <= (status.get("created_at") or 0)
        ]
        if ahead:
            n = len(ahead)
            self.err.print(
                f"[dim]waiting for the workspace: {n} task{'s' * (n != 1)} ahead of this one "
                "(Ctrl-C cancels)[/]"
            )


def _log_path() -> str:
    from rlmd import paths

    return str(paths.log_path())

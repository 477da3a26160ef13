"""What ``rlmd run`` and ``rlmd ask`` print once a run has ended, so both say the same thing
about the same outcome: the answer on stdout (its notices on stderr, before it) or one JSON
object, then the ``trajectory:`` line; and the exit code that goes with it."""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Mapping
from typing import Any

from rlmd import paths
from rlmd.cli.term import LazyConsole, markup, visible

JSON_KEYS = (
    "run_id",
    "status",
    "answer",
    "answer_source",
    "iterations",
    "usage",
    "error",
    "vote",
)
"""The keys of ``rlmd run --json``'s object, in order, before ``store``."""


def exit_code(status: str | None) -> int:
    """0 for a run that ``completed``, 1 for any other end (a budget, a failure, a cancel)."""
    return 0 if status == "completed" else 1


def _stdout() -> Any:
    """``sys.stdout``; an ``OSError`` when it is closed (``rlmd run Q >&-``: Python makes it
    ``None``, and ``print`` then writes nothing at all)."""
    if sys.stdout is None:
        raise OSError(errno.EBADF, "stdout is closed")
    return sys.stdout


def write_answer(answer: str) -> None:
    """The answer on stdout: as is when piped (byte for byte what the run returned, lone
    surrogates as backslash escapes), with control characters made visible on a terminal."""
    if _stdout().isatty():
        answer = visible(answer)
    sys.stdout.flush()
    sys.stdout.buffer.write((answer + "\n").encode("utf-8", errors="backslashreplace"))
    sys.stdout.buffer.flush()


def report(
    ended: Mapping[str, Any],
    err: LazyConsole,
    *,
    as_json: bool,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """Print how a run ended and return :func:`exit_code` of its status.

    Args:
        ended: the run's end: the :data:`JSON_KEYS` (missing ones are ``None``; ``usage`` is
            the tree's :meth:`rlmd.engine.usage.Usage.to_dict`) and ``budget`` (the run's
            :meth:`Budget.to_dict`, for the partial-answer and budget notes).
        err: the console for stderr.
        as_json: one JSON object on stdout (the :data:`JSON_KEYS`, ``store``, then
            ``extra``) instead of the answer and its notices; the ``trajectory:`` line is
            left out then.
        extra: more keys for the JSON object (``rlmd ask``: ``workspace``, ``notes``).

    Raises:
        OSError: stdout cannot be written (``BrokenPipeError`` when its reader went away).
    """
    if as_json:
        from rlmd.store.codec import to_jsonable  # lone surrogates as in the store

        obj = {key: ended.get(key) for key in JSON_KEYS}
        obj["store"] = str(paths.store_path())
        obj.update(extra or {})
        print(json.dumps(to_jsonable(obj)), file=_stdout())
        return exit_code(ended.get("status"))

    from rlmd.cli.outcome import answer_note, budget_note

    answer = ended.get("answer")
    if answer is not None:
        note = answer_note(dict(ended))
        if note:  # before the answer, so a reader of the terminal sees it first
            err.print(f"[bold yellow]{markup(note[0].upper() + note[1:])}.[/]")
        elif ended.get("answer_source") == "unverified":
            err.print(
                "[yellow]Unverified answer: the checks doubted it (an error or 'not "
                "found' text, a missing file, a count over nothing, or a value no output "
                "showed) and the model gave it anyway; check it before relying on it.[/]"
            )
        vote = ended.get("vote")
        if vote is not None:
            tally = ", ".join(f"{v:g}x {k[:40]!r}" for k, v in vote["tally"].items())
            err.print(f"[dim]vote over {len(vote['samples'])} samples: {markup(tally)}[/]")
        write_answer(answer)
    else:
        err.print(
            f"[yellow]no answer[/] ({ended.get('status')}: {markup(str(ended.get('error')))})"
        )
        said = budget_note(dict(ended))
        if said:
            err.print(f"[yellow]{markup(said)}[/]")
    err.print(f"[dim]trajectory: rlmd show {ended.get('run_id')}  (store {paths.store_path()})[/]")
    return exit_code(ended.get("status"))

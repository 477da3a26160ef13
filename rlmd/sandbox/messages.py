"""What the sandbox tells the model: limits hit, cells stopped, kernels restarted.

Every backend words these the same way; the session (:mod:`rlmd.sandbox.session`) and the
in-process backend build their results from these helpers only.
"""

from __future__ import annotations

from typing import Any

from rlmd.sandbox.base import CellResult
from rlmd.sandbox.limits import Limits, MiB

LABELS = {
    "wall_s": "wall-clock time",
    "cpu_s": "CPU time",
    "memory_bytes": "memory",
    "processes": "process count",
    "open_files": "open files",
    "file_size_bytes": "file size",
    "disk_bytes": "working folder size",
    "output_bytes": "output",
    "network": "network",
}
"""How each :class:`~rlmd.sandbox.limits.Limits` field is named to the model."""

AFTER_RESTART = (
    "context, tools and helpers are bound again; re-run imports and rebuild other variables."
)


def describe_bytes(n: int) -> str:
    """``536870912`` -> ``"512 MiB"`` (for messages to the model)."""
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


def join_names(names: list[str]) -> str:
    """``["a", "b"]`` -> ``"a, b"``; no names -> ``"none"``."""
    return ", ".join(names) if names else "none"


def limit_message(limit: str, value: Any, *, restarted: bool, lost: list[str] | None = None) -> str:
    """The model-readable sentence for an exceeded limit (``limit``: a :class:`Limits` field
    name), e.g. ``limit_message("memory_bytes", 512 * MiB, restarted=True, lost=["rows"])``
    -> ``"memory limit 512 MiB exceeded; the kernel was restarted; variables lost: rows."``."""
    if limit.endswith("_bytes"):
        shown = describe_bytes(int(value))
    elif limit.endswith("_s"):
        shown = f"{value:g} s"
    else:
        shown = str(value)
    text = f"{LABELS.get(limit, limit)} limit {shown} exceeded"
    if restarted:
        text += "; the kernel was restarted; variables lost: " + join_names(lost or [])
    return text + "."


def limit_phrase(limit: str, value: Any) -> str:
    """``"memory limit 512 MiB exceeded"`` (no restart, no full stop)."""
    return limit_message(limit, value, restarted=False)[:-1]


_HINTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (limit, one of these on the error's last line, and one of these anywhere, if any)
    ("memory_bytes", ("MemoryError",), ()),
    ("file_size_bytes", ("[Errno 27]", "File too large"), ()),
    ("open_files", ("[Errno 24]", "Too many open files"), ()),
    ("disk_bytes", ("[Errno 28]", "No space left on device"), ()),
    (
        "processes",
        ("[Errno 11]", "can't start new thread"),
        ("fork", "Popen", "spawn", "thread", "Process"),
    ),
)


def limit_hint(error: str | None, limits: Limits) -> str | None:
    """If the formatted exception ``error`` of a cell is what hitting one of ``limits`` looks
    like from inside (``MemoryError`` under a memory limit, ``EFBIG`` under a file-size limit,
    ``EMFILE``, ``EAGAIN`` from ``fork``), the model-readable sentence naming that limit (the
    kernel survived, so nothing was restarted); else ``None``."""
    if not error:
        return None
    lines = error.rstrip().splitlines()
    last = lines[-1] if lines else ""
    for name, marks, context in _HINTS:
        value = getattr(limits, name)
        if value is None or not any(m in last for m in marks):
            continue
        if context and not any(c in error for c in context):
            continue
        return limit_phrase(name, value) + "; the REPL state is kept."
    return None


def timed_out_text(timeout: float, *, stopped: bool, cause: str = "") -> str:
    """The start of a timed-out cell's error: it stopped when interrupted (``stopped``; the
    REPL state is kept) or did not (the caller says what happened next); ``cause`` says what
    it was waiting on (see :func:`rlmd.sandbox.clock.timeout_cause`)."""
    head = f"cell timed out after {timeout:g} s ({limit_phrase('wall_s', timeout)})"
    head += f"; {cause}; it " if cause else " and "
    if stopped:
        return head + (
            "was interrupted; the REPL state is kept (variables assigned before the "
            "interruption included).\n"
        )
    return head + "did not stop when interrupted"


def restarted_text(what: str, lost: list[str]) -> str:
    """``what`` happened to the cell, so the kernel was restarted and ``lost`` are gone."""
    return f"{what}; the kernel was restarted; variables lost: {join_names(lost)}. {AFTER_RESTART}"


def died_text(how: str, lost: list[str]) -> str:
    """The kernel died while running the cell (``how``: ``"killed by SIGKILL"``, ...)."""
    return (
        f"the kernel process died while running the cell ({how}); it was restarted; "
        f"variables lost: {join_names(lost)}. {AFTER_RESTART}"
    )


def notice_text(what: str, lost: list[str]) -> str:
    """The line owed to the next cell after a restart between cells."""
    return f"[rlmd: {what}; variables lost: {join_names(lost)}]\n"


def note_stop(
    result: CellResult,
    timeout: float | None,
    *,
    timed_out: bool,
    interrupted: bool,
    cause: str = "",
) -> CellResult:
    """Mark a cell that finished after a timeout (``timed_out``, with ``timeout`` seconds)
    or an interrupt: its error starts with the standard message. Returns ``result``."""
    if timed_out:
        assert timeout is not None
        result.timed_out = True
        result.error = timed_out_text(timeout, stopped=True, cause=cause) + (result.error or "")
    elif interrupted:
        result.error = "the cell was interrupted; the REPL state is kept.\n" + (result.error or "")
    return result


def with_notice(result: CellResult, notice: tuple[str, list[str]] | None) -> CellResult:
    """Fold a pending "the kernel was restarted before this cell" notice into ``result``."""
    if notice is not None:
        text, lost = notice
        result.kernel_restarted = True
        result.lost_variables = list(dict.fromkeys([*lost, *result.lost_variables]))
        result.stderr = text + result.stderr
    return result

"""Small pieces shared by the backends."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rlmd.kernel import protocol
from rlmd.sandbox.base import CellResult, SandboxError, VarInfo
from rlmd.sandbox.limits import Limits, limit_message


async def wait(fut: asyncio.Future[Any], timeout: float | None) -> Any:
    """``await fut`` with a time limit (raises ``TimeoutError`` and cancels ``fut``);
    leaner than ``asyncio.wait_for``, which matters on the per-cell hot path."""
    if timeout is None:
        return await fut
    expired = False

    def expire() -> None:
        nonlocal expired
        if not fut.done():
            expired = True
            fut.cancel()

    handle = asyncio.get_running_loop().call_later(max(0.0, timeout), expire)
    try:
        return await fut
    except asyncio.CancelledError:
        if expired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


def inside(workdir: str | None, path: str) -> str:
    """``path`` resolved under the host folder ``workdir`` (symlinks followed on the host).

    Raises:
        ValueError: ``path`` is absolute, empty, or escapes ``workdir``.
        SandboxError: ``workdir`` is ``None`` (the sandbox is not started).
    """
    if workdir is None:
        raise SandboxError("the sandbox is not started")
    if not isinstance(path, str) or not path or "\x00" in path or os.path.isabs(path):
        raise ValueError(f"path {path!r} must be relative to the working folder")
    root = os.path.realpath(workdir)
    full = os.path.realpath(os.path.join(root, path))
    if not full.startswith(root + os.sep):
        raise ValueError(f"path {path!r} escapes the working folder")
    return full


def join_names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


AFTER_RESTART = (
    "context, tools and helpers are bound again; re-run imports and rebuild other variables."
)


def wall_phrase(timeout: float) -> str:
    """How a cell's wall-clock limit of ``timeout`` seconds is named in messages."""
    return limit_message("wall_s", timeout, restarted=False)[:-1]


def timed_out_text(timeout: float, *, stopped: bool) -> str:
    """The start of a timed-out cell's error: it stopped when interrupted (``stopped``; the
    REPL state is kept) or did not (the caller says what happened next)."""
    head = f"cell timed out after {timeout:g} s ({wall_phrase(timeout)}) and "
    if stopped:
        return head + (
            "was interrupted; the REPL state is kept (variables assigned before the "
            "interruption included).\n"
        )
    return head + "did not stop when interrupted"


def restarted_text(what: str, lost: list[str]) -> str:
    """``what`` happened to the cell, so the kernel was restarted and ``lost`` are gone."""
    return f"{what}; the kernel was restarted; variables lost: {join_names(lost)}. {AFTER_RESTART}"


def note_stop(
    result: CellResult, timeout: float | None, *, timed_out: bool, interrupted: bool
) -> CellResult:
    """Mark a cell that finished after a timeout (``timed_out``, with ``timeout`` seconds)
    or an interrupt: its error starts with the standard message. Returns ``result``."""
    if timed_out:
        assert timeout is not None
        result.timed_out = True
        result.error = timed_out_text(timeout, stopped=True) + (result.error or "")
    elif interrupted:
        result.error = "the cell was interrupted; the REPL state is kept.\n" + (result.error or "")
    return result


class LimitAliases:
    """``timeout_s`` and ``max_output_chars`` read from the backend's ``limits``."""

    limits: Limits

    @property
    def timeout_s(self) -> float | None:
        """Default wall-clock seconds per cell (``limits.wall_s``)."""
        return self.limits.wall_s

    @property
    def max_output_chars(self) -> int:
        """Cap per stream per cell (``limits.output_bytes``)."""
        return int(self.limits.output_bytes or protocol.DEFAULT_MAX_OUTPUT)


def result_from_kernel(res: dict[str, Any], duration_s: float, fd_text: str = "") -> CellResult:
    """A :class:`CellResult` from the kernel's exec result (see ``rlmd.kernel.protocol``)."""
    return CellResult(
        stdout=res["stdout"],
        stderr=res["stderr"] + fd_text,
        error=res["error"],
        final=res["final"],
        variables=[VarInfo(**v) for v in res["variables"]],
        restored=list(res["restored"]),
        duration_s=duration_s,
    )


def with_notice(result: CellResult, notice: tuple[str, list[str]] | None) -> CellResult:
    """Fold a pending "the kernel was restarted before this cell" notice into ``result``."""
    if notice is not None:
        text, lost = notice
        result.kernel_restarted = True
        result.lost_variables = list(dict.fromkeys([*lost, *result.lost_variables]))
        result.stderr = text + result.stderr
    return result


class RebindState:
    """What a backend re-binds after its kernel restarts: the context, user tools and the
    values set from the host, plus the notice owed to the model. Mixed into the backends,
    which call :meth:`_init_rebind_state` in their constructor."""

    _context: tuple[Any, bool] | None
    _tool_callables: list[str]
    _tool_values: dict[str, Any]
    _user_names: list[str]
    _history: tuple[Any] | None
    _notice: tuple[str, list[str]] | None

    def _init_rebind_state(self) -> None:
        """Nothing bound yet: no context, tools, host-set values or pending restart notice."""
        self._context = None
        self._tool_callables = []
        self._tool_values = {}
        self._history = None
        self._user_names = []
        self._notice = None

    def _note_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        """Record tools just defined in the kernel (a later definition replaces an earlier)."""
        for name in callables:
            self._tool_values.pop(name, None)
            if name not in self._tool_callables:
                self._tool_callables.append(name)
        for name, value in values.items():
            if name in self._tool_callables:
                self._tool_callables.remove(name)
            self._tool_values[name] = value
        self._user_names = [n for n in self._user_names if n not in callables and n not in values]

    def _note_variable(self, name: str, value: Any) -> None:
        """Record a value just set in the kernel from the host."""
        if name == "history":
            self._history = (value,)
        elif name in self._tool_values:
            self._tool_values[name] = value
        elif name not in self._user_names:
            self._user_names.append(name)

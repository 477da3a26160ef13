"""Small pieces shared by the backends."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmd.sandbox.base import CellResult, VarInfo


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


def join_names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


AFTER_RESTART = (
    "context, tools and helpers are bound again; re-run imports and rebuild other variables."
)


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

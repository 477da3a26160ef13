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

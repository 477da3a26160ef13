"""The REPL operations every out-of-process backend does the same way over its kernel
channel: tools, variables, one non-exec request with restart-on-failure, and the re-binding
after a restart. A backend mixes in :class:`KernelOps` and provides a small interface."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmd.sandbox._channel import KernelDied
from rlmd.sandbox._common import RebindState, join_names
from rlmd.sandbox.base import SandboxError, VarInfo

_MAPPED_ERRORS: dict[str, type[Exception]] = {
    "KeyError": KeyError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def kernel_error(msg: dict[str, Any]) -> Exception:
    """The exception for a failed non-exec request's ``done`` frame: ``KeyError``,
    ``ValueError`` and ``TypeError`` as themselves, anything else as :class:`SandboxError`
    ``"kernel error: <type>: <text>"``."""
    etype = str(msg.get("etype") or "")
    text = str(msg.get("error") or "")
    cls = _MAPPED_ERRORS.get(etype)
    if cls is not None:
        return cls(text)
    return SandboxError(f"kernel error: {etype}: {text}")


class KernelOps(RebindState):
    """``define_tools``, ``set_variable``, ``get_variable``, ``list_variables``, ``_op`` and
    ``_rebind`` over a backend's:

    - ``_lock`` (an ``asyncio.Lock``), ``_closed``, ``op_timeout_s``;
    - ``await _live()``: the current kernel handle, restarted first if it died (raises
      :class:`SandboxError` when closed or not started);
    - ``await _op_raw(obj)``: one request on the current kernel, its ``result`` (raises
      ``TimeoutError``, :class:`KernelDied`, or :func:`kernel_error`'s exception);
    - ``await _op_died(handle)``: why the kernel died during a request, as the phrase after
      ``"failed: "``;
    - ``await _drop_kernel()``: take the current kernel out of use and end it (if any);
    - ``await _new_kernel()``: start a fresh kernel and make it the current one;
    - ``await _bind_context_raw(value, codebase)``: bind ``context`` on the current kernel
      (default: one ``bind_context`` request).
    """

    _lock: asyncio.Lock
    _closed: bool
    op_timeout_s: float
    restarts: int

    async def _live(self) -> Any:
        raise NotImplementedError

    async def _op_raw(self, obj: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def _op_died(self, handle: Any) -> str:
        raise NotImplementedError

    async def _drop_kernel(self) -> None:
        raise NotImplementedError

    async def _new_kernel(self) -> None:
        raise NotImplementedError

    async def _bind_context_raw(self, value: Any, codebase: bool) -> None:
        await self._op_raw({"op": "bind_context", "value": value, "codebase": codebase})

    # -- public ------------------------------------------------------------------------------

    async def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        async with self._lock:
            await self._op(
                {"op": "define_tools", "callables": list(callables), "values": dict(values)}
            )
            self._note_tools(callables, values)

    async def set_variable(self, name: str, value: Any) -> None:
        async with self._lock:
            await self._op({"op": "set_var", "name": name, "value": value})
            self._note_variable(name, value)

    async def get_variable(self, name: str) -> Any:
        async with self._lock:
            return (await self._op({"op": "get_var", "name": name}))["value"]

    async def list_variables(self) -> list[VarInfo]:
        async with self._lock:
            result = await self._op({"op": "list_vars"})
            self._user_names = [v["name"] for v in result]
            return [VarInfo(**v) for v in result]

    # -- shared internals ----------------------------------------------------------------------

    async def _op(self, obj: dict[str, Any]) -> Any:
        """One non-exec request on a live kernel, its result.

        Raises:
            SandboxError: it timed out or the kernel died (the kernel was restarted and the
                next cell is told), or the sandbox was closed meanwhile.
            KeyError / ValueError / TypeError: the kernel refused the request.
        """
        handle = await self._live()
        try:
            return await self._op_raw(obj)
        except (TimeoutError, KernelDied) as exc:
            if self._closed:
                raise SandboxError("the sandbox was closed") from None
            if isinstance(exc, TimeoutError):
                what = f"timed out after {self.op_timeout_s:g} s"
            else:
                what = f"failed: {await self._op_died(handle)}"
            await self._restart_noting(f"the kernel was restarted after {obj['op']} {what}")
            raise SandboxError(f"{obj['op']} {what}; the kernel was restarted") from None

    async def _restart(self) -> None:
        """Replace the kernel with a fresh one and bind the context, tools and ``history``
        again (counted in ``restarts``; the user's variables are gone).

        Raises:
            SandboxError: the sandbox is closed, or the new kernel failed to start or bind.
        """
        await self._drop_kernel()
        if self._closed:
            raise SandboxError("the sandbox is closed")
        self.restarts += 1
        self._user_names = []
        await self._new_kernel()
        await self._rebind()

    async def _restart_noting(self, what: str) -> None:
        """:meth:`_restart`, and owe the next cell the notice ``[rlmd: <what>; variables
        lost: ...]`` (the user variables there were before the restart).

        Raises:
            SandboxError: as :meth:`_restart`.
        """
        lost = list(self._user_names)
        await self._restart()
        self._notice = (f"[rlmd: {what}; variables lost: {join_names(lost)}]\n", lost)

    async def _rebind(self) -> None:
        """Bind the context, tools and ``history`` again on a fresh kernel.

        Raises:
            SandboxError: the kernel timed out or died meanwhile.
        """
        try:
            if self._context is not None:
                await self._bind_context_raw(*self._context)
            if self._tool_callables or self._tool_values:
                await self._op_raw(
                    {
                        "op": "define_tools",
                        "callables": self._tool_callables,
                        "values": self._tool_values,
                    }
                )
            if self._history is not None:
                await self._op_raw({"op": "set_var", "name": "history", "value": self._history[0]})
        except (TimeoutError, KernelDied) as exc:
            raise SandboxError(f"the restarted kernel failed while re-binding: {exc!r}") from None

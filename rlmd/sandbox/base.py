"""The sandbox contract: a persistent Python REPL the engine runs model code in.

A backend runs the kernel (``rlmd/kernel/``) somewhere (this process, a child process, a
container, a VM) and speaks to it over one framed channel. Calls that model code makes to
the host (``llm_query``, ``rlm_query``, user tools) come back through ``CallHandler``; the
kernel never holds an API key.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlmd.kernel import protocol
from rlmd.sandbox.limits import Limits

if TYPE_CHECKING:  # files.py imports this module
    from rlmd.sandbox.files import ContextFile

CallHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Host side of a call made from model code: ``await handler(fn, args) -> JSON value``.

``fn`` is ``"llm_query" | "llm_query_batched" | "rlm_query" | "rlm_query_batched" | "tool"``.
Args are what the kernel stub received (for ``"tool"``: ``{"name", "args", "kwargs"}``).
Raising :class:`CallError` makes the same message raise inside the kernel as ``RuntimeError``.
"""

# The kernel's own lists (it imports nothing from the host): names restored after every
# cell if model code rebinds them, and the extra helpers of a codebase context.
RESERVED_NAMES = protocol.RESERVED_NAMES
CODEBASE_HELPERS = protocol.CODEBASE_HELPERS


def check_page(offset: int, limit: int) -> None:
    """Raise ``ValueError`` unless ``offset >= 0`` and ``0 <= limit <= MAX_VARS_PAGE``
    (integers, not booleans)."""
    if type(offset) is not int or offset < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    if type(limit) is not int or not 0 <= limit <= protocol.MAX_VARS_PAGE:
        raise ValueError(
            f"limit must be an integer from 0 to {protocol.MAX_VARS_PAGE}, got {limit!r}"
        )


class CallError(Exception):
    """Raised by a :data:`CallHandler` to make the call fail inside the REPL with this message."""


class SandboxError(Exception):
    """The sandbox could not start, or died and could not be restarted."""


@dataclass
class VarInfo:
    """One REPL variable: ``name``, Python ``type`` name, ``size`` (``len()`` where defined,
    else ``None``) and a short ``repr`` preview (at most 80 characters)."""

    name: str
    type: str
    size: int | None = None
    preview: str = ""


@dataclass
class VarPage:
    """One page of a REPL's variables (:meth:`Sandbox.list_variables_page`).

    Attributes:
        variables: at most ``limit`` variables, sorted by name (code point order).
        total: how many variables match (all pages together), not only this page's.
        offset: the position of ``variables[0]`` among all that match.
    """

    variables: list[VarInfo]
    total: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, ``None`` when this one is the last."""
        end = self.offset + len(self.variables)
        return end if self.variables and end < self.total else None

    @classmethod
    def from_kernel(cls, out: Any, offset: int, limit: int) -> VarPage:
        """The kernel's ``list_vars_page`` answer, checked (model code runs in the kernel).

        Raises:
            SandboxError: it is not ``{"total": int, "variables": [VarInfo dict, ...]}``
                with at most ``limit`` entries.
        """
        try:
            total, raw = out["total"], out["variables"]
            if type(total) is not int or not isinstance(raw, list) or len(raw) > limit:
                raise TypeError("a page must hold an int total and at most limit variables")
            infos = [VarInfo(**v) for v in raw]
            if not all(isinstance(v.name, str) for v in infos):
                raise TypeError("a variable's name must be a string")
        except (KeyError, TypeError) as exc:
            raise SandboxError(f"the kernel sent a malformed variables page: {exc}") from None
        # a total below what this page shows would end the paging early: at least that
        return cls(infos, max(total, offset + len(infos)) if infos else max(total, 0), offset)


@dataclass
class CellResult:
    """The outcome of one executed cell.

    Attributes:
        stdout / stderr: everything the cell printed, in full (the engine caps what the model
            sees, the store keeps all of it).
        error: the formatted exception (``"Traceback ...\\nNameError: ..."``) or ``None``.
        final: the value passed to ``FINAL`` / ``FINAL_VAR`` as text, or ``None``.
        variables: names the cell created or rebound, with type and size.
        restored: reserved names the cell rebound and the kernel put back.
        duration_s: wall-clock seconds.
        timed_out: the cell hit its wall-clock timeout; the kernel was killed and restarted.
        kernel_restarted: the kernel died (timeout, ``os._exit``, crash) and was restarted.
        lost_variables: user variables that did not survive the restart.
    """

    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    final: str | None = None
    variables: list[VarInfo] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    timed_out: bool = False
    kernel_restarted: bool = False
    lost_variables: list[str] = field(default_factory=list)


class Sandbox(abc.ABC):
    """A persistent REPL. One instance serves one run (or one workspace) at a time.

    Lifecycle: ``await start(handler)``, then ``load_context``/``define_tools``, then any number
    of ``execute``; ``close`` at the end. Every method may raise :class:`SandboxError`.
    """

    #: backend name recorded in the trajectory: ``"subprocess"``, ``"inprocess"``, ...
    kind: str = "abstract"

    @property
    @abc.abstractmethod
    def isolation(self) -> dict[str, Any]:
        """What isolation this sandbox really got, as recorded per run
        (``{"isolated": bool, "process": bool, "network": "host"|"none", ...}``)."""

    @abc.abstractmethod
    async def start(self, handler: CallHandler) -> None:
        """Start the kernel; ``handler`` serves host calls made from model code."""

    def warm(self) -> None:  # noqa: B027 (optional hook; most backends have nothing to do)
        """Begin, in the background, what :meth:`start` will need (the subprocess backend
        starts its kernel process ahead), so a start soon after waits less; call it before
        other slow work such as loading a codebase. Blocks for at most a fork."""

    @abc.abstractmethod
    async def load_context(self, value: Any, *, codebase: bool = False) -> None:
        """Bind ``context`` (str, list or dict; for a codebase a ``{path: text}`` dict) and, for
        a codebase, the ``list_files`` / ``read_file`` / ``grep`` helpers. Survives restarts."""

    async def update_codebase(
        self, value: dict[str, str], changed: dict[str, str], removed: list[str]
    ) -> None:
        """Bind the codebase ``value`` as ``context`` (as :meth:`load_context` with
        ``codebase=True``), where the codebase bound now differs from it only by ``changed``
        (``{relpath: text}`` of the files new or changed) and ``removed`` (relative paths).
        A backend that can send the kernel just the difference does (a warm workspace's
        refresh after an edit: a few files, not the whole codebase); where it cannot, or the
        kernel refuses the difference, the whole of ``value`` is bound. The default binds
        ``value`` whole. Survives restarts (a new kernel gets ``value``).

        Raises:
            SandboxError: the sandbox failed (the whole bind failed too).
        """
        await self.load_context(value, codebase=True)

    def new_context_file(self) -> ContextFile | None:
        """A new, empty file in the kernel's working folder that a codebase can be written to
        while it is read (``rlmd.context.Spool``: each file's UTF-8 bytes, then an index),
        then bound with :meth:`load_context_file`; ``None`` while the folder does not exist
        yet (the start has not made it) or when this backend has none (bind with
        :meth:`load_context`). Blocking but short (a file's creation); safe from any thread.
        The file has a fresh random name made with ``O_EXCL``; closing its
        :attr:`~rlmd.sandbox.files.ContextFile.file` is the writer's part, removing it the
        sandbox's (at the bind, or with the folder).

        Raises:
            OSError: the file could not be made.
        """
        return None

    async def load_context_file(
        self, value: dict[str, str], file: ContextFile, index_at: int
    ) -> None:
        """Bind the codebase ``value`` as ``context`` (as :meth:`load_context` with
        ``codebase=True``) from ``file``, written and closed, whose index begins at byte
        ``index_at``; the file is removed. Only for a file from :meth:`new_context_file`.

        Raises:
            SandboxError: the kernel refused or failed to read the file (it was restarted).
        """
        raise SandboxError(f"the {self.kind} sandbox binds no context files")

    @abc.abstractmethod
    async def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        """Bind user tools: ``callables`` become stubs that call the host through the handler
        with fn ``"tool"``; ``values`` (JSON-able) are bound as plain variables. All become
        reserved. Survives restarts."""

    @abc.abstractmethod
    async def execute(
        self, code: str, *, timeout_s: float | None = None, wall_limit_s: float | None = None
    ) -> CellResult:
        """Run one cell. Never raises for errors in the code itself: they come back in
        :attr:`CellResult.error`. Past a limit the cell is interrupted (the kernel killed
        and restarted if it does not stop).

        Args:
            code: the cell's Python source.
            timeout_s: the cell's own time limit, seconds (default: ``limits.wall_s``). Time
                blocked on sub-calls (``llm_query``, ``rlm_query``, batched forms) does not
                count; time in host tools does (see :mod:`rlmd.sandbox.clock`).
            wall_limit_s: an upper bound on the cell's elapsed time, everything counted
                (the run's wall-clock budget left); ``None``: none.
        """

    @abc.abstractmethod
    async def set_variable(self, name: str, value: Any) -> None:
        """Bind a JSON-able value to ``name`` in the REPL."""

    @abc.abstractmethod
    async def get_variable(self, name: str) -> Any:
        """A variable's value: JSON-able values as is, anything else as its ``repr``.

        Raises:
            KeyError: no such variable.
        """

    @abc.abstractmethod
    async def list_variables(self) -> list[VarInfo]:
        """The user's variables (reserved names excluded), every one of them, in the REPL's
        order. A REPL may hold 100,000s: to show them, use :meth:`list_variables_page`."""

    async def list_variables_page(
        self,
        offset: int = 0,
        limit: int = protocol.VARS_PAGE,
        match: str = "",
        *,
        by_name: bool = True,
    ) -> VarPage:
        """One page of the user's variables whose names contain ``match`` (all for ``""``),
        sorted by name (code point order): ``limit`` of them from ``offset``. ``limit=0``
        only counts them. The backends page in the kernel, so previews are made for one page
        only; this default pages :meth:`list_variables` here.

        Args:
            offset: how many matching variables to skip, >= 0.
            limit: at most this many variables, 0..``protocol.MAX_VARS_PAGE``.
            match: a substring the names must contain (case-sensitive).
            by_name: ``False``: in the REPL's order (the order they were first defined).

        Raises:
            ValueError: ``offset`` or ``limit`` is out of range.
            SandboxError: the sandbox is stopped or failed.
        """
        check_page(offset, limit)
        infos = [v for v in await self.list_variables() if match in v.name]
        if by_name:
            infos.sort(key=lambda v: v.name)
        return VarPage(infos[offset : offset + limit] if limit else [], len(infos), offset)

    @abc.abstractmethod
    async def save_variables(
        self,
        names: list[str] | None,
        path: str,
        *,
        max_var_bytes: int,
        max_total_bytes: int,
        info_path: str | None = None,
    ) -> dict[str, Any]:
        """Have the kernel write the saveable ones among the user variables ``names`` (every
        user variable for ``None``) as one JSON object to the file ``path`` (one plain name in
        the working folder); the JSON work happens in the kernel, not in this process
        (:mod:`rlmd.kernel.varfile`).

        Args:
            info_path: also a plain name in the working folder: what was saved and skipped
                goes to that file (``{"saved": ..., "skipped": ...}`` as below, ASCII JSON)
                instead of into the reply, which then holds counts only.

        Returns:
            What the kernel says, unchecked: ``{"saved": {name: {"type", "size", "preview",
            "bytes"}}, "skipped": {name: reason}, "bytes": int}``; with ``info_path``:
            ``{"bytes": int, "saved_count": int, "skipped_count": int, "info_bytes": int}``
            (``bytes``: the values file's length).

        Raises:
            ValueError / OSError / TypeError: the kernel refused or could not write the file.
            SandboxError: the sandbox failed.
        """

    @abc.abstractmethod
    async def load_variables(
        self, path: str, names: list[str], *, only_missing: bool = False
    ) -> dict[str, Any]:
        """Have the kernel bind ``names`` from the JSON object in the file ``path`` (one plain
        name in the working folder, removed after); with ``only_missing``, names the REPL
        defines already are left alone.

        Returns:
            What the kernel says, unchecked: ``{"restored": [name], "missing": {name: reason}}``.

        Raises:
            ValueError / OSError: the file is unreadable or not a JSON object.
            SandboxError: the sandbox failed.
        """

    @abc.abstractmethod
    async def remove_file(self, path: str) -> None:
        """Have the kernel delete the file ``path`` (one plain name in the working folder) if
        it is there.

        Raises:
            ValueError: a bad ``path``. SandboxError: the sandbox failed.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the kernel and free everything. Safe to call twice."""

    # -- control, files and health (issue 3) -------------------------------------------------

    #: the limits this sandbox enforces (see :mod:`rlmd.sandbox.limits`; what each backend
    #: really enforces is in ``isolation["enforced"]``)
    limits: Limits

    @property
    def timeout_s(self) -> float | None:
        """Default wall-clock seconds per cell (``limits.wall_s``; ``None``: no limit)."""
        return self.limits.wall_s

    @property
    def max_output_chars(self) -> int:
        """Cap per stream per cell (``limits.output_bytes``, else the kernel's default)."""
        return int(self.limits.output_bytes or protocol.DEFAULT_MAX_OUTPUT)

    #: hostile-code cases this backend documents it cannot contain, by the case names of
    #: ``tests/test_sandbox_hostile.py`` (``"memory_bomb"``, ``"os_exit"``, ``"kill_parent"``,
    #: ...); the hostile suite skips those, naming them. A backend may compute it per
    #: instance from the isolation it really got.
    uncontained: frozenset[str] = frozenset()

    @abc.abstractmethod
    async def interrupt(self) -> bool:
        """Interrupt the running cell (``KeyboardInterrupt`` inside it) and keep the REPL and
        its variables. Returns ``True`` if a cell was running. A cell that does not yield to
        the interrupt within a few seconds (a C-level loop) gets the kernel restarted, as a
        timeout does; the interrupted :meth:`execute` then reports ``kernel_restarted``."""

    @abc.abstractmethod
    async def restart(self) -> list[str]:
        """Replace the kernel with a fresh one, binding context, tools and ``history`` again.
        Returns the user variables that were lost.

        Raises:
            SandboxError: not started, closed, or the new kernel failed to start.
        """

    @abc.abstractmethod
    async def upload(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (relative: under the sandbox's working folder; parent
        folders are made).

        Raises:
            ValueError: ``path`` is absolute or escapes the working folder.
            SandboxError: the sandbox is not started.
        """

    @abc.abstractmethod
    async def download(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of ``path`` (relative to the working folder), at most ``max_bytes``.

        Raises:
            FileNotFoundError: no such file. ValueError: ``path`` is absolute or escapes the
            working folder, or the file is over ``max_bytes``. SandboxError: the sandbox is
            not started.
        """

    @abc.abstractmethod
    async def health(self) -> dict[str, Any]:
        """A cheap probe: ``{"alive": bool, "pid": int|None, "restarts": int, ...}``; never
        raises for a dead kernel (it says ``alive: False``)."""

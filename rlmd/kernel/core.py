"""The REPL kernel: one persistent namespace, cell execution, the helpers model code sees.

Standard library only, no I/O of its own: the transport is somebody else's job. The
subprocess kernel (``main.py``) drives a :class:`Kernel` from its request loop; the
in-process backend drives one from a worker thread. Host calls go through the ``call``
function given to the constructor: ``call(fn, args) -> JSON value``, raising
``RuntimeError(message)`` when the host reports an error.
"""

from __future__ import annotations

import builtins
import codecs
import io
import keyword
import os
import reprlib
import sys
import threading
import time
import types
from collections.abc import Callable
from operator import itemgetter

from . import cells, protocol, varfile
from .codebase import Codebase, helpers

TYPE_CHECKING = False
if TYPE_CHECKING:  # importing typing costs milliseconds at every kernel start
    from typing import Any

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))

if TYPE_CHECKING:
    CallFn = Callable[[str, dict[str, Any]], Any]

PREVIEW_CHARS = 80


class CellInterrupted(BaseException):
    """Raised asynchronously into a cell's thread to stop it (in-process timeouts).

    A ``BaseException`` so that ``except Exception`` in model code does not swallow it.
    """


# --------------------------------------------------------------------------- cell sources

_SOURCES: dict[str, tuple[int, None, list[str], str]] = {}
"""Cells' sources for ``linecache`` while nothing has imported it: ``linecache`` imports
``tokenize`` and ``re`` (with ``enum``), ~7 ms of every kernel start that a first cell
rarely needs. :class:`_LinecacheFinder` hands them over when something imports it."""


def remember_source(filename: str, code: str) -> None:
    """Make ``code`` the lines ``linecache`` (tracebacks, ``inspect.getsource``, warnings)
    gives for ``filename``: at once when ``linecache`` is imported, else when it is."""
    entry = (len(code), None, code.splitlines(True), filename)
    cache = getattr(sys.modules.get("linecache"), "cache", None)
    if isinstance(cache, dict):
        if _SOURCES:  # imported by a finder this one did not see (or reloaded)
            cache.update(_SOURCES)
            _SOURCES.clear()
        cache[filename] = entry
        return
    _SOURCES[filename] = entry
    if _LinecacheFinder not in sys.meta_path:
        sys.meta_path.insert(0, _LinecacheFinder)


class _LinecacheFinder:
    """A ``sys.meta_path`` finder that finds nothing itself: when ``linecache`` is imported
    it takes itself off the path and wraps the loader the other finders return, so that the
    new module's cache holds the cells' sources before the import returns."""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "linecache":
            return None
        try:
            sys.meta_path.remove(cls)
        except ValueError:
            pass
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(name, path, target)
                if spec is not None:
                    break
        run = getattr(getattr(spec, "loader", None), "exec_module", None)
        if spec is None or run is None:
            return spec

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            cache = getattr(module, "cache", None)
            if isinstance(cache, dict):
                cache.update(_SOURCES)
                _SOURCES.clear()

        spec.loader.exec_module = exec_module
        return spec


# --------------------------------------------------------------------------- capture


class _ByteSink:
    """``sys.stdout.buffer`` stand-in: decodes UTF-8 bytes into the owning capture."""

    def __init__(self, owner: Capture):
        self._owner = owner
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        data = bytes(data)
        self._owner.write(self._decoder.decode(data))
        return len(data)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class Capture(io.TextIOBase):
    """A text stream that keeps everything written to it, up to ``cap`` characters; the rest
    is counted and reported by a marker at the end of :meth:`getvalue`."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(
        self,
        cap: int = protocol.DEFAULT_MAX_OUTPUT,
        *,
        stray: tuple[set[int], Capture] | None = None,
    ):
        self._parts: list[str] = []
        self._size = 0
        self._cap = max(0, int(cap))
        self._lock = threading.Lock()
        self._sink: _ByteSink | None = None
        self.dropped = 0
        # (native ids of threads an earlier cell left running, where their writes go)
        self._stray = stray

    @property
    def buffer(self) -> _ByteSink:
        """Binary writes (``sys.stdout.buffer.write(b"...")``), decoded as UTF-8."""
        if self._sink is None:
            self._sink = _ByteSink(self)
        return self._sink

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if self._stray is not None and threading.get_native_id() in self._stray[0]:
            return self._stray[1].write(s)
        n = len(s)
        with self._lock:
            room = self._cap - self._size
            if n <= room:
                self._parts.append(s)
                self._size += n
            else:
                if room > 0:
                    self._parts.append(s[:room])
                    self._size += room
                self.dropped += n - max(room, 0)
        return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        # Model code closing sys.stdout must not break the capture.
        pass

    def isatty(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def getvalue(self) -> str:
        with self._lock:
            text = "".join(self._parts)
            if self.dropped:
                text += (
                    f"\n[rlmd: output truncated: {self.dropped} more characters were dropped "
                    f"(cap: {self._cap} characters per stream per cell)]\n"
                )
        return text


STRAY_LABEL = "[rlmd: written during this cell by a thread an earlier cell left running:]\n"


def _labelled(before: str, label: str, text: str) -> str:
    """``before``, then ``text`` after ``label`` on a line of its own (``before`` alone
    when there is no ``text``)."""
    if not text:
        return before
    return f"{before}{'' if not before or before.endswith(chr(10)) else chr(10)}{label}{text}"


class _Router:
    """Replaces ``sys.stdout``/``sys.stderr`` in a shared process: writes from a thread that
    is running a cell go to that cell's capture, everything else to the original stream."""

    def __init__(self, fallback: Any):
        self.fallback = fallback
        self.routes: dict[int, Capture] = {}

    def _target(self) -> Any:
        return self.routes.get(threading.get_ident(), self.fallback)

    def write(self, s: str) -> int:
        return self._target().write(s)

    def writelines(self, lines: Any) -> None:
        self._target().writelines(lines)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


_router_lock = threading.Lock()
_hook_saved: list[Any] = []  # sys.displayhook while thread-captured cells run


class _GlobalCapture:
    """While a cell runs: ``sys.stdout``/``sys.stderr`` are its captures and
    ``sys.displayhook`` the echo (a class, not ``contextlib``: importing that costs a
    millisecond at every kernel start)."""

    def __init__(self, out: Capture, err: Capture):
        self._new = out, err, _echo
        self._old: tuple[Any, Any, Any] = (None, None, None)

    def __enter__(self) -> None:
        self._old = sys.stdout, sys.stderr, sys.displayhook
        sys.stdout, sys.stderr, sys.displayhook = self._new

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr, sys.displayhook = self._old


class _ThreadCapture:
    """While a cell runs in this thread: what this thread writes to ``sys.stdout`` and
    ``sys.stderr`` goes to its captures (through a :class:`_Router`), and a trailing
    expression's echo to its stdout."""

    def __init__(self, out: Capture, err: Capture):
        self._out, self._err = out, err
        self._ident = 0
        self._installed: list[tuple[str, _Router]] = []

    def __enter__(self) -> None:
        self._ident = ident = threading.get_ident()
        installed = self._installed
        with _router_lock:
            for name, cap in (("stdout", self._out), ("stderr", self._err)):
                current = getattr(sys, name)
                if not isinstance(current, _Router):
                    current = _Router(current)
                    setattr(sys, name, current)
                current.routes[ident] = cap
                installed.append((name, current))
            # A trailing expression's echo (see cells.py): _echo prints to the routed stdout.
            if sys.displayhook is not _echo:
                _hook_saved[:] = [sys.displayhook]
                sys.displayhook = _echo

    def __exit__(self, *exc: object) -> None:
        installed, ident = self._installed, self._ident
        with _router_lock:
            for name, router in installed:
                router.routes.pop(ident, None)
                if not router.routes and getattr(sys, name) is router:
                    setattr(sys, name, router.fallback)
            if not installed[0][1].routes and _hook_saved and sys.displayhook is _echo:
                sys.displayhook = _hook_saved.pop()


# --------------------------------------------------------------------------- helpers


_REPR = reprlib.Repr()
_REPR.maxstring = PREVIEW_CHARS
_REPR.maxother = PREVIEW_CHARS
_REPR.maxlong = 40
_REPR.maxlevel = 3
_REPR.maxdict = 6
for _attr in ("maxlist", "maxtuple", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_REPR, _attr, 8)


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """A short ``repr``, at most ``limit`` characters, cheap even for huge values."""
    try:
        if isinstance(value, (bytes, bytearray)):
            text = repr(value[: limit + 1])
        else:
            text = _REPR.repr(value)
    except Exception:
        text = f"<{type(value).__name__} object (repr failed)>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def size_of(value: Any) -> int | None:
    """``len(value)`` where the type defines it (and it works), else ``None``."""
    if isinstance(value, type) or not hasattr(type(value), "__len__"):
        return None
    try:
        n = len(value)
    except Exception:
        return None
    return n if isinstance(n, int) else None


def var_info(name: str, value: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": type(value).__name__,
        "size": size_of(value),
        "preview": preview(value),
    }


PREVIEW_BUDGET_S = 0.5
"""Seconds all variable previews of one cell (or one ``list_vars``) may take together: they
call the variables' ``__repr__``/``__len__``, which model code defines. Past it, the rest
say so instead; the cell's output is kept either way."""


class _PreviewCut(BaseException):
    """Raised into a preview thread past :data:`PREVIEW_BUDGET_S` (never caught by a
    hostile ``except Exception``)."""


def _cut_info(name: str, value: Any) -> dict[str, Any]:
    cls = type(value)
    type_name = type.__dict__["__name__"].__get__(cls, type)  # no metaclass property runs
    return {
        "name": name,
        "type": type_name,
        "size": None,
        "preview": f"<preview cut: repr/len took over {PREVIEW_BUDGET_S:g} s>",
    }


_PLAIN_TYPES = frozenset({str, bytes, bytearray, float, complex, bool, type(None)})
_PLAIN_INT_BITS = 4096


def is_plain(value: Any) -> bool:
    """Whether :func:`var_info` of ``value`` runs no model code and takes bounded time: a
    value of an exact builtin scalar type (no subclass can define ``__repr__``/``__len__``;
    strings and bytes are sliced before ``repr``), an ``int`` only up to 4,096 bits (model
    code can lift the int-to-text digit limit, and a huge int's ``repr`` is quadratic)."""
    cls = type(value)
    return cls in _PLAIN_TYPES or (cls is int and value.bit_length() <= _PLAIN_INT_BITS)


def bounded_var_infos(items: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """:func:`var_info` of each ``(name, value)``, computed in a helper thread within
    :data:`PREVIEW_BUDGET_S` in all; entries not done by then get a "preview cut" text and
    the helper is stopped (a ``__repr__`` looping in C keeps only that helper busy). When
    every value :func:`is_plain`, they are made here (a thread costs ~0.1 ms per cell)."""
    if not items:
        return []
    if all(is_plain(v) for _, v in items):
        return [var_info(n, v) for n, v in items]
    done: list[dict[str, Any]] = []

    def work() -> None:
        try:
            for name, value in items:
                done.append(var_info(name, value))
        except _PreviewCut:
            pass

    helper = threading.Thread(target=work, name="rlmd-preview", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # no thread to spare (process limit): no previews this time
        return [_cut_info(n, v) for n, v in items]
    helper.join(PREVIEW_BUDGET_S)
    if helper.is_alive():
        _raise_in(helper, _PreviewCut)
    finished = list(done)
    return finished + [_cut_info(n, v) for n, v in items[len(finished) :]]


def _raise_in(thread: threading.Thread, exc: type[BaseException]) -> None:
    """Raise ``exc`` in ``thread`` at its next bytecode (the helper owns nothing else, so a
    late delivery only ends it)."""
    import ctypes

    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(exc)
        )


_TASKS = "/proc/self/task"
_listed: tuple[int, frozenset[int]] = (-1, frozenset())
"""The link count of :data:`_TASKS` and the thread ids listed there, at the last listing."""
_lasting: set[int] = set()
"""Native ids of threads that end only with the process (see :func:`lasting_thread`)."""
_LOOKUPS = 2
"""Threads of the last listing looked up one by one at most, before listing again."""


def lasting_thread(native_id: int | None) -> None:
    """Note a thread of the kernel's own that ends only with the process (the subprocess
    kernel's channel watcher): :func:`_thread_ids` does not look it up before each cell."""
    if native_id is not None:
        _lasting.add(native_id)


def _thread_ids() -> set[int]:
    """Native ids of this process's threads now, those started with ``_thread`` too
    (``/proc/self/task``; elsewhere the threads ``threading`` knows).

    Listing the folder costs ~15 us a cell in a warm kernel; its link count (2 + the number
    of threads, one ``stat``) does not. The last listing is reused when that count has not
    changed and every thread it holds still exists (not looked up: the caller's own and
    :func:`lasting_thread` ones): a thread that ends and another that starts since then
    fail the second test, one that starts alone the first."""
    global _listed
    try:
        count = os.stat(_TASKS).st_nlink
        last_count, last = _listed
        if count == last_count:
            me = threading.get_native_id()
            others = [t for t in last if t != me and t not in _lasting]
            if len(others) <= _LOOKUPS and all(os.path.exists(f"{_TASKS}/{t}") for t in others):
                return set(last)
        ids = {int(t) for t in os.listdir(_TASKS)}
        _listed = (count, frozenset(ids))
        return ids
    except (OSError, ValueError):
        return {t.native_id for t in threading.enumerate() if t.native_id is not None}


def _is_kernel_frame(filename: str) -> bool:
    return filename.startswith(KERNEL_DIR + os.sep)


def format_exception(exc: BaseException) -> str:
    """A traceback like Python prints it, without the kernel's own frames."""
    try:
        import traceback  # only when a cell fails: it costs milliseconds to import

        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
        seen: set[int] = set()

        def strip(t: Any) -> None:
            if t is None or id(t) in seen:
                return
            seen.add(id(t))
            t.stack = traceback.StackSummary.from_list(
                [f for f in t.stack if not _is_kernel_frame(f.filename)]
            )
            strip(t.__cause__)
            strip(t.__context__)
            for sub in getattr(t, "exceptions", None) or ():
                strip(sub)

        strip(te)
        return "".join(te.format())
    except Exception:  # pragma: no cover - formatting must never take the kernel down
        return f"{type(exc).__name__}: {exc!r}\n"


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{what} {name!r} is not a valid Python identifier")
    if name.startswith("__") and name.endswith("__"):
        raise ValueError(f"{what} {name!r}: dunder names are not allowed")
    return name


def read_value_file(path: str, fmt: str) -> Any:
    """A value the host wrote to a file it shares with the kernel (a large context is
    faster that way than through the channel): ``fmt`` ``"text"`` (UTF-8) or ``"json"``."""
    with open(path, encoding="utf-8") as f:
        if fmt == "text":
            return f.read()
        import json  # here: not imported at every kernel start

        return json.load(f)


def _as_value_error(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, any failure raised as ``ValueError("<type>: <message>")``: a full disk
    or a ``MemoryError`` while writing a checkpoint, or model code that broke the kernel's
    modules, is the REPL's problem, which the host reports, not a dead sandbox."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def json_copy(value: Any, what: str) -> Any:
    """A deep copy through JSON (the types the host would see); TypeError if impossible.

    Values made only of the exact built-in JSON types (``str``, ``int``, ``float``,
    ``bool``, ``None``, lists and tuples of them, dicts with ``str`` keys) are copied
    directly, with the result the round trip gives (tuples become lists; an immutable
    ``str`` or number is the same object): the in-process sandbox copies every host call's
    arguments and answer, and ``json.loads(json.dumps(...))`` of a short prompt costs
    several microseconds of Python around the C codec. Anything else (a subclass, another
    type, a non-``str`` key, nesting too deep, a dict changed while copied) takes the JSON
    way, with its conversions and errors."""
    try:
        return _plain_copy(value)
    except (_NotPlain, RecursionError, RuntimeError):
        pass
    import json  # here: not imported at every kernel start

    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from None


class _NotPlain(Exception):
    """:func:`_plain_copy` met a value that is not of an exact built-in JSON type."""


def _plain_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))`` for values of the exact JSON types (see
    :func:`json_copy`); raises :class:`_NotPlain` for anything else."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out[key] = _plain_copy(item)
        return out
    if kind is list or kind is tuple:
        return [_plain_copy(item) for item in value]
    raise _NotPlain


_ECHO = "__rlmd_echo__"
_MISSING = object()


def _echo(value: Any) -> None:
    """What the REPL does with a cell's trailing expression: print its repr unless None."""
    if value is not None:
        print(repr(value))


def _no_input(*_args: Any, **_kwargs: Any) -> str:
    raise EOFError("input() is not available in the REPL: there is no user at a terminal")


# --------------------------------------------------------------------------- kernel


class Kernel:
    """One persistent REPL namespace with the RLM helpers bound in it.

    Args:
        call: ``call(fn, args) -> value``; sends one host call and blocks for its reply.
        capture: ``"global"`` swaps ``sys.stdout``/``sys.stderr`` for the duration of a cell
            (a process of its own); ``"thread"`` routes only the cell thread's writes (a
            process shared with the host).
        workdir: the working folder, where the files the host exchanges with the kernel go
            (``save_vars``, ``load_vars``); default: the current folder at construction
            (a subprocess kernel is started in it; model code may ``chdir`` later).
    """

    def __init__(self, call: CallFn, *, capture: str = "global", workdir: str | None = None):
        if capture not in ("global", "thread"):
            raise ValueError("capture must be 'global' or 'thread'")
        self._call = call
        self.workdir = os.path.abspath(workdir or os.getcwd())
        self._capture = _GlobalCapture if capture == "global" else _ThreadCapture
        self.module = types.ModuleType("__main__")
        self.ns: dict[str, Any] = self.module.__dict__
        bi = dict(vars(builtins))
        bi["input"] = _no_input
        bi[_ECHO] = _echo
        self.ns["__builtins__"] = bi
        self._reserved: dict[str, Any] = {}
        self._tool_names: set[str] = set()
        self._codebase: Codebase | None = None
        self._final: str | None = None
        self._older_threads: set[int] = set()
        self._cell_no = 0
        self.running = False
        self._bind_core_helpers()

    # -- namespace bookkeeping ------------------------------------------------------------

    def _reserve(self, name: str, value: Any) -> None:
        self._reserved[name] = value
        self.ns[name] = value

    def _unreserve(self, name: str) -> None:
        self._reserved.pop(name, None)
        self.ns.pop(name, None)

    def is_user_name(self, name: str, value: Any) -> bool:
        # A key that is not a string (``globals()[1] = 2``) names no variable.
        return (
            type(name) is str
            and not name.startswith("_")
            and name not in self._reserved
            and not isinstance(value, types.ModuleType)
        )

    def user_items(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, v in list(self.ns.items()) if self.is_user_name(k, v)]

    def user_names(self) -> list[str]:
        return [k for k, _ in self.user_items()]

    def restore_reserved(self) -> list[str]:
        """Put back every reserved name model code rebound or deleted; return their names."""
        restored = []
        ns = self.ns
        for name, value in self._reserved.items():
            if name not in ns or ns[name] is not value:
                ns[name] = value
                restored.append(name)
        return restored

    # -- the helpers model code sees -----------------------------------------------------

    def _bind_core_helpers(self) -> None:
        call = self._call
        kernel = self

        def llm_query(prompt: str, model: str | None = None) -> str:
            """Ask a sub-model one question; returns its answer as text.

            ``prompt`` can be long (whole chunks of the context). ``model`` picks a model by
            name; ``None`` means the run's default sub-model."""
            return call("llm_query", {"prompt": prompt, "model": model})

        def llm_query_batched(prompts: list[str], model: str | None = None) -> list[str]:
            """Like ``llm_query`` for many prompts at once, run concurrently by the host;
            returns the answers in the same order."""
            if isinstance(prompts, str):
                raise TypeError("llm_query_batched(prompts): pass a list of prompts, not a str")
            return call("llm_query_batched", {"prompts": list(prompts), "model": model})

        def llm_map(
            instruction: str,
            items: list[Any],
            model: str | None = None,
            items_per_call: int = 1,
        ) -> list[str]:
            """Map-reduce's map step: ask a sub-model ``instruction`` about every item, the
            calls run concurrently by the host (bounded); returns one answer per item, in the
            items' order. A failed item's slot holds ``"Error: ..."`` (the others still come
            back). ``items_per_call`` > 1 packs that many numbered items into one call and
            splits the reply by number (fewer, larger calls)."""
            if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
                raise TypeError("llm_map(instruction, items): items must be a list, not a str")
            if isinstance(items, dict):
                items = list(items.items())
            return call(
                "llm_map",
                {
                    "instruction": instruction,
                    "items": [i if isinstance(i, str) else repr(i) for i in items],
                    "model": model,
                    "items_per_call": items_per_call,
                },
            )

        def rlm_query(prompt: str, context: Any = None, model: str | None = None) -> str:
            """Start a child RLM (its own REPL) on ``prompt`` with ``context`` bound as its
            ``context``; returns its final answer as text."""
            return call("rlm_query", {"prompt": prompt, "context": context, "model": model})

        def rlm_query_batched(
            prompts: list[str], contexts: list[Any] | None = None, model: str | None = None
        ) -> list[str]:
            """Like ``rlm_query`` for many prompts (and optional matching contexts) at once,
            run concurrently by the host; returns the answers in the same order."""
            if isinstance(prompts, str):
                raise TypeError("rlm_query_batched(prompts): pass a list of prompts, not a str")
            prompts = list(prompts)
            if contexts is not None:
                contexts = list(contexts)
                if len(contexts) != len(prompts):
                    raise ValueError(
                        f"rlm_query_batched: {len(prompts)} prompts but {len(contexts)} contexts"
                    )
            return call(
                "rlm_query_batched", {"prompts": prompts, "contexts": contexts, "model": model}
            )

        def SHOW_VARS() -> dict[str, str]:
            """Print and return your variables (name -> type and size)."""
            items = kernel.user_items()
            shown: dict[str, str] = {}
            lines = []
            for name, value in items:
                n = size_of(value)
                desc = type(value).__name__ + (f" (len {n})" if n is not None else "")
                shown[name] = desc
                lines.append(f"  {name}: {desc} = {preview(value, 60)}")
            if lines:
                print(f"Variables ({len(lines)}):\n" + "\n".join(lines))
            else:
                print("No variables defined yet.")
            return shown

        def FINAL(value: Any) -> None:
            """Finish with ``str(value)`` as the final answer."""
            kernel._answer(str(value))

        def FINAL_VAR(name: str) -> None:
            """Finish with the value of the variable called ``name`` (a string) as the final
            answer, e.g. ``FINAL_VAR("answer")``."""
            if not isinstance(name, str):
                raise TypeError(
                    "FINAL_VAR takes the variable's name as a string, e.g. FINAL_VAR('answer'); "
                    "to finish with a value use FINAL(value)"
                )
            key = name.strip().strip("'\"`").strip()
            if key not in kernel.ns:
                existing = ", ".join(kernel.user_names()) or "(none)"
                raise NameError(
                    f"FINAL_VAR: no variable named {key!r}. Variables that exist: {existing}. "
                    "Assign the answer to a variable first, or use FINAL(value)."
                )
            kernel._answer(str(kernel.ns[key]))

        for fn in (
            llm_query,
            llm_query_batched,
            llm_map,
            rlm_query,
            rlm_query_batched,
            SHOW_VARS,
            FINAL,
            FINAL_VAR,
        ):
            self._reserve(fn.__name__, fn)
        self._reserve("context", None)
        self._reserve("history", None)

    def _make_tool(self, name: str) -> Callable[..., Any]:
        call = self._call

        def tool(*args: Any, **kwargs: Any) -> Any:
            return call("tool", {"name": name, "args": list(args), "kwargs": kwargs})

        tool.__name__ = tool.__qualname__ = name
        tool.__doc__ = f"Host tool {name!r}: runs on the host; arguments and result are JSON."
        return tool

    # -- operations ---------------------------------------------------------------------

    def _answer(self, text: str) -> None:
        """``FINAL``/``FINAL_VAR``: the answer of the cell running now, unless the calling
        thread was already running when that cell started (a thread an earlier cell left
        behind must not answer for a later one)."""
        if threading.get_native_id() in self._older_threads:
            raise RuntimeError(
                "FINAL/FINAL_VAR called from a thread an earlier cell left running; only the "
                "cell running now (or threads it started) can give the answer"
            )
        self._final = text

    def exec_cell(
        self,
        code: str,
        *,
        max_output: int = protocol.DEFAULT_MAX_OUTPUT,
        on_ran: Callable[[], None] | None = None,
    ) -> dict:
        """Run one cell; returns the exec result (see ``protocol``). ``on_ran`` is called
        when the cell's code has finished and variable previews that may run model code
        (bounded on their own, see :data:`PREVIEW_BUDGET_S`) are still to be made; not when
        every changed variable :func:`is_plain`."""
        if not isinstance(code, str):
            raise TypeError("code must be a string")
        self._older_threads = _thread_ids() - {threading.get_native_id()}
        self._cell_no += 1
        filename = f"<cell-{self._cell_no}>"
        remember_source(filename, code)
        # What a thread an earlier cell left running writes is not this cell's output: it
        # goes to the cell's stderr, after a label (it was mixed into stdout, session 12).
        stray = Capture(max_output)
        older = (self._older_threads, stray)
        out, err = Capture(max_output, stray=older), Capture(max_output, stray=older)
        self._final = None
        before = dict(self.ns)
        error = None
        t0 = time.perf_counter()
        with self._capture(out, err):
            try:
                self.running = True
                try:
                    self._run_code(code, filename)
                finally:
                    self.running = False
            except SystemExit as exc:
                error = format_exception(exc) + (
                    "(sys.exit()/exit() does not end the session; the REPL state is kept. "
                    "Use FINAL(...) or FINAL_VAR(...) to give the answer.)\n"
                )
            except BaseException as exc:
                error = format_exception(exc)
        duration = time.perf_counter() - t0
        restored = self.restore_reserved()
        names, changed = self._changes(before)
        if on_ran is not None and not all(is_plain(v) for _, v in changed):
            on_ran()  # the previews may run model code: the host's wall clock stops here
        return {
            "stdout": out.getvalue(),
            "stderr": _labelled(err.getvalue(), STRAY_LABEL, stray.getvalue()),
            "error": error,
            "final": self._final,
            "variables": bounded_var_infos(changed),
            "restored": restored,
            "names": names,
            "duration_s": duration,
        }

    def _run_code(self, code: str, filename: str) -> None:
        """Execute a cell like an interactive REPL: statements run in order and the value of a
        trailing expression, if not None, is printed as its repr (what ``python -i`` and
        Jupyter do; models often end a cell with a bare expression and expect to see it)."""
        parts = cells.split(code, filename)
        if parts is not None:  # plain compiles of the cell's parts (see cells.py)
            ns = self.ns
            for part in parts:
                exec(part, ns)  # a trailing expression goes to sys.displayhook: _echo
            return
        # The C node classes; imported here: making them costs milliseconds (at every
        # kernel start, when imported at the top), the ast module more.
        import _ast

        # compile(), not ast.parse(): a SyntaxError then carries no Python frame of ours.
        tree: Any = compile(code, filename, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
        last = tree.body[-1] if tree.body else None
        if isinstance(last, _ast.Expr):
            # One compile for the whole cell: the trailing expression becomes a call to the
            # echo builtin (a second compile of the expression cost tens of microseconds).
            value = last.value
            name = _ast.Name(_ECHO, _ast.Load())
            echo = _ast.Call(name, [value], [])
            for node in (name, echo):
                for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
                    setattr(node, attr, getattr(value, attr))
            last.value = echo
        exec(compile(tree, filename, "exec", dont_inherit=True), self.ns)

    def _changes(self, before: dict) -> tuple[list[str] | None, list[tuple[str, Any]]]:
        """Every user variable's name now (``None`` when they are the names there were as
        the cell started), and the ``(name, value)`` of those the cell created or rebound
        (``before``: the namespace as the cell started). The names of 200,000 variables
        are ~2.6 MB the host decoded after every cell; most cells add or remove none."""
        # is_user_name inlined: this runs after every cell over the whole namespace.
        reserved, module, missing = self._reserved, types.ModuleType, _MISSING
        changed = []
        names = []
        added = False
        for name, value in list(self.ns.items()):
            if (
                type(name) is not str
                or name.startswith("_")
                or name in reserved
                or isinstance(value, module)
            ):
                continue
            names.append(name)
            old = before.get(name, missing)
            if old is not value:
                changed.append((name, value))
                added = added or old is missing or isinstance(old, module)
        if not added:  # none new: the same names if none went either
            had = sum(
                1
                for name, value in before.items()
                if type(name) is str
                and not name.startswith("_")
                and name not in reserved
                and not isinstance(value, module)
            )
            if had == len(names):
                return None, changed
        return names, changed

    def bind_context(self, value: Any, codebase: bool = False) -> dict:
        if codebase:
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ValueError("a codebase context must be a {relative_path: text} dict of str")
            cb = Codebase(value)
            for name, fn in helpers(cb, self._call).items():
                self._reserve(name, fn)
            self._codebase = cb
        else:
            for name in protocol.CODEBASE_HELPERS:
                self._unreserve(name)
            self._codebase = None
        self._reserve("context", value)
        return {"type": type(value).__name__, "size": size_of(value)}

    def update_codebase(self, changed: Any, removed: Any, files: Any) -> dict:
        """Apply a difference to the bound codebase (see ``update_codebase`` in
        :mod:`.protocol`) and bind ``context`` anew, in path order, from the kernel's own
        copy of the files (so a ``context`` the model changed is replaced, as a full bind
        would). Returns the new ``context`` dict.

        Raises:
            ValueError: no codebase is bound, the difference is malformed, or the result
                would not hold ``files`` files (nothing changed then).
        """
        cb = self._codebase
        if cb is None:
            raise ValueError("update_codebase: no codebase is bound")
        if not isinstance(changed, dict) or not isinstance(removed, list):
            raise ValueError("update_codebase: changed must be a dict, removed a list")
        if len(cb.files) - len(removed) + sum(p not in cb.files for p in changed) != files:
            raise ValueError(
                f"update_codebase: the result would not hold {files!r} files "
                f"(the kernel holds {len(cb.files)}): not the codebase the update is for"
            )
        cb.update(changed, removed)
        files_now = cb.files
        value = {p: files_now[p] for p in cb.paths}
        self._reserve("context", value)
        return value

    def define_tools(self, callables: list[str], values: dict[str, Any]) -> None:
        callables = list(callables or [])
        values = dict(values or {})
        forbidden = set(protocol.RESERVED_NAMES) | set(protocol.CODEBASE_HELPERS)
        for name in [*callables, *values]:
            _check_name(name, "tool name")
            if name in forbidden:
                raise ValueError(f"tool name {name!r} is reserved by the REPL")
        dup = set(callables) & set(values)
        if dup or len(set(callables)) != len(callables):
            raise ValueError(f"tool names defined twice: {sorted(dup) or callables}")
        for name in callables:
            self._reserve(name, self._make_tool(name))
            self._tool_names.add(name)
        for name, value in values.items():
            self._reserve(name, value)
            self._tool_names.add(name)

    def set_var(self, name: str, value: Any) -> None:
        _check_name(name, "variable name")
        if name in self._reserved:
            if name == "history" or (
                name in self._tool_names and not callable(self._reserved[name])
            ):
                self._reserve(name, value)
                return
            raise ValueError(f"{name!r} is reserved by the REPL and cannot be set")
        self.ns[name] = value

    def get_var(self, name: str) -> Any:
        if not isinstance(name, str) or name not in self.ns:
            raise KeyError(name)
        value = self.ns[name]
        import json  # here: not imported at every kernel start

        try:
            return json.loads(json.dumps(value))
        except (TypeError, ValueError, RecursionError):
            try:
                return repr(value)
            except Exception as exc:
                return f"<{type(value).__name__} object (repr failed: {exc})>"

    def list_vars(self) -> list[dict]:
        return bounded_var_infos(self.user_items())

    def list_vars_page(self, req: dict) -> dict[str, Any]:
        """``list_vars_page``: the user variables whose names contain ``match`` (all when it
        is empty or absent), sorted by name (code point order; ``order: "defined"``: in the
        namespace's order); ``limit`` of them from ``offset`` get a VarInfo (previews
        bounded as in :func:`bounded_var_infos`).

        Returns:
            ``{"total": int, "variables": [VarInfo, ...]}``; ``total`` counts every
            variable that matches, not only this page's.

        Raises:
            ValueError: ``offset`` or ``limit`` is not an integer >= 0, or ``match`` is not
                a string.
        """
        offset, limit, match = req.get("offset", 0), req.get("limit"), req.get("match") or ""
        for key, value in (("offset", offset), ("limit", limit)):
            if type(value) is not int or value < 0:
                raise ValueError(f"{key} must be an integer >= 0, got {value!r}")
        if not isinstance(match, str):
            raise ValueError(f"match must be a string, got {type(match).__name__}")
        # is_user_name inlined (one pass over a namespace that may hold 100,000s of names);
        # a key that is not a string (``globals()[1] = 2``) names no variable.
        reserved, module = self._reserved, types.ModuleType
        items = [
            (name, value)
            for name, value in list(self.ns.items())
            if type(name) is str
            and match in name
            and not name.startswith("_")
            and name not in reserved
            and not isinstance(value, module)
        ]
        if limit == 0:  # how many, nothing else (no sort)
            return {"total": len(items), "variables": []}
        if req.get("order") != "defined":
            items.sort(key=itemgetter(0))  # names are unique: the order is total
        return {"total": len(items), "variables": bounded_var_infos(items[offset : offset + limit])}

    def save_vars(self, req: dict) -> dict[str, Any]:
        """``save_vars``: the user variables ``names`` (those still defined; every user
        variable when ``names`` is absent or null) written to a file in the working folder
        (see :func:`varfile.save`). With ``info_path``, what was saved and skipped goes to
        that file and the reply holds only counts (see ``protocol``)."""
        if req.get("names") is None:
            names = None
            items = self.user_items()
        else:
            names = [n for n in req["names"] if isinstance(n, str)]
            items = [
                (n, self.ns[n]) for n in names if n in self.ns and self.is_user_name(n, self.ns[n])
            ]
        limits = int(req.get("max_var_bytes") or 0), int(req.get("max_total_bytes") or 0)
        out = _as_value_error(varfile.save, items, self.workdir, req.get("path"), *limits, var_info)
        for n in names or ():
            if n not in out["saved"] and n not in out["skipped"]:
                out["skipped"][n] = "vanished during the checkpoint"
        if req.get("info_path") is None:
            return out
        info = {"saved": out["saved"], "skipped": out["skipped"]}
        size = _as_value_error(varfile.save_info, info, self.workdir, req["info_path"])
        return {
            "bytes": out["bytes"],
            "saved_count": len(out["saved"]),
            "skipped_count": len(out["skipped"]),
            "info_bytes": size,
        }

    def load_vars(self, req: dict) -> dict[str, Any]:
        """``load_vars``: bind ``names`` from a file in the working folder (removed after);
        with ``only_missing``, names the REPL defines already are left as they are."""
        names = [n for n in req.get("names") or [] if isinstance(n, str)]
        present = set(self.user_names()) if req.get("only_missing") else set()
        # a checkpoint holds user variables only: set_var would also set history (and a
        # value tool) for the host, and a _name, from a forged checkpoint
        refused = [n for n in names if n.startswith("_") or n in self._reserved]
        wanted = [n for n in names if n not in present and n not in refused]
        out = _as_value_error(varfile.load, self.workdir, req.get("path"), wanted, self.set_var)
        for n in refused:
            out["missing"][n] = "not a user variable (reserved by the REPL or starting with _)"
        return out

    def remove_file(self, req: dict) -> None:
        """``remove_file``: delete a file the kernel wrote in the working folder (a folder
        model code made there is a ``ValueError``, not a failed kernel)."""
        _as_value_error(varfile.remove, self.workdir, req.get("path"))

    def handle(self, req: dict) -> Any:
        """Run one request (any op but ``exec``, which needs the transport's sentinel)."""
        op = req.get("op")
        if op == "ping":
            return {"pid": os.getpid()}
        if op == "bind_context":
            value = req.get("value")
            if req.get("path"):
                value = read_value_file(str(req["path"]), str(req.get("format") or "json"))
            return self.bind_context(value, bool(req.get("codebase")))
        if op == "update_codebase":
            value = self.update_codebase(req.get("changed"), req.get("removed"), req.get("files"))
            return {"type": type(value).__name__, "size": size_of(value)}
        if op == "define_tools":
            self.define_tools(req.get("callables") or [], req.get("values") or {})
            return None
        if op == "set_var":
            self.set_var(req.get("name", ""), req.get("value"))
            return None
        if op == "get_var":
            return {"value": self.get_var(req.get("name", ""))}
        if op == "list_vars":
            return self.list_vars()
        if op == "list_vars_page":
            return self.list_vars_page(req)
        if op == "save_vars":
            return self.save_vars(req)
        if op == "load_vars":
            return self.load_vars(req)
        if op == "remove_file":
            return self.remove_file(req)
        raise ValueError(f"unknown op {op!r}")


__all__ = [
    "Capture",
    "CellInterrupted",
    "Kernel",
    "format_exception",
    "preview",
    "size_of",
    "json_copy",
    "var_info",
]

"""The wire protocol between a sandbox backend (the host) and the REPL kernel.

Standard library only: this module runs inside the sandbox.

Framing
=======
One bidirectional channel (two pipes for the subprocess backend). Every message is a *frame*:
a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON encoding one
object. Every object has an ``"op"`` key.

The kernel moves the channel off fds 0/1 at start-up (to high, close-on-exec descriptors),
points fd 1 at fd 2 and fd 0 at ``/dev/null``: whatever model code writes at the fd level
(``os.write(1, ...)``, child processes) lands on the process's stderr pipe, which the host
drains and attributes to the running cell. It never touches the channel.

Line framing
============
A kernel started with ``--framing lines`` (the cloud backends, whose provider APIs carry the
process's stdin/stdout as text) sends and reads one frame per line instead: the same JSON
object, ASCII-only (``ensure_ascii``), so it holds no raw newline, ended by ``\\n``. It then
also writes the stderr sentinel after every cell that has one, since a relay between the
pipes and the host may deliver stderr after the ``done`` frame.

Kernel -> host
==============
``{"op": "hello", "protocol": 1, "pid": int, "python": str, "token": str}``
    Sent once when the kernel is ready. ``token`` is random; see *stderr sentinel* below.
``{"op": "done", "id": int, "ok": true, "result": ...}``
``{"op": "done", "id": int, "ok": false, "etype": "ValueError", "error": "message"}``
    The answer to request ``id``. ``etype`` is the kernel-side exception class name; the host
    re-raises ``KeyError`` / ``ValueError`` / ``TypeError`` as such and anything else as
    ``SandboxError``.
``{"op": "ran", "id": int}``
    The code of exec request ``id`` has finished; its ``done`` frame follows once the
    variable previews are made (bounded on their own). The host's wall-clock limit stops
    here; a forged one only buys the code the host's short preview grace. Sent only when a
    preview may run model code (a variable of another type than the builtin scalars); a
    ``done`` frame also means the code has finished.
``{"op": "call", "call": int, "fn": str, "args": {...}}``
    Model code called a host function (``llm_query``, ``llm_query_batched``, ``rlm_query``,
    ``rlm_query_batched`` or ``tool``). The calling thread blocks until the matching reply.
    Calls can come from any kernel thread and overlap; the host serves them concurrently and
    keeps reading the channel while they run. Call ids are unique per kernel process.

Host -> kernel
==============
Requests: ``{"op": OP, "id": int, ...}``; the kernel handles them one at a time, in order, and
answers each with one ``done`` frame carrying the same ``id``.

``ping``                                           -> ``{"pid": int}``
``exec``      ``code: str``, ``max_output: int``   -> an exec result (below)
``bind_context`` ``value: any``, ``codebase: bool`` -> ``{"type": str, "size": int|None}``
    Or ``path: str``, ``format: "text"|"json"`` instead of ``value``: the value is read from
    that file (a backend sharing a folder with the kernel passes large contexts that way).
    ``codebase=True`` needs a ``{relpath: text}`` dict and binds ``list_files``, ``read_file``
    and ``grep``; ``codebase=False`` removes them.
``bind_context_file`` ``path: str``, ``format: "text"|"codebase"`` -> as ``bind_context``
    The context is in a file the host wrote to a folder it shares with the kernel, which
    memory-maps it, decodes it and deletes it: ``"text"`` is a UTF-8 string (lone
    surrogates passed through), ``"codebase"`` a ``{relpath: text}`` dict as one line of
    ASCII JSON ``{"paths": [...], "sizes": [...]}`` followed by each file's UTF-8 bytes
    (``sizes`` of them) back to back.
``update_codebase`` ``changed: {relpath: text}``, ``removed: [relpath]``, ``files: int``
    -> as ``bind_context``. The codebase bound now, with the ``changed`` files set (new or
    with new text) and the ``removed`` ones dropped, becomes ``context`` (a new dict, in path
    order, built from the kernel's own copy: a ``context`` the model changed is replaced);
    ``files`` is how many files the result must hold. ``etype: "ValueError"`` (nothing
    changed) when no codebase is bound, a removed path is not in it, or the count differs:
    the host then binds the whole codebase.
``define_tools`` ``callables: [str]``, ``values: {name: any}`` -> ``null``
    Adds to the tools defined earlier (a name defined again is replaced).
``set_var``   ``name: str``, ``value: any``        -> ``null``
``get_var``   ``name: str``                        -> ``{"value": any}``: JSON-able values as
    they are, anything else as its ``repr``. ``etype: "KeyError"`` if there is no such name.
``list_vars``                                      -> ``[VarInfo, ...]`` (user variables)
``list_vars_page`` ``offset: int``, ``limit: int``, ``match: str``, ``order: str``
    -> ``{"total": int, "variables": [VarInfo, ...]}``: the user variables whose names
    contain ``match`` (all for ``""``), sorted by name (code point order; ``order:
    "defined"``: in the namespace's order), ``limit`` of them from ``offset`` (previews are
    made for those only); ``total`` counts all that match. ``limit: 0`` only counts them.
``save_vars`` ``names: [str] | null``, ``path: str``, ``max_var_bytes: int``, ``max_total_bytes: int``,
``info_path: str | null``
    -> ``{"saved": {name: VarInfo + {"bytes": int}}, "skipped": {name: reason}, "bytes": int}``
    The saveable ones among the user variables ``names`` (every user variable when ``names``
    is absent or null) are written as one ASCII JSON object to the file ``path`` (a plain
    name) in the kernel's working folder (a workspace checkpoint; :mod:`varfile` says what
    is saveable). With ``info_path`` (a plain name), ``{"saved": ..., "skipped": ...}`` is
    written to that file as ASCII JSON instead, and the reply is ``{"bytes": int,
    "saved_count": int, "skipped_count": int, "info_bytes": int}`` (a bounded frame
    whatever the number of variables).
``load_vars`` ``path: str``, ``names: [str]``, ``only_missing: bool``
    -> ``{"restored": [str], "missing": {name: reason}}``: binds ``names`` from such a file
    (removed after); with ``only_missing``, not the names the REPL defines already.
``remove_file`` ``path: str``                     -> ``null`` (a plain name; none there: fine)

Replies to calls: ``{"op": "reply", "call": int, "ok": true, "value": any}`` or
``{"op": "reply", "call": int, "ok": false, "error": "message"}``; the kernel raises the
message as ``RuntimeError`` in the calling code.

End of the channel (EOF on the kernel's input) makes the kernel exit at once, even mid-cell.

Exec result
===========
``{"stdout": str, "stderr": str, "error": str|null, "final": str|null,
"variables": [VarInfo, ...], "restored": [str], "names": [str] | null, "duration_s": float,
"sentinel": bool}`` where ``VarInfo`` is ``{"name", "type", "size", "preview"}``,
``variables`` lists the user names the cell created or rebound, and ``names`` every user
variable that exists after the cell (the host remembers it to report lost variables when it
has to kill the kernel), or null when those are the names there were as the cell started
(the host keeps what it knew: 200,000 names are ~2.6 MB to decode after every cell).

Semantics: the cell is compiled as a module (``exec``), so the value of a trailing
expression is *not* printed. Variables persist in one globals dict; a cell that raises keeps
what it assigned before the error. ``SystemExit`` is reported as an error and the kernel
keeps running.

stderr sentinel
===============
After every cell the kernel flushes ``sys.__stdout__``/``sys.__stderr__`` and asks the
stderr pipe how many bytes are still unread (``FIONREAD``). None: the host has already read
everything the cell wrote at the fd level, so it sends ``done`` with ``"sentinel": false``
and the host takes what it has collected. Otherwise it writes
``b"\\x00rlmd:" + token + b":" + str(id) + b"\\x00"`` to fd 2 (one ``write``, so atomic on a
pipe) and sends ``"sentinel": true``: the host waits for that marker, and the bytes before it
belong to the cell. If fd 2 was closed or replaced by model code, ``"sentinel": false``.
"""

from __future__ import annotations

try:  # CPython's JSON accelerator; the kernel does not import json to start (milliseconds)
    import _json
except ImportError:  # another Python: the json module's own way
    _json = None  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:  # importing typing costs milliseconds at every kernel start
    from typing import Any

PROTOCOL_VERSION = 1

HEADER_SIZE = 4
MAX_FRAME = 2**32 - 1

VARS_PAGE = 1000
"""Variables per ``list_vars_page`` reply when the client names no ``limit``."""

MAX_VARS_PAGE = 2000
"""Most variables one ``list_vars_page`` (and one ``rlmd.workspace.variables`` reply) holds:
a page of 2,000 costs the daemon's event loop ~5 ms (decode, reply). Walking 200,000
variables page after page, health p99 was 11-16 ms with pages of 1,000-2,000 and 67 ms with
pages of 5,000 (``bench/vars_stall.py``, a loaded 2-core machine)."""

DEFAULT_MAX_OUTPUT = 32 * 1024 * 1024
"""Default cap, in characters, on the text captured per stream per cell."""

RESERVED_NAMES = (
    "context",
    "llm_query",
    "llm_query_batched",
    "rlm_query",
    "rlm_query_batched",
    "llm_map",
    "SHOW_VARS",
    "FINAL",
    "FINAL_VAR",
    "history",
)
"""Names the kernel restores after every cell if model code rebinds them (the host imports
this list as :data:`rlmd.sandbox.base.RESERVED_NAMES`; the kernel imports nothing from it)."""

CODEBASE_HELPERS = (
    "list_files",
    "read_file",
    "grep",
    "find_definition",
    "find_references",
    "find_subclasses",
    "outline",
    "search_symbols",
)
"""Extra reserved helpers present when ``context`` is a codebase (the host's
:data:`rlmd.sandbox.base.CODEBASE_HELPERS`)."""

CALL_FNS = (
    "llm_query",
    "llm_query_batched",
    "llm_map",
    "rlm_query",
    "rlm_query_batched",
    "tool",
    "code",
)
"""Host functions kernel stubs call (``code``: the code-intelligence helpers, answered from
the host's symbol index of the codebase)."""

SENTINEL_PREFIX = b"\x00rlmd:"


def sentinel(token: str, request_id: int) -> bytes:
    """The bytes the kernel writes to fd 2 after request ``request_id`` (an exec)."""
    return (
        SENTINEL_PREFIX + token.encode("ascii") + b":" + str(request_id).encode("ascii") + b"\x00"
    )


def _not_json(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _json_module() -> Any:
    import json

    return json


def _utf8_json(obj: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``."""
    return str(_json_module().JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode(obj))


def _ascii_json(obj: Any) -> str:
    """``json.dumps(obj, ensure_ascii=True, separators=(",", ":"))``."""
    return str(_json_module().JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode(obj))


def _decode_json(text: str) -> Any:
    """``json.loads(text)``: accepts any JSON text or explains why not."""
    return _json_module().loads(text)


def _c_encoder(escape_name: str, fallback: Any) -> Any:
    """``fallback`` for a dict, without ``JSONEncoder.encode``'s per-call Python layers: the C
    encoder it builds on every call, built here directly (a fresh one per call: its
    circular-reference markers must start empty) with ``_json.<escape_name>`` as the string
    escape, as ``json.encoder`` picks it. The same text; ~5 us less a frame. Anything but a
    dict goes to ``fallback``."""
    make = getattr(_json, "make_encoder", None)
    escape = getattr(_json, escape_name, None)
    if make is None or escape is None:
        return fallback

    def encode(obj: Any) -> str:
        if not isinstance(obj, dict):
            return str(fallback(obj))
        return "".join(make({}, _not_json, escape, None, ":", ",", False, False, True)(obj, 0))

    return encode


class _Decoding:
    """What ``json.JSONDecoder()`` hands the C scanner: its default settings (``parse_constant``
    as ``json.decoder`` maps the three non-finite names)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


_UTF8_FAST = _c_encoder("encode_basestring", _utf8_json)
_ASCII_FAST = _c_encoder("encode_basestring_ascii", _ascii_json)
_SCAN = getattr(_json, "make_scanner", None)
_SCAN_ONCE = _SCAN(_Decoding()) if _SCAN is not None else None


def encode(obj: Any) -> bytes:
    """One frame: header + UTF-8 JSON body.

    Raises:
        TypeError / ValueError: ``obj`` is not JSON-serialisable.
    """
    try:
        body = _UTF8_FAST(obj).encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (e.g. from errors="surrogateescape") cannot be UTF-8 encoded;
        # \\u escapes round-trip them.
        body = _ASCII_FAST(obj).encode("ascii")
    n = len(body)
    if n > MAX_FRAME:
        raise ValueError(f"message too large for one frame ({n} bytes)")
    return n.to_bytes(HEADER_SIZE, "big") + body


def encode_line(obj: Any) -> bytes:
    """One line-framed frame (see *Line framing*): ASCII JSON + ``\\n``.

    Raises:
        TypeError / ValueError: ``obj`` is not JSON-serialisable.
    """
    return _ASCII_FAST(obj).encode("ascii") + b"\n"


def decode(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse one frame body (without its header)."""
    # UTF-8 (as every frame is), lone surrogates passed through as json.loads does.
    text = str(body, "utf-8", "surrogatepass")
    if _SCAN_ONCE is not None and text[:1] == "{":  # the C scanner, without decode()'s layers
        try:
            obj, end = _SCAN_ONCE(text, 0)
        except StopIteration:
            end = -1
        if end == len(text):
            return obj
    obj = _decode_json(text)  # anything else: json.loads accepts or explains it
    if not isinstance(obj, dict):
        raise ValueError("a frame must hold a JSON object")
    return obj

"""Entry point of the subprocess kernel:
``python -I -S /path/to/rlmd/kernel/main.py [--site-packages DIR]... [--skip-pth PREFIX]...
[--prefix DIR] [--exec-prefix DIR] [--framing length|lines]`` (or ``python -I main.py``,
letting ``site`` run).

Runs as a plain script (``-I`` leaves the script's folder off ``sys.path``): the sibling
modules are loaded as a private package named ``_rlmd_kernel``, so they never shadow or
collide with what model code imports. Imported as ``rlmd.kernel.main`` it uses the regular
package. See ``protocol.py`` for the wire format.

``-S`` skips the ``site`` module, whose most expensive part at every start-up is the
``import`` line of the ``.pth`` file of an editable install of rlmd (its finder pulls in
``pathlib``, ``urllib``, ...), which the kernel does not need. The host then passes its
site-packages folders and does the rest of ``site``'s work here (:func:`_bootstrap`): the
folders go on ``sys.path`` with their ``.pth`` files processed as ``site`` does (listed
folders added, ``import`` lines run: other editable installs stay importable), except the
files whose names start with a ``--skip-pth`` prefix; ``--prefix`` / ``--exec-prefix``
restore ``sys.prefix`` / ``sys.exec_prefix`` as ``site`` sets them in a virtual environment;
``exit``, ``quit`` and ``help`` are defined as ``site`` defines them.

``--framing lines`` switches the channel to one JSON frame per line (the cloud backends, whose
provider APIs carry stdin/stdout as text; see ``protocol.py``); the default is ``length``.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import io
import itertools
import os
import sys
import threading
from typing import Any

PRIVATE_PACKAGE = "_rlmd_kernel"


def _load_siblings() -> tuple[Any, Any]:
    if __package__:
        from . import core, protocol

        return core, protocol
    if PRIVATE_PACKAGE not in sys.modules:
        here = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location(
            PRIVATE_PACKAGE,
            os.path.join(here, "__init__.py"),
            submodule_search_locations=[here],
        )
        assert spec is not None and spec.loader is not None
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[PRIVATE_PACKAGE] = pkg
        spec.loader.exec_module(pkg)
    core = importlib.import_module(PRIVATE_PACKAGE + ".core")
    protocol = importlib.import_module(PRIVATE_PACKAGE + ".protocol")
    return core, protocol


def _bootstrap(argv: list[str]) -> None:
    """Do what ``site`` would have done with the folders the host passed (see the module
    docstring); nothing when the kernel was started without them."""
    options: dict[str, list[str]] = {
        "--site-packages": [],
        "--skip-pth": [],
        "--prefix": [],
        "--exec-prefix": [],
    }
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        if flag in options:
            options[flag].append(value)
    for folder in options["--site-packages"]:
        _add_site_packages(folder, tuple(options["--skip-pth"]))
    if options["--prefix"]:
        sys.prefix = options["--prefix"][-1]
    if options["--exec-prefix"]:
        sys.exec_prefix = options["--exec-prefix"][-1]
    if sys.flags.no_site:
        import _sitebuiltins
        import builtins

        eof = "Ctrl-Z plus Return" if os.sep == "\\" else "Ctrl-D (i.e. EOF)"
        builtins.exit = _sitebuiltins.Quitter("exit", eof)  # type: ignore[attr-defined]
        builtins.quit = _sitebuiltins.Quitter("quit", eof)  # type: ignore[attr-defined]
        builtins.help = _sitebuiltins._Helper()  # type: ignore[attr-defined]


def _add_site_packages(folder: str, skip: tuple[str, ...]) -> None:
    """``site.addsitedir(folder)``: append ``folder`` to ``sys.path`` and process its
    ``.pth`` files in name order (existing folders they list are appended, ``import`` lines
    run), leaving out the files whose names start with a prefix in ``skip``."""
    if not os.path.isdir(folder) or folder in sys.path:
        return
    sys.path.append(folder)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
    except OSError:
        return
    for name in names:
        if name.startswith(skip):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            if line.startswith(("import ", "import\t")):
                _run_pth_line(folder, line)
                continue
            if not line.strip() or line.startswith("#"):
                continue
            path = os.path.abspath(os.path.join(folder, line.rstrip()))
            if path not in sys.path and os.path.exists(path):
                sys.path.append(path)


def _run_pth_line(sitedir: str, line: str) -> None:
    """Run one ``.pth`` import line as ``site.addpackage`` does (some read ``sitedir`` from
    this frame)."""
    try:
        exec(line)
    except Exception as exc:  # noqa: BLE001 - site reports and goes on, so do we
        print(f"Error processing a .pth line in {sitedir}: {exc!r}", file=sys.stderr)


def _move_fd(fd: int) -> int:
    """Duplicate ``fd`` to a high, close-on-exec descriptor, out of model code's way."""
    try:
        import fcntl

        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    except (ImportError, AttributeError, OSError):
        return os.dup(fd)  # non-inheritable by default


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Channel:
    """The framed channel to the host, shared by the request loop and every thread that makes
    a host call.

    There is no reader thread: whichever thread needs a frame (the idle request loop, or a
    caller waiting for its reply) reads, one at a time, and hands frames meant for others
    over (leader/follower). The common case, a cell calling ``llm_query`` on the main thread,
    therefore costs no thread switch. EOF (the host is gone) ends the process at once.
    """

    def __init__(self, rfd: int, wfd: int, protocol: Any, *, lines: bool = False):
        self._lines = lines
        self._in = io.open(rfd, "rb", buffering=1 << 16)  # noqa: UP020 - fd, not a path
        self._wfd = wfd
        self._protocol = protocol
        self._wlock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._reading = False
        self._replies: dict[int, dict[str, Any]] = {}
        self._requests: collections.deque[dict[str, Any]] = collections.deque()
        self._call_ids = itertools.count(1)

    def send(self, obj: dict[str, Any]) -> None:
        data = self._protocol.encode_line(obj) if self._lines else self._protocol.encode(obj)
        with self._wlock:
            _write_all(self._wfd, data)

    def _read_frame(self) -> dict[str, Any]:
        try:
            if self._lines:
                line = self._in.readline()
                if line.endswith(b"\n"):
                    return self._protocol.decode(line)
                os._exit(0)
            header = self._in.read(4)
            if len(header) == 4:
                n = int.from_bytes(header, "big")
                body = self._in.read(n)
                if len(body) == n:
                    return self._protocol.decode(body)
        except BaseException:  # noqa: BLE001 - any failure here means the channel is gone
            pass
        os._exit(0)

    def _pump(self, ready: Any) -> None:
        """Read frames until ``ready()`` holds (called with the condition held)."""
        cond = self._cond
        while not ready():
            if self._reading:
                cond.wait()
                continue
            self._reading = True
            cond.release()
            try:
                msg = self._read_frame()
            finally:
                cond.acquire()
                self._reading = False
            if msg.get("op") == "reply":
                self._replies[msg.get("call")] = msg
            else:
                self._requests.append(msg)
            cond.notify_all()

    def next_request(self) -> dict[str, Any]:
        with self._cond:
            self._pump(lambda: self._requests)
            return self._requests.popleft()

    def call(self, fn: str, args: dict[str, Any]) -> Any:
        call_id = next(self._call_ids)
        try:
            self.send({"op": "call", "call": call_id, "fn": fn, "args": args})
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{fn}: arguments must be JSON-serialisable ({exc})") from None
        with self._cond:
            self._pump(lambda: call_id in self._replies)
            msg = self._replies.pop(call_id)
        if msg.get("ok"):
            return msg.get("value")
        raise RuntimeError(msg.get("error") or f"{fn} failed on the host")


def _pending_bytes(fd: int) -> int:
    """Bytes still unread in the pipe ``fd`` writes to (-1 if unknown)."""
    try:
        import fcntl
        import termios

        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except (ImportError, AttributeError, OSError):
        return -1


_held: list[Any] = []


def _watch_parent() -> None:
    """Exit when the host process dies (SIGKILL, crash): otherwise a kernel in the middle of
    a long cell would run on, orphaned, until the cell ends. Polls once a second."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(70)

    threading.Thread(target=watch, name="rlmd-parent-watch", daemon=True).start()


def main() -> None:
    _held.append(sys.modules.get("__main__"))  # this script's module, replaced below
    _bootstrap(sys.argv[1:])
    _watch_parent()
    core, protocol = _load_siblings()

    # The channel moves off fds 0/1; fd 1 becomes fd 2 and fd 0 /dev/null, so nothing model
    # code writes at the fd level (os.write(1, ...), child processes) can reach the channel.
    chan_in = _move_fd(0)
    chan_out = _move_fd(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)

    argv = sys.argv[1:]
    lines = any(a == "--framing" and b == "lines" for a, b in zip(argv, argv[1:], strict=False))
    channel = Channel(chan_in, chan_out, protocol, lines=lines)
    kernel = core.Kernel(channel.call, capture="global")
    sys.modules["__main__"] = kernel.module  # pickle & co. find cell-defined objects
    sys.argv = [""]
    token = os.urandom(8).hex()
    fd2 = _fd_identity(2)

    channel.send(
        {
            "op": "hello",
            "protocol": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "token": token,
        }
    )

    def end_of_cell(request_id: int) -> bool:
        """Make sure the host can tell which stderr bytes belong to this cell: if the pipe
        is empty, the host has read all of them already (no marker needed); otherwise write
        the sentinel after them."""
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - model code may have closed them
                pass
        if _fd_identity(2) != fd2:
            return False
        # Over a relay (line framing) an empty pipe does not mean the host has the bytes yet.
        if not lines and _pending_bytes(2) == 0:
            return False
        mark = protocol.sentinel(token, request_id)
        try:
            return os.write(2, mark) == len(mark)
        except OSError:
            return False

    while True:
        req = channel.next_request()
        rid = req.get("id")
        try:
            if req.get("op") == "exec":
                max_output = int(req.get("max_output") or protocol.DEFAULT_MAX_OUTPUT)
                result = kernel.exec_cell(req.get("code"), max_output=max_output)
                result["sentinel"] = end_of_cell(rid)
            else:
                result = kernel.handle(req)
            resp = {"op": "done", "id": rid, "ok": True, "result": result}
        except BaseException as exc:  # noqa: BLE001 - report everything, keep serving
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            resp = {
                "op": "done",
                "id": rid,
                "ok": False,
                "etype": type(exc).__name__,
                "error": str(message),
            }
        try:
            channel.send(resp)
        except (TypeError, ValueError) as exc:
            channel.send(
                {
                    "op": "done",
                    "id": rid,
                    "ok": False,
                    "etype": "TypeError",
                    "error": f"the result is not JSON-serialisable: {exc}",
                }
            )


if __name__ == "__main__":
    main()

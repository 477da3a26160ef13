"""The subprocess kernel's process: its start-up, its channel and its request loop.

Started by ``main.py`` (``python -I -S /path/to/rlmd/kernel/main.py [--site-packages DIR]...
[--skip-pth PREFIX]... [--prefix DIR] [--exec-prefix DIR] [--framing length|lines]``, or
``python -I main.py``, letting ``site`` run), which loads this folder as the private package
``_rlmd_kernel`` and calls :func:`main`. See ``protocol.py`` for the wire format.

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
import functools
import io
import itertools
import os
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # importing typing costs milliseconds at every kernel start
    from collections.abc import Callable
    from typing import Any


def _options(argv: list[str]) -> dict[str, list[str]]:
    """The isolation flags the host passed: ``--rlimit NAME=VALUE``, ``--cgroup-fd N`` (both
    repeatable), ``--cgroup-name NAME`` and ``--reap 1``. Every flag takes one value
    (``_bootstrap`` reads pairs too)."""
    out: dict[str, list[str]] = {
        "--rlimit": [],
        "--cgroup-fd": [],
        "--cgroup-name": [],
        "--reap": [],
    }
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        if flag in out:
            out[flag].append(value)
    return out


def _in_groups(name: str, count: int) -> bool:
    """Whether this process is in ``count`` cgroups (of any hierarchies) named ``name``:
    the host moved it there (``Launch.join_early``) before the interpreter started. The
    paths ``/proc/self/cgroup`` shows are relative to the cgroup namespace's root (made
    before the move), so only the last component is compared; ``name`` is the host's random
    group name."""
    if not name or count <= 0:
        return False
    try:
        fd = os.open("/proc/self/cgroup", os.O_RDONLY | os.O_CLOEXEC)
        try:
            text = os.read(fd, 65536)
        finally:
            os.close(fd)
    except OSError:
        return False
    suffix = b"/" + name.encode("ascii", "replace")
    return sum(line.endswith(suffix) for line in text.splitlines()) >= count


def _join_cgroups(fds: list[str], name: str = "") -> Callable[[], None]:
    """Move this process into the cgroups whose ``cgroup.procs`` the host opened for it,
    then close the descriptors (model code never gets a writable cgroup file), from a
    thread; returns the function that waits for it and exits (71) if it failed. The first
    move waits for an RCU grace period of the host's kernel (6-20 ms on the dev machine,
    idle time), which the kernel's imports overlap; the caller waits before its hello, so
    no request is read, and no model code runs, outside the groups. Where the host already
    moved this process into all of them (``name``: their name), the descriptors are only
    closed: no second move, no second grace period."""
    if not fds:
        return lambda: None
    if _in_groups(name, len(fds)):
        for text in fds:
            try:
                os.close(int(text))
            except (OSError, ValueError):
                pass
        return lambda: None
    failed: list[str] = []

    def join() -> None:
        for text in fds:
            fd = int(text)
            try:
                os.write(fd, b"0")  # "0": this process, whichever thread writes it
            except OSError as exc:
                failed.append(str(exc))
            finally:
                os.close(fd)

    thread = threading.Thread(target=join, name="rlmd-cgroup", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            # The host records this limit as enforced: better no kernel than a false record.
            print(f"rlmd kernel: could not join its cgroup: {failed[0]}", file=sys.stderr)
            os._exit(71)

    return wait


def _set_rlimits(specs: list[str]) -> None:
    """``setrlimit`` soft and hard to each ``NAME=VALUE`` (hard limits can only go down, so
    model code cannot raise them again)."""
    if not specs:
        return
    import resource

    for spec in specs:
        name, _, value = spec.partition("=")
        which = getattr(resource, "RLIMIT_" + name, None)
        if which is None:
            continue
        limit = int(value)
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        try:
            resource.setrlimit(which, (limit, limit))
        except (OSError, ValueError) as exc:
            print(f"rlmd kernel: could not set RLIMIT_{name}: {exc}", file=sys.stderr)


def _reap_others() -> None:
    """As PID 1 of a PID namespace: kill every other process in it (what the cell left
    running) and collect the exits. Every process there descends from PID 1, so no child
    at all (one ``waitpid``, the common case) means nothing to do: ``kill(-1)`` walks every
    process of the host and is not free. Repeats while processes remain (one forking at the
    moment of a ``kill(-1)`` can leave a new child); gives up after about two seconds (the
    host's limits take over)."""
    deadline = None
    while True:
        while True:  # collect the dead first: a zombie still counts for kill(-1)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return  # no children left: nothing else runs in the namespace
            if pid == 0:
                break
        import signal
        import time

        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            return
        now = time.monotonic()
        deadline = deadline or now + 2.0
        if now > deadline:
            return
        time.sleep(0.001)


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
        builtins.exit = _sitebuiltins.Quitter("exit", eof)
        builtins.quit = _sitebuiltins.Quitter("quit", eof)
        builtins.help = _sitebuiltins._Helper()


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
        self._owner = os.getpid()
        self.main_reading = False  # the main thread is inside a frame read or write
        self.interrupt_pending = False

    def forked(self) -> None:
        """In a child forked by model code: drop the channel, so the child can neither
        answer requests nor steal them. The child exits where it would use it."""
        for fd in (self._in.fileno(), self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass

    def _check_owner(self) -> None:
        if os.getpid() != self._owner:
            os._exit(0)

    def send(self, obj: dict[str, Any]) -> None:
        self._check_owner()
        data = self._protocol.encode_line(obj) if self._lines else self._protocol.encode(obj)
        main = threading.current_thread() is threading.main_thread()
        with self._wlock:
            # A frame half written would desynchronise the channel: hold SIGINT meanwhile.
            if main:
                self.main_reading = True
            try:
                _write_all(self._wfd, data)
            finally:
                if main:
                    self.main_reading = False

    def _read_frame(self) -> dict[str, Any]:
        self._check_owner()
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
            main = threading.current_thread() is threading.main_thread()
            cond.release()
            try:
                # A SIGINT that arrives now must not break a frame in half: the handler
                # only flags it (see _install_sigint) and it is raised once the frame is in.
                self.main_reading = main
                msg = self._read_frame()
            finally:
                self.main_reading = False
                cond.acquire()
                self._reading = False
            if msg.get("op") == "reply":
                self._replies[msg.get("call", -1)] = msg
            else:
                self._requests.append(msg)
            cond.notify_all()
            if main and self.interrupt_pending and msg.get("op") == "reply":
                self.interrupt_pending = False
                raise KeyboardInterrupt

    def next_request(self) -> dict[str, Any]:
        with self._cond:
            self._pump(lambda: self._requests)
            return self._requests.popleft()

    def call(self, fn: str, args: dict[str, Any]) -> Any:
        if os.getpid() != self._owner:
            raise RuntimeError(f"{fn} is not available in a process forked by model code")
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


def _watch_channel(fd: int) -> threading.Thread:
    """Exit when the host goes away (its end of the channel closes: SIGKILL, crash) or the
    channel descriptor is closed under us: otherwise a kernel in the middle of a long cell
    would run on, orphaned, until the cell ends. A thread blocks in ``poll`` (no events
    asked: only hang-up and invalid-descriptor are reported), so it costs nothing while the
    host lives. Works in a PID namespace, where ``getppid()`` says nothing about the host."""
    import select

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            if any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in events):
                os._exit(70)

    thread = threading.Thread(target=watch, name="rlmd-channel-watch", daemon=True)
    thread.start()
    return thread


def _install_sigint(kernel: Any, channel: Channel) -> None:
    """SIGINT (the host's interrupt) raises ``KeyboardInterrupt`` in a running cell only:
    between cells it is ignored, and while the main thread reads a frame it is held until
    the frame is complete (see :meth:`Channel._pump`)."""
    import _signal  # the signal module builds its enums at import: a millisecond per start

    def on_sigint(signum: int, frame: Any) -> None:
        if not kernel.running:
            return
        if channel.main_reading:
            channel.interrupt_pending = True
            return
        raise KeyboardInterrupt

    _signal.signal(_signal.SIGINT, on_sigint)


def _bind_context_file(kernel: Any, req: dict[str, Any]) -> Any:
    """Bind ``context`` to what the host wrote to a file, then delete the file: ``format``
    ``"text"`` (UTF-8, lone surrogates passed through) or ``"codebase"`` (a header line with
    the paths and each file's size in bytes, then the files back to back; see
    ``rlmd.sandbox.files.codebase_chunks``; or, with ``index_at``, the files' bytes first
    and the index from that offset: see ``rlmd.context.Spool``). A 100 MB string costs a
    file read, not a JSON round trip."""
    import mmap

    path = str(req.get("path"))
    codebase = req.get("format") == "codebase"
    index_at = req.get("index_at")
    value: Any = {} if codebase else ""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size:  # decode straight from the page cache: one copy, not two
                with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as view:
                    if codebase:
                        value = _codebase_files(view, index_at)
                    else:
                        value = str(view, "utf-8", "surrogatepass")
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return kernel.bind_context(value, codebase)


def _codebase_files(view: Any, index_at: Any = None) -> dict[str, str]:
    """The ``{relpath: text}`` of a ``codebase`` file (its bytes in ``view``): its header
    line first (each file's size, the files follow in order), or, with ``index_at``, its
    index from that offset (each file's offset and size in the bytes before it)."""
    import json

    if index_at is None:
        start = view.find(b"\n") + 1
        meta = json.loads(view[:start]) if start else {}
        end = len(view)
    elif isinstance(index_at, int) and 0 <= index_at <= len(view):
        meta, start, end = json.loads(view[index_at:]), 0, index_at
    else:
        raise ValueError("the codebase file's index offset is not within it")
    paths, sizes = meta.get("paths"), meta.get("sizes")
    if (
        not isinstance(paths, list)
        or not isinstance(sizes, list)
        or len(paths) != len(sizes)
        or not all(isinstance(n, int) for n in sizes)
    ):
        raise ValueError("the codebase file has no valid header")
    offsets = meta.get("offsets")
    if offsets is None:  # back to back from the header's end
        offsets = list(itertools.accumulate([start, *sizes]))[:-1]
        if start + sum(sizes) != end:
            raise ValueError("the codebase file's sizes do not add up to its length")
    if not isinstance(offsets, list) or len(offsets) != len(paths):
        raise ValueError("the codebase file has no valid header")
    files = {}
    with memoryview(view) as whole:
        for name, at, n in zip(paths, offsets, sizes, strict=True):
            if not (isinstance(at, int) and start <= at and 0 <= n <= end - at):
                raise ValueError(f"the codebase file's entry for {name!r} is not within it")
            with whole[at : at + n] as one:
                files[name] = str(one, "utf-8", "surrogatepass")
    return files


def main() -> None:
    _held.append(sys.modules.get("__main__"))  # main.py's module, replaced below
    options = _options(sys.argv[1:])
    joined = _join_cgroups(options["--cgroup-fd"], "".join(options["--cgroup-name"][-1:]))
    _bootstrap(sys.argv[1:])
    from . import core, protocol

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
    _set_rlimits(options["--rlimit"])  # after the channel moved up: NOFILE may be low
    reap = bool(options["--reap"])
    watcher = _watch_channel(chan_in)
    channel = Channel(chan_in, chan_out, protocol, lines=lines)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=channel.forked)
    kernel = core.Kernel(channel.call, capture="global")
    core.lasting_thread(watcher.native_id)  # it ends only with the process (os._exit)
    _install_sigint(kernel, channel)
    sys.modules["__main__"] = kernel.module  # pickle & co. find cell-defined objects
    sys.argv = [""]
    token = os.urandom(8).hex()
    fd2 = _fd_identity(2)
    joined()

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
                if stream is not None:
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
                code: Any = req.get("code")  # exec_cell explains what is not a string
                result = kernel.exec_cell(
                    code,
                    max_output=max_output,
                    on_ran=functools.partial(channel.send, {"op": "ran", "id": rid}),
                )
                channel.interrupt_pending = False
                if reap:
                    _reap_others()
                result["sentinel"] = end_of_cell(rid or 0)
            elif req.get("op") == "bind_context_file":
                result = _bind_context_file(kernel, req)
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

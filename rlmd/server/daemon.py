"""The daemon process: one per user (per rlmd home), on a Unix socket, or one stdio client.

Files, all under ``<rlmd home>/run/`` (mode 0700):

``rlmd.sock``
    the socket (mode 0600: only this user may connect). When that path would be longer than
    a Unix socket path may be, the socket goes to ``$XDG_RUNTIME_DIR/rlmd-<hash>.sock``
    (or ``/tmp/rlmd-<uid>/<hash>.sock``, a 0700 folder) and ``rlmd.sock.path`` names it.
``daemon.lock``
    an exclusive ``flock`` held while the daemon lives: a second ``rlmd serve`` exits with
    code 3 and says which pid runs; a stale socket from a killed daemon is replaced.
``daemon.token``
    the per-user secret every socket client sends first (mode 0600, new at each start;
    see :mod:`rlmd.server.auth`).
``daemon.pid``
    the daemon's pid. ``daemon.log``: the log of a daemon started by ``rlmd attach``.

Why one asyncio ``start_unix_server`` with one :class:`~rlmd.server.connection.Connection`
(and one pygls ``LanguageServer``) per client, rather than pygls' ``start_tcp``: pygls'
built-in servers keep a single protocol object and swap its writer on each new connection,
so a second client steals the first one's replies (``tests/test_server_commands.py`` runs two clients at once).
Here every connection has its own protocol state (request ids, progress tokens, LSP life
cycle) and all share one pygls-free :class:`~rlmd.server.core.DaemonCore` (store,
workspaces, tasks, event hub).

Start-up marks runs left ``running`` by a dead process as ``interrupted``
(:meth:`rlmd.store.Store.mark_interrupted`). SIGTERM / SIGINT / SIGHUP: running tasks are cancelled
(recorded as cancelled), every workspace is checkpointed and stopped, the socket removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path

from rlmd.paths import pid_path, run_dir, running_pid, socket_path
from rlmd.sandbox.docker.reaper import reap_in_background
from rlmd.server import auth
from rlmd.server.connection import MAX_HEADER_LINE, Connection
from rlmd.server.core import DaemonCore, DaemonOptions
from rlmd.server.protocol import RlmdServer  # noqa: F401 - import pygls/lsprotocol up front

LOOP_SWITCH_INTERVAL_S = 0.001
"""The daemon's ``sys.setswitchinterval``: how long a worker thread holding the GIL makes
the event loop wait at most (Python's default is 5 ms)."""

log = logging.getLogger("rlmd.server")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals that stop the daemon cleanly (tasks cancelled and recorded so, kernels stopped,
the socket removed). SIGHUP: the terminal of a foreground ``rlmd serve`` closed (review18:
it died without its clean-up, its runs left for the next daemon to mark interrupted)."""

EXIT_ALREADY_RUNNING = 3


class AlreadyRunning(Exception):
    """Another daemon holds the lock of this rlmd home (``pid`` says which, if known)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(f"an rlmd daemon is already running (pid {pid or 'unknown'})")
        self.pid = pid


class DaemonLock:
    """The exclusive lock of one rlmd home (``run/daemon.lock``).

    Raises:
        AlreadyRunning: from :meth:`acquire` when another process holds it.
    """

    def __init__(self) -> None:
        self.path = run_dir() / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(running_pid()) from None
        self._fd = fd
        tmp = pid_path().with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, pid_path())

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            pid_path().unlink()
        os.close(self._fd)
        self._fd = None


def setup_logging(level: str = "INFO", file: str | None = None) -> None:
    """Log to ``file`` (appending) or stderr; never to stdout (stdio mode speaks there)."""
    handler: logging.Handler
    if file:
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # pygls logs every error reply with a traceback; the daemon logs what matters itself.
    logging.getLogger("pygls").setLevel(
        logging.DEBUG if level.upper() == "DEBUG" else logging.CRITICAL
    )


async def serve_socket(options: DaemonOptions, *, ready: asyncio.Event | None = None) -> None:
    """Run the daemon on its Unix socket until SIGTERM/SIGINT.

    Raises:
        AlreadyRunning: another daemon runs for this rlmd home.
        OSError: the socket cannot be created.
    """
    lock = DaemonLock()
    lock.acquire()
    path = socket_path()
    try:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # stale: we hold the lock, so nobody listens there
        core = DaemonCore(options, mode="socket")
        core.socket_path = str(path)
        core.token = auth.new_token()  # before listening: a client that connects can read it
        reap_in_background()  # containers a crashed daemon left behind
        if path.parent != run_dir():
            (run_dir() / "rlmd.sock.path").write_text(str(path))
        connections: set[Connection] = set()

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if core.stopping:
                writer.close()
                return
            conn = Connection(core, reader, writer.transport, kind="socket")
            connections.add(conn)
            try:
                await conn.serve()
            finally:
                connections.discard(conn)

        old = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(
                on_client, path=str(path), limit=MAX_HEADER_LINE
            )
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        core.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "rlmd daemon %s listening on %s (store %s; %d run(s) marked interrupted)",
            os.getpid(),
            path,
            core.store.path,
            len(core.interrupted_at_start),
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping")
        server.close()
        await core.shutdown()
        for conn in list(connections):
            conn.drop("the daemon is stopping")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(FileNotFoundError):
            (run_dir() / "rlmd.sock.path").unlink()
        lock.release()


async def serve_stdio(options: DaemonOptions) -> None:
    """Serve one client on stdin/stdout until it disconnects or sends ``exit``.

    The protocol keeps a private duplicate of fd 1; fd 1 itself is pointed at stderr so
    nothing else (an in-process sandbox's fd-level output, a stray print) can corrupt it.
    """
    loop = asyncio.get_running_loop()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    reader = asyncio.StreamReader(limit=MAX_HEADER_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    out = os.fdopen(out_fd, "wb", buffering=0)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, out)
    core = DaemonCore(options, mode="stdio")
    core.start()
    conn = Connection(core, reader, transport, kind="stdio")
    serve = asyncio.ensure_future(conn.serve())
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serve, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    await core.shutdown()
    conn.drop("the daemon is stopping")
    serve.cancel()
    with contextlib.suppress(BaseException):
        await serve


def main(
    *,
    stdio: bool,
    idle_timeout_s: float | None,
    max_message_bytes: int | None = None,
    max_client_buffer_bytes: int | None = None,
    client_stall_s: float | None = None,
    log_file: str | None = None,
    log_level: str = "INFO",
    otlp_endpoint: str | None = None,
    otlp_content: bool = False,
    cluster: str | None = None,
) -> int:
    """``rlmd serve``: returns the process exit code (0, or 3 when a daemon already runs;
    2 when ``cluster`` is given, not ``None``, and the Ray cluster cannot be joined)."""
    setup_logging(log_level, log_file)
    options = DaemonOptions(
        idle_timeout_s=idle_timeout_s, otlp_endpoint=otlp_endpoint, otlp_content=otlp_content
    )
    if cluster is not None:
        from rlmd.cluster import executor_for
        from rlmd.cluster.ray_executor import connect

        try:
            options.executor = executor_for(cluster)
            connect(options.executor.address, options.executor.env)  # fail now, not per task
        except (ValueError, ConnectionError, RuntimeError) as exc:
            print(f"rlmd serve: cannot use the cluster: {exc}", file=sys.stderr)
            return 2
    if max_message_bytes:
        options.max_message_bytes = max_message_bytes
    if max_client_buffer_bytes:
        options.max_client_buffer_bytes = max_client_buffer_bytes
    if client_stall_s:
        options.client_stall_s = client_stall_s
    # Loading a workspace (walk, decode, token count) runs in worker threads that hold the
    # GIL; each time the event loop's thread comes back from a system call it waits for
    # them to let go, by default up to 5 ms, several times per reply. At 1 ms a client's
    # command is answered in a few ms while a 30,000-file workspace loads (issue 16).
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
    try:
        asyncio.run(serve_stdio(options) if stdio else serve_socket(options))
    except AlreadyRunning as exc:
        print(f"rlmd serve: {exc}; socket {socket_path()}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except PermissionError as exc:  # e.g. a socket folder another user owns
        print(f"rlmd serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0

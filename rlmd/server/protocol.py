"""The pygls side of a connection: one ``LanguageServer`` per client.

:class:`RlmdServer` is a pygls ``LanguageServer`` with rlmd's commands registered (so
``initialize`` advertises them in ``executeCommandProvider``). Two LSP methods behave
differently from pygls' defaults because one daemon serves many clients:

* ``exit`` closes *this* connection only (pygls would end the process); in ``serve --stdio``
  mode the daemon stops when its only connection ends.
* ``workspace/executeCommand`` hands the command name, its single argument object and the
  request's ``workDoneToken`` to :func:`rlmd.server.commands.execute`, and turns a
  :class:`~rlmd.server.errors.CommandError` into a JSON-RPC error with the same code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol import default_converter as _default_converter
from pygls.protocol.language_server import lsp_method

import rlmd
from rlmd.server import commands
from rlmd.server.errors import CommandError
from rlmd.server.hub import DETAILS, frame
from rlmd.server.progress import ProgressTracker

log = logging.getLogger("rlmd.server")


class RlmdProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with a per-connection ``exit`` and rlmd's command dispatch."""

    _server: RlmdServer

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> None:  # type: ignore[override]  # pygls takes plain handlers too
        """End this client's connection (never the daemon's process)."""
        self._server.connection.drop("exit")

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        """pygls' own, over a copy of the requests in flight: cancelling one runs its done
        callback at once, which removes it from the dict pygls was iterating, so a
        ``shutdown`` sent while a command ran was answered ``-32603`` "dictionary changed
        size during iteration" and the other requests in flight were never answered."""
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current_id = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current_id and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams):
        result = yield self._server.run_command, (params,), None
        return result

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        """A command's result (:class:`Reply`) goes out in one ``json.dumps``, as the
        notifications do (:func:`~rlmd.server.hub.frame`). pygls' own path walked it with
        cattrs (``unstructure``) before its ``json.dumps``, and the command's result had been
        through ``json.dumps`` + ``json.loads`` to be plain: for a reply of 5,000 variables
        31 of the 37 ms it held the event loop, 1.2 s of 1.4 s for 200,000. Anything else
        (errors, LSP replies) takes pygls' path."""
        if error is None and type(result) is Reply:
            self._result_types.pop(msg_id, None)
            if self.writer is not None:
                self.writer.write(frame({"jsonrpc": "2.0", "id": msg_id, "result": result}))
            return
        super()._send_response(msg_id, result, error)


class Reply(dict):
    """A command's JSON result, sent as it is by :meth:`RlmdProtocol._send_response`
    (non-JSON values as ``str``, lone surrogates as their escapes)."""


_CONVERTER = _default_converter()
"""One cattrs converter for every connection (building one costs milliseconds; it holds
no per-connection state)."""


def _placeholder(*_args: Any) -> None:  # pragma: no cover - dispatch goes through run_command
    raise JsonRpcInternalError("not dispatched here")


class RlmdServer(LanguageServer):
    """The pygls server object of one connection (see the module docstring)."""

    def __init__(self, connection: Any) -> None:
        super().__init__(
            name="rlmd",
            version=rlmd.__version__,
            protocol_cls=RlmdProtocol,
            converter_factory=lambda: _CONVERTER,
            text_document_sync_kind=types.TextDocumentSyncKind.None_,
        )
        self.connection = connection
        for name in commands.COMMANDS:
            self.command(name)(_placeholder)

        # pygls sets attributes on handlers, which bound methods refuse: use closures.
        def on_initialize(params: types.InitializeParams) -> None:
            self._on_initialize(params)

        def on_progress_cancel(params: types.WorkDoneProgressCancelParams) -> None:
            self._on_progress_cancel(params)

        self.feature(types.INITIALIZE)(on_initialize)
        self.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)(on_progress_cancel)
        # not "progress": that name is pygls' own method for sending $/progress
        self.run_progress = ProgressTracker(self, connection)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Log only (pygls would show a message box in the client)."""
        log.debug("server error (%s): %r", getattr(source, "__name__", source), error)

    def _on_initialize(self, params: types.InitializeParams) -> None:
        conn = self.connection
        window = getattr(params.capabilities, "window", None)
        conn.progress_capable = bool(window and window.work_done_progress)
        opts = params.initialization_options
        if isinstance(opts, dict):
            if opts.get("events") in DETAILS:
                conn.detail = opts["events"]
            if opts.get("progress") in commands.PROGRESS_MODES:
                conn.progress_mode = opts["progress"]

    def _on_progress_cancel(self, params: types.WorkDoneProgressCancelParams) -> None:
        run_id = self.run_progress.run_for(params.token)
        if run_id is not None:
            try:
                self.connection.core.tasks.cancel(run_id)
            except CommandError:
                pass

    async def run_command(self, params: types.ExecuteCommandParams) -> Any:
        """Run one ``workspace/executeCommand``; returns the command's JSON result.

        Raises:
            JsonRpcException: with the :class:`CommandError`'s code, or internal error.
        """
        args = params.arguments or []
        if len(args) > 1:
            raise JsonRpcInvalidParams(
                f"{params.command} takes one argument, a JSON object; got {len(args)}"
            )
        ctx = commands.CallContext(self.connection, params.work_done_token)
        conn = self.connection
        conn.inflight += 1
        try:
            result = await commands.execute(
                conn.core, params.command, args[0] if args else None, ctx
            )
        except CommandError as exc:
            raise JsonRpcException(message=exc.message, code=exc.code, data=exc.data) from None
        except (asyncio.CancelledError, JsonRpcException):
            raise
        except Exception as exc:
            log.exception("command %s failed", params.command)
            raise JsonRpcInternalError(
                f"internal error in {params.command}: {type(exc).__name__}: {exc}"
            ) from None
        finally:
            conn.inflight -= 1
        # encoded once, when sent (frame(): non-JSON values as str, lone surrogates escaped)
        return Reply(result)

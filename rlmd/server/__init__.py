"""The rlmd daemon: JSON-RPC (LSP-style, via pygls) over a Unix socket or stdio.

Modules, one job each:

* :mod:`~rlmd.server.daemon`: the process: socket, lock, signals, ``rlmd serve``.
* :mod:`~rlmd.server.connection`: one client: framing with limits, bounded output.
* :mod:`~rlmd.server.protocol`: the pygls ``LanguageServer`` of one connection.
* :mod:`~rlmd.server.commands`: the ``workspace/executeCommand`` commands.
* :mod:`~rlmd.server.params` / :mod:`~rlmd.server.errors`: parameter checks, error codes.
* :mod:`~rlmd.server.core`: store, workspaces, tasks, hub (no protocol).
* :mod:`~rlmd.server.tasks`: queued/running tasks over the engine.
* :mod:`~rlmd.server.hub`: notification fan-out; :mod:`~rlmd.server.progress`: ``$/progress``.
* :mod:`~rlmd.server.client`: a small client.
* :mod:`~rlmd.server.doctor`: the setup checks behind ``rlmd doctor``.

Reading the config is :mod:`rlmd.config`'s job; the command-line side (``rlmd serve`` /
``attach`` / ``doctor`` arguments, the stdio bridge, printing) is in :mod:`rlmd.cli`.

The engine never imports this package; ``docs/protocol.md`` is the wire reference.
"""

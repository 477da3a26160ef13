"""Front doors: other protocols over the same daemon (no second engine).

:mod:`.link` is the one connection to the user's daemon (attaching to it, or starting it, as
``rlmd attach`` does) and how a task is followed; :mod:`.mcp_server` is ``rlmd mcp`` (the
Model Context Protocol, for Claude Code, Cursor, VS Code agent mode...); :mod:`.acp_agent`
is ``rlmd acp`` (the Agent Client Protocol, for Zed and other editors), both checking their
stdin lines with :mod:`.jsonrpc_lines`; :mod:`.otel` turns a stored trajectory into
OpenTelemetry spans (``rlmd export --format otlp`` and the daemon's live exporter). Each needs its extra (``mcp``, ``acp``, ``otel``).
"""

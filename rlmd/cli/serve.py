"""The ``serve``, ``attach`` and ``doctor`` subcommands of ``rlmd`` (arguments and dispatch)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys


def add_server_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``attach`` and ``doctor`` to the ``rlmd`` subparsers."""
    sv = sub.add_parser("serve", help="run the daemon (Unix socket, or one client on stdio)")
    sv.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout")
    sv.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        help="seconds before an unused workspace is checkpointed and stopped (default 600; "
        "0 = never)",
    )
    sv.add_argument("--max-message-bytes", type=int, help="largest request body (default 16 MiB)")
    sv.add_argument(
        "--max-client-buffer",
        type=int,
        help="watch a client with more unread output (default 32 MiB)",
    )
    sv.add_argument(
        "--client-stall",
        type=float,
        help="drop a watched client that takes nothing for this many seconds (default 30)",
    )
    sv.add_argument(
        "--cluster",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run tasks' child runs on a Ray cluster (the user config's [cluster], or "
        "ADDRESS); needs the ray extra (docs/cluster.md)",
    )
    sv.add_argument("--log-file", help="log here instead of stderr")
    sv.add_argument(  # a misspelt level was taken as INFO without a word
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    )
    sv.add_argument(
        "--otlp-endpoint",
        default=os.environ.get("RLMD_OTLP_ENDPOINT") or None,
        help="send each task's trajectory as OpenTelemetry spans to this OTLP/HTTP traces URL "
        "(e.g. http://localhost:4318/v1/traces; default $RLMD_OTLP_ENDPOINT; needs rlmd[otel])",
    )
    sv.add_argument(
        "--otlp-content",
        action="store_true",
        default=None,  # then $RLMD_OTLP_CONTENT, read when the daemon starts
        help="include prompts, outputs and code in the spans (default off; $RLMD_OTLP_CONTENT=1)",
    )

    at = sub.add_parser("attach", help="bridge stdio to the daemon (starting it if needed)")
    at.add_argument("--stdio", action="store_true", required=True, help="speak on stdin/stdout")
    at.add_argument("--no-start", action="store_true", help="fail instead of starting a daemon")
    at.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for a new daemon")

    dr = sub.add_parser("doctor", help="check the setup and say what to fix")
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--no-sandboxes", action="store_true", help="do not start sandboxes")
    dr.add_argument(
        "--cluster",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="also check the Ray cluster (default: when the user config has [cluster])",
    )


_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def _env_switch(name: str) -> bool:
    """An on/off environment variable: ``1``/``true``/``yes``/``on`` (any case) or
    ``0``/``false``/``no``/``off``/unset/empty.

    Raises:
        ValueError: any other value (``RLMD_OTLP_CONTENT=ture`` was taken as off without a
            word: spans went out without the content asked for).
    """
    value = os.environ.get(name, "").strip().lower()
    if value not in _ON + _OFF:
        raise ValueError(f"${name} must be 1 or 0 (on or off), got {os.environ[name]!r}")
    return value in _ON


def run_server_command(args: argparse.Namespace) -> int:
    """Run ``serve`` / ``attach`` / ``doctor``; returns the exit code."""
    if args.command == "serve":
        from rlmd.server import daemon

        if args.otlp_content is None:
            try:
                args.otlp_content = _env_switch("RLMD_OTLP_CONTENT")
            except ValueError as exc:
                print(f"rlmd serve: {exc}", file=sys.stderr)
                return 2
        if args.otlp_endpoint is not None:
            if not importlib.util.find_spec("opentelemetry.exporter"):
                print(
                    "rlmd serve: --otlp-endpoint needs OpenTelemetry; install it with: "
                    "pip install 'rlmd[otel]'",
                    file=sys.stderr,
                )
                return 2
            from rlmd.frontdoors.otel import check_endpoint

            try:  # a bad URL was logged at every task's end, and '' turned the export off
                check_endpoint(args.otlp_endpoint, "--otlp-endpoint (or $RLMD_OTLP_ENDPOINT)")
            except ValueError as exc:
                print(f"rlmd serve: {exc}", file=sys.stderr)
                return 2

        return daemon.main(
            stdio=args.stdio,
            idle_timeout_s=args.idle_timeout or None,
            max_message_bytes=args.max_message_bytes,
            max_client_buffer_bytes=args.max_client_buffer,
            client_stall_s=args.client_stall,
            log_file=args.log_file,
            log_level=args.log_level,
            otlp_endpoint=args.otlp_endpoint,
            otlp_content=args.otlp_content,
            cluster=args.cluster,
        )
    if args.command == "attach":
        from rlmd.cli import attach

        return attach.main(autostart=not args.no_start, timeout_s=args.timeout)
    from rlmd.cli import doctor

    return doctor.main(as_json=args.json, sandboxes=not args.no_sandboxes, cluster=args.cluster)

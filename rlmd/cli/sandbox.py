"""``rlmd sandbox``: build and list container sandbox templates, reap orphaned containers.

    rlmd sandbox build NAME [--dir DIR]
    rlmd sandbox ls [--json] [--dir DIR]
    rlmd sandbox reap

Exit codes: 0 done, 1 the build or the engine failed, 2 bad usage (unknown template).
Without the container extra (the docker SDK) ``ls`` still lists the templates, none as
built, and every command says what to install.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any


def add_parser(sub: Any) -> None:
    """Add the ``sandbox`` command to the ``rlmd`` sub-parsers ``sub``."""
    p = sub.add_parser("sandbox", help="container sandbox templates: build, ls, reap")
    ssub = p.add_subparsers(dest="sandbox_command", required=True)
    b = ssub.add_parser("build", help="build sandboxes/NAME/Dockerfile as rlmd/sandbox-NAME")
    b.add_argument("name")
    b.add_argument("--dir", help="folder of templates (default: $RLMD_SANDBOXES_DIR or sandboxes/)")
    ls = ssub.add_parser("ls", help="list templates and whether their images are built")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--dir", help="folder of templates")
    ssub.add_parser("reap", help="remove rlmd containers whose owning process is gone")


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.0f} MB"


def run(args: argparse.Namespace) -> int:
    """Run ``rlmd sandbox ...``; returns the exit code."""
    folder = getattr(args, "dir", None)
    saved = os.environ.get("RLMD_SANDBOXES_DIR")
    if folder:
        os.environ["RLMD_SANDBOXES_DIR"] = os.path.abspath(folder)
    try:
        return _run(args)
    finally:
        if folder and saved is None:
            os.environ.pop("RLMD_SANDBOXES_DIR", None)
        elif folder and saved is not None:
            os.environ["RLMD_SANDBOXES_DIR"] = saved


INSTALL_HINT = "pip install 'rlmd[container]'"
"""What installs the docker SDK (in a checkout: ``pip install -e '.[container]'``)."""


def _docker_host() -> tuple[Any, str | None]:
    """``(rlmd.sandbox.docker.engine, None)`` when the docker engine answers, else the module
    (``None`` without the docker SDK) and why containers are unavailable."""
    try:
        from rlmd.sandbox.docker import engine as docker_host
    except ModuleNotFoundError as exc:  # docker_host imports the SDK (and requests) at once
        return None, (
            f"the container extra is not installed (no module {exc.name!r}): {INSTALL_HINT}, "
            "or pip install -e '.[container]' in a checkout of rlmd"
        )
    reason = docker_host.engine_unavailable_reason()
    return docker_host, (f"no docker engine: {reason}" if reason else None)


def templates_table(infos: list[Any], width: int) -> Any:
    """What ``rlmd sandbox ls`` prints for ``infos``
    (:class:`rlmd.sandbox.docker.images.TemplateInfo`) on ``width`` columns: a table when it
    fits whole, else a few lines per template (at 80 columns the table cut the image tag to
    ``rlmd/sandbox-b…`` and the creation time to ``2026-12-02T23:…``)."""
    from rich import box
    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

    rows = []
    for i in infos:
        built = "[green]yes[/]" + (" [yellow](stale)[/]" if i.stale else "")
        rows.append(
            {
                "template": Text(i.name),
                "image": Text(i.image),
                "built": built if i.image_id else "[yellow]no[/]",
                "image id": i.image_id or "-",
                "size": _size(i.size_bytes),
                "created": (i.created or "-")[:16].replace("T", " "),  # to the minute
            }
        )
    table = Table(*(rows[0] if rows else ()), box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.no_wrap = True
    for row in rows:
        table.add_row(*row.values())
    if Console(width=100_000).measure(table).maximum <= width:
        return table
    blocks: list[Any] = []
    for info, row in zip(infos, rows, strict=True):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for key, value in row.items():
            if key != "template":
                grid.add_row(f"  {key}", value)
        blocks += [Text(info.name, style="bold"), grid]
    return Group(*blocks)


def _run(args: argparse.Namespace) -> int:
    from rlmd.cli.term import make_console, markup
    from rlmd.sandbox import SandboxError
    from rlmd.sandbox.docker import images

    err = make_console(stderr=True, highlight=False, soft_wrap=True)
    cmd = args.sandbox_command
    docker_host, reason = _docker_host()
    if cmd == "ls":
        engine = None if reason else docker_host.client()
        infos = images.list_templates(engine)
        if reason:
            err.print(f"[yellow]containers unavailable[/]: {markup(reason)}")
        if args.json:
            print(json.dumps([asdict(i) for i in infos]))
            return 0
        if not infos:
            err.print(f"no templates in {images.templates_dir()}")
            return 0
        out = make_console(highlight=False)
        out.print(templates_table(infos, out.width))
        return 0
    if cmd == "build":  # an unknown name is bad usage whether or not docker runs
        try:
            images.template_path(args.name)
        except (SandboxError, ValueError) as exc:
            err.print(f"[red]error:[/] {markup(str(exc))}")
            return 2
    if reason:
        err.print(f"[red]error:[/] {markup(reason)}")
        return 1
    if cmd == "reap":
        removed = docker_host.reap_orphans()
        print(
            f"removed {len(removed)} orphaned container(s)"
            + (f": {' '.join(removed)}" if removed else "")
        )
        return 0
    try:
        image = images.build_template(
            docker_host.client(), args.name, progress=lambda msg: err.print(markup(str(msg)))
        )
    except SandboxError as exc:
        err.print(f"[red]error:[/] {markup(str(exc))}")
        return 1
    sys.stdout.write(f"{images.image_name(args.name)} {image.id}\n")
    return 0

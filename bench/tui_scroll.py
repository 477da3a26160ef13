"""TUI scrolling: open a 10,000-node trajectory and a 50 MB cell output, and scroll.

Run: ``.venv/bin/python bench/tui_scroll.py [--nodes 10000] [--mb 50]`` (about 15 s on 2
cores). Drives the real app headless with Textual's Pilot at 80×24 and prints a table (also
``bench/out/tui_scroll.json``). Times are wall clock from the key press until the app is idle
again (``pilot.pause``), so they include layout and rendering of the visible lines.

* **open run**: from ``enter`` on the runs table to the tree shown (children are added
  lazily, when a node is expanded).
* **tree end**: ``end`` on the tree (cursor to the last of the top-level nodes).
* **open 50 MB output**: selecting the cell: splitting the output into lines (the one O(n)
  step) and showing the first screen.
* **scroll end / page / home**: in the output pane; these must not depend on the size.
* **peer**: ``str.splitlines`` of the same text alone: the floor for showing it at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from rlmd_tui.app import RlmdApp
from rlmd_tui.lineview import LineView
from tests.helpers.tui_memory import MemoryBackend
from tests.helpers.tui_sample import big_tree


async def measure(nodes: int, mb: int) -> dict[str, float]:
    tree = big_tree(nodes, output_bytes=mb * 1_000_000)
    out: dict[str, float] = {}
    app = RlmdApp(MemoryBackend([tree]))
    async with app.run_test(size=(80, 24)) as pilot:
        while not app.screen.query("#runs") or not app.screen.runs:
            await pilot.pause(0.01)

        async def timed(name, *keys, until=None):
            t = time.perf_counter()
            await pilot.press(*keys)
            while until is not None and not until():
                await pilot.pause(0.005)
            await pilot.pause()
            out[name] = time.perf_counter() - t

        await timed("open run", "enter", until=lambda: getattr(app.screen, "run", None))
        traj = app.screen
        widget = traj.query_one("#tree")
        await timed("tree end", "end")
        last = widget.root.children[-1]
        await timed("expand last", "space", until=lambda: len(last.children) == 2)
        detail = traj.query_one("#detail", LineView)
        await timed(f"open {mb} MB output", "down", "down", until=lambda: len(detail.lines) > 1000)
        await pilot.press("o")
        await timed("scroll end", "end", until=lambda: detail.scroll_y == detail.max_scroll_y)
        await timed("page up x10", *["pageup"] * 10)
        await timed("scroll home", "home", until=lambda: detail.scroll_y == 0)
        text = traj.items[f"node:{last.children[-1].data[1]['id']}"].data[1]["data"]["stdout"]
        t = time.perf_counter()
        lines = text.splitlines()
        out["peer: splitlines"] = time.perf_counter() - t
        out["lines"] = len(lines)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--mb", type=int, default=50)
    args = p.parse_args()
    result = asyncio.run(measure(args.nodes, args.mb))
    for name, value in result.items():
        shown = f"{value:,.0f}" if name == "lines" else f"{value * 1000:9.1f} ms"
        print(f"{name:24} {shown}")
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "tui_scroll.json").write_text(
        json.dumps({"nodes": args.nodes, "mb": args.mb, **result}, indent=2)
    )


if __name__ == "__main__":
    main()

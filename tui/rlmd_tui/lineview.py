"""A scrollable view of many lines (megabytes of output) using Textual's Line API.

Only the visible lines are turned into segments, so opening and scrolling a 50 MB output
costs one ``splitlines`` and then constant work per frame. Lines are not wrapped (scroll
sideways); plain lines are ``str`` with one style, highlighted ones are ``rich.text.Text``.
A :class:`Para` line (prose, like an answer) is wrapped at the view's width instead.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from rlmd.cli.term import visible

MAX_WIDTH = 2000
"""Widest line the view scrolls to (longer lines are cut there)."""

Line = str | Text | tuple[str, Style]


class Para(str):
    """A line of prose: wrapped at the view's width (words kept whole where they fit)."""


def _wrap(lines: list[Line], width: int) -> list[Line]:
    if width < 8 or not any(isinstance(ln, Para) or _para_tuple(ln) for ln in lines):
        return lines
    out: list[Line] = []
    for line in lines:
        style = line[1] if isinstance(line, tuple) else None
        text = line[0] if isinstance(line, tuple) else line
        if isinstance(text, Para) and len(text) > width:
            parts = textwrap.wrap(text, width, replace_whitespace=False, drop_whitespace=True)
            out += [(p, style) if style is not None else p for p in parts or [""]]
        else:
            out.append(line)
    return out


def _para_tuple(line: Line) -> bool:
    return isinstance(line, tuple) and isinstance(line[0], Para)


class LineView(ScrollView, can_focus=True):
    """Lines of text, virtualised. ``set_lines`` replaces them; ``append`` adds."""

    DEFAULT_CSS = """
    LineView { background: $surface; }
    LineView:focus { background-tint: $foreground 4%; }
    """

    BINDINGS = [
        ("home", "scroll_home", "Top"),
        ("end", "scroll_end", "End"),
    ]

    def __init__(self, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self.source: list[Line] = []  # as given
        self.lines: list[Line] = []  # as shown (Para lines wrapped)
        self._width = 0

    # Jumps without animation: an animated scroll over 600,000 lines repaints every frame.
    def action_scroll_home(self) -> None:
        self.scroll_to(y=0, animate=False)

    def action_scroll_end(self) -> None:
        self.scroll_to(y=self.max_scroll_y, animate=False)

    def action_page_up(self) -> None:
        self.scroll_to(y=self.scroll_y - self.scrollable_content_region.height, animate=False)

    def action_page_down(self) -> None:
        self.scroll_to(y=self.scroll_y + self.scrollable_content_region.height, animate=False)

    def set_lines(self, lines: Iterable[Line]) -> None:
        self.source = list(lines)
        self._layout()
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    def _layout(self) -> None:
        """``lines`` from ``source``: :class:`Para` lines wrapped at the current width."""
        self.lines = _wrap(self.source, self.scrollable_content_region.width)
        self._width = min(MAX_WIDTH, max((_len(line) for line in self.lines), default=0))
        self.virtual_size = Size(self._width, len(self.lines))

    def on_resize(self) -> None:
        if any(isinstance(ln, Para) or _para_tuple(ln) for ln in self.source):
            self._layout()
            self.refresh()

    def update_lines(self, lines: Iterable[Line]) -> None:
        """Like :meth:`set_lines`, but keep the scroll position (a live refresh of what is
        shown); nothing happens when the lines are the same."""
        lines = list(lines)
        if lines == self.source:
            return
        x, y = self.scroll_offset
        self.source = lines
        self._layout()
        self.scroll_to(x, y, animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self.lines):
            return Strip.blank(width, base)
        line = self.lines[index]
        if isinstance(line, Text):
            # Rich keeps ESC and other controls in Text: a cell's output must not drive the terminal.
            segments = [
                seg if seg.control else Segment(visible(seg.text), seg.style)
                for seg in line.render(self.app.console)
            ]
            strip = Strip(segments).crop(scroll_x, scroll_x + width)
        else:
            style = None
            if isinstance(line, tuple):
                line, style = line
            text = line.expandtabs(4)[scroll_x : scroll_x + width]
            text = "".join(ch if ch.isprintable() else "·" for ch in text)
            strip = Strip([Segment(text, style)] if text else [])
        return strip.apply_style(base).extend_cell_length(width, base)


def _len(line: Line) -> int:
    if isinstance(line, Text):
        return line.cell_len
    if isinstance(line, tuple):
        line = line[0]
    return len(line)

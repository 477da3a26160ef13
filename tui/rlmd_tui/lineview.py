"""A scrollable view of many lines (megabytes of output) using Textual's Line API.

Only the visible lines are turned into segments, so opening and scrolling a 50 MB output
costs one ``splitlines`` and then constant work per frame. Lines are not wrapped (scroll
sideways); plain lines are ``str`` with one style, highlighted ones are ``rich.text.Text``.
"""

from __future__ import annotations

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
        self.lines: list[Line] = []
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
        self.lines = list(lines)
        self._width = min(MAX_WIDTH, max((_len(line) for line in self.lines), default=0))
        self.virtual_size = Size(self._width, len(self.lines))
        self.scroll_to(0, 0, animate=False)
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

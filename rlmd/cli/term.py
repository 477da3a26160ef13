"""Text made by models and sandboxes, made safe to draw on a terminal.

A cell can print anything, including escape sequences that clear the screen, retitle the
window, write the clipboard (OSC 52) or hide links (OSC 8); a file in an analysed folder is
enough. Everything rlmd draws from a run goes through :func:`visible` first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_UNSAFE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""C0 and C1 control characters except newline and tab, DEL, the Unicode bidirectional
controls (U+202E and its kin reorder how a line reads: the "Trojan Source" attack,
CVE-2021-42574), and lone surrogates (which no terminal encoding can write)."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: Any) -> str:
    """``str(text)`` with control characters other than ``\\n`` and ``\\t``, bidirectional
    controls and lone surrogates shown as Python escapes (ESC becomes the four characters
    ``\\x1b``, U+202E ``\\u202e``). Never raises; text without them is returned unchanged."""
    return _UNSAFE.sub(_escape, str(text))


def _shallow(value: Any) -> Any:
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return []
    return value


def visible_all(obj: Any) -> Any:
    """A copy of ``obj`` (nested dicts and lists) with :func:`visible` applied to every
    string, keys included; other values are kept. Any depth: it walks with a list, not the
    call stack (a run tree 150 child runs deep ended ``rlmd show`` in a RecursionError)."""
    top = _shallow(obj)
    stack = [(obj, top)] if isinstance(obj, dict | list) else []
    while stack:
        source, copy = stack.pop()
        if isinstance(source, dict):
            for key, value in source.items():
                copy[_shallow(key)] = new = _shallow(value)
                if isinstance(value, dict | list):
                    stack.append((value, new))
        else:
            for value in source:
                copy.append(new := _shallow(value))
                if isinstance(value, dict | list):
                    stack.append((value, new))
    return top


def markup(text: Any) -> str:
    """:func:`visible` text, escaped for rich console markup (``[red]`` stays literal)."""
    from rich.markup import escape

    return escape(visible(text))


def message(exc: BaseException) -> str:
    """What an error says: a ``KeyError``'s message, not its repr in quotes."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


TERMINAL_WIDTHS = (20, 1000)
"""The widths rlmd draws at: ``$COLUMNS`` outside them is clamped. ``COLUMNS=0`` printed
nothing at all (exit 0), and ``COLUMNS=99999999`` kept ``rlmd show`` padding lines for
minutes (review18)."""


def make_console(**options: Any) -> Console:
    """A :class:`rich.console.Console` with ``options``; without a ``width`` among them, a
    ``$COLUMNS`` outside :data:`TERMINAL_WIDTHS` is clamped into them (rich takes any digits),
    and ``COLUMNS=0`` draws 80 wide."""
    import os

    from rich.console import Console

    columns = os.environ.get("COLUMNS", "")
    if "width" not in options and columns.isdigit():
        least, most = TERMINAL_WIDTHS
        if int(columns) == 0:  # no width at all: rich's own default for a pipe
            options["width"] = 80
        elif not least <= int(columns) <= most:
            options["width"] = min(max(int(columns), least), most)
    return Console(**options)


class LazyConsole:
    """A :class:`rich.console.Console` made on first use, with the options given here:
    importing rich costs ~50 ms, which ``rlmd run`` spends after it has started reading the
    codebase, and not at all when it prints nothing (``--quiet``, no error). Attributes
    and methods are the console's."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The console itself (made now if it was not yet)."""
        if self._console is None:
            self._console = make_console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not the console's: this object's own, not set yet
            raise AttributeError(name)
        return getattr(self.console, name)

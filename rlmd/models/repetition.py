r"""The repetition guard: end a streamed reply that writes the same lines again and again.

A small model decoding greedily can fall into a loop: session 12's fine-tuned 0.5B wrote its
search cell correctly and then the loop's body line
``print(repr(context[max(0, i - 150): i + 150]))`` 43 more times, until the token cap; at
~8 tokens/s that took longer than the run's clock, and the whole reply was lost
(``bench/RESULTS.md``, issue 13, session 12). A stop string cannot catch this and llama.cpp's
``repeat_penalty`` changes every reply, not only looping ones.

:class:`RepeatGuard` is fed the streamed text. It fires when the reply's last complete lines
are one block of 1 to ``block_lines`` lines (not all blank) written ``copies`` times in a
row, and those copies together hold at least ``min_chars`` characters (indentation not
counted). The reply then ends there: :attr:`RepeatGuard.kept` is the text before the
repeats plus one copy, with an open code fence closed so the engine can run the cell, and
the provider reports ``finish_reason = "repetition"`` (:data:`FINISH_REASON`).

Why these defaults (``copies=4``, ``min_chars=240``, ``block_lines=4``): the same statement
written four times in a row has no legitimate use unless it is short and has a side effect
(``print()``, ``next(f)``, ``)`` closing nested calls, rows of a zero matrix); the character
floor lets those through (a 7-character ``print()`` needs 35 copies, a 25-character
``[0, 0, 0, 0, 0, 0, 0, 0],`` row 10, more than an 8×8 board) while a line of 60 or more
characters stops at its 4th copy and session 12's 46-character line at its 6th, ~75 tokens
(~10 s at one thread) after the loop began. A block of up to 4 lines catches a cycle
(session 12's ``import astor.formatters.yaml`` / ``.json`` / ``.toml``). A loop of very
short lines (one ``)`` at a time) still ends, later: 240 characters is at most ~240 tokens.

Repetition inside one line: session 13's tuned 0.5B began a regular expression and wrote
the 17-character unit ``(\d{0,40}){0,40}?`` some 75 times on one line until the token cap,
twice in one run (``bench/RESULTS.md``, issue 13, session 14); no line ever ended, so the
line check above never ran. The guard therefore also watches the unfinished line: when its
tail is one unit of ``line_unit`` to 120 characters written at least ``copies`` times in a
row, holding at least ``min_chars`` characters, the reply ends after the unit's first copy
(the cell then usually raises a ``SyntaxError``, which the model sees at once instead of
after the cap). Units shorter than ``line_unit`` (default 8) are let through: they are the
legitimate fillers (``0, 0, 0, …``, ``-----``, ``ACGTACGT``), and a tail whose shortest
period is short is judged by that period.

Configured per model with ``options.repeat_guard`` (:func:`guard_settings`): ``false`` turns
it off; ``true`` or absent: the defaults; a table sets any of ``copies``, ``min_chars``,
``block_lines``, ``line_unit`` (0 turns the in-line check off).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

FINISH_REASON = "repetition"
"""The ``finish_reason`` of a reply the guard ended (:attr:`Completion.finish_reason`)."""

OPTION = "repeat_guard"
"""The ``ModelSpec.options`` key that configures the guard."""


@dataclass(frozen=True)
class GuardSettings:
    """When :class:`RepeatGuard` fires (see the module docstring for the defaults' reasons).

    Attributes:
        copies: how many times in a row the block must be written (≥ 2).
        min_chars: the least number of characters (each line stripped of surrounding
            whitespace) those copies hold together (≥ 0).
        block_lines: the longest block, in lines, that is looked for (≥ 1).
        line_unit: the shortest unit, in characters, whose repeats inside one unfinished
            line end the reply (≥ 0; 0: no in-line check; units longer than
            :data:`MAX_LINE_UNIT` are not looked for).
    """

    copies: int = 4
    min_chars: int = 240
    block_lines: int = 4
    line_unit: int = 8


MAX_LINE_UNIT = 120
"""The longest in-line unit, in characters, the guard looks for."""


def guard_settings(
    name: str, options: dict[str, Any], where: str | None = None
) -> GuardSettings | None:
    """The guard settings of model ``name`` from its ``options`` (``None``: guard off).

    Raises:
        ValueError: ``options.repeat_guard`` is not a boolean or a table of the known keys
            with integers in range; the message names the model (or ``where``, a config
            file's table) and the key.
    """
    value = options.get(OPTION, True)
    where = f"{where or f'model {name}'}: options.{OPTION}"
    if value is True:
        return GuardSettings()
    if value is False:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be true, false or a table, not {value!r}")
    lowest = {"copies": 2, "min_chars": 0, "block_lines": 1, "line_unit": 0}
    for key, number in value.items():
        if key not in lowest:
            raise ValueError(f"{where}: unknown key {key!r} (known: {', '.join(lowest)})")
        if isinstance(number, bool) or not isinstance(number, int) or number < lowest[key]:
            raise ValueError(f"{where}.{key} must be an integer ≥ {lowest[key]}, not {number!r}")
    return GuardSettings(**value)


class RepeatGuard:
    """Reads a reply as it streams and says when it is repeating itself.

    Feed each piece with :meth:`feed`; once it returns ``True``, the reply should end and
    :attr:`kept` is the text to keep. Checking costs a few list comparisons per new line.
    """

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self.lines: list[str] = []  # the complete lines so far, without their newline
        self.partial = ""  # the text after the last newline
        self.kept: str | None = None  # set when the guard fired
        self.dropped_lines = 0  # lines of repeats left out of kept

    def feed(self, delta: str) -> bool:
        """Add streamed text; ``True`` when the reply now ends in a repeated block (then
        :attr:`kept` is set and further calls keep returning ``True``)."""
        if self.kept is not None:
            return True
        if "\n" not in delta:
            self.partial += delta
            return self._check_line()
        *done, self.partial = (self.partial + delta).split("\n")
        for line in done:
            self.lines.append(line)
            if self._check():
                return True
        return self._check_line()

    def _check_line(self) -> bool:
        """In-line repetition at the end of the unfinished line (see the module docstring)."""
        s, text = self.settings, self.partial
        if not s.line_unit or len(text) < s.min_chars:
            return False
        # candidate units, shortest first: where the line's last two characters occur before
        # (rfind in C instead of a Python loop over every unit length)
        n, last2, hi = len(text), text[-2:], len(text) - 1
        while (pos := text.rfind(last2, max(0, n - 2 - MAX_LINE_UNIT), hi)) >= 0:
            hi = pos + 1
            unit = n - 2 - pos
            span = max(s.copies * unit, s.min_chars)
            if span > n:
                return False
            tail = text[-span:]
            if tail[unit:] != tail[:-unit]:
                continue
            if unit < s.line_unit:
                return False  # a short filler, judged by its shortest period
            start = len(text) - span
            while start > 0 and text[start - 1] == text[start - 1 + unit]:
                start -= 1
            kept_line = text[: start + unit]
            self.kept = close_fence("\n".join([*self.lines, kept_line]) + "\n")
            log.info(
                "reply ended on repetition: a %d-character unit written %d times in one line",
                unit,
                (len(text) - start) // unit,
            )
            return True
        return False

    def _check(self) -> bool:
        lines, s = self.lines, self.settings
        n = len(lines)
        for k in range(1, s.block_lines + 1):
            if k * s.copies > n:
                break
            block = [line.rstrip() for line in lines[n - k :]]
            if not any(block):
                continue
            copies = 1
            while copies * k + k <= n and all(
                lines[n - (copies + 1) * k + j].rstrip() == block[j] for j in range(k)
            ):
                copies += 1
            chars = copies * sum(len(line.strip()) for line in block)
            if copies >= s.copies and chars >= s.min_chars:
                keep = n - (copies - 1) * k
                self.dropped_lines = n - keep
                self.kept = close_fence("\n".join(lines[:keep]) + "\n")
                log.info(
                    "reply ended on repetition: a %d-line block written %d times in a row",
                    k,
                    copies,
                )
                return True
        return False


def close_fence(text: str) -> str:
    """``text`` with a closing ````` line appended when it ends inside a code fence (an odd
    number of lines start with `````), else ``text``."""
    fences = sum(1 for line in text.split("\n") if line.lstrip().startswith("```"))
    return text.rstrip("\n") + "\n```" if fences % 2 else text


def trim_repetition(text: str, settings: GuardSettings) -> str | None:
    """The text to keep of a finished reply that ends in repetition (as :class:`RepeatGuard`
    would have cut it while streaming), or ``None`` when it does not repeat itself."""
    guard = RepeatGuard(settings)
    return guard.kept if guard.feed(text) else None

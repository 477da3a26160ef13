"""The programmatic teacher's *literal* strategies: short programs a 0.5B student can copy.

Session 14's tuned 0.5B copied the teacher's openings but broke its clever parts: the needle
regex ``\\D{0,40}?(\\d{5,})`` became a loop of ``(\\d{0,40}){0,40}?``, and the ``ast`` walk of
a codebase question lost its shape. These strategies write the question's own key / name
literally into a few plain lines, print what they found, and then **read** the printed
output, as a model reads it, answering with the value written out (``FINAL("1234567")``):

* ``sniah`` — ``find``: ``i = context.find(KEY)`` (``find_lower``:
  ``context.lower().find(KEY)``), print ``context[i - 50: i + 150]``; the next turn reads
  the number after the key in that output.
* ``codeqa`` — ``find_definition`` (where a name is defined): ``print(find_definition(NAME))``
  and the path read from the hit; ``grep`` (where defined, call counts, subclasses,
  importers, module constants): substring tests over ``context`` (a dict path -> text),
  e.g. ``'def NAME(' in text or 'class NAME' in text``, ``text.count('NAME(') -
  text.count('def NAME(')``, then the printed value read back. Parameter defaults keep the
  ``ast`` strategy.

A reading turn parses the last REPL output in the messages the engine sent the teacher (the
last user message: ``[cell N]``, the printed text, then the engine's notes); it never sees
the gold answer. When the output holds nothing to read, the turn falls back to code (the
regex of the ``regex`` strategy, or ``FINAL_VAR('found')``), so such a run still ends; if it
is wrong, the export's reward filter drops it.

**Every family ends with the same act** (session 16): the step before the last prints the
value, and the last turn reads it and writes it out as a quoted literal, ``FINAL('...')``
(a list as its printed text, ``FINAL("['a', 'b']")``). The aggregation families
(:mod:`rlmd.train.teacher`'s ``oolong`` / ``pairs``) and the ``ast`` / ``regex`` strategies
use the readers here too, so no final turn answers ``FINAL(variable)``.

**Each family's reading turn opens with its own words** (session 15's student, seeing every
final note start "The output ...", answered a needle with another family's ending): a
needle's note starts with its key (```key` is followed by the number N.``), a codebase
question's with ``The ...`` naming what was read (``The file `P` defines NAME.``, ``The call
count of NAME is `N`.``), an aggregation question's with ``Category`` / ``User`` (oolong) or
``Pairs of users`` (pairs). :func:`opening` gives a note's opening words.

**A codebase note's only backticked literal is the answer** (session 17): session 16's
student wrote "`NAME` is defined in the file `P`." and answered the leading ``NAME``, the
first backticked literal, as it had learnt from the needle notes. So the question's name is
written plain and the value read is the note's first and only backticked literal.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Turn = tuple[str, str]
Reader = Callable[[list[dict[str, Any]]], Turn]
"""A turn decided when it is played, from the messages the teacher is sent."""

_NOTES_AT = re.compile(r"\n\n(?:Variables set:|Turn \d+ of \d+)")


def last_output(messages: list[dict[str, Any]]) -> str:
    """The text the last cell printed, as the last user message shows it (the ``[cell N]``
    header lines and the engine's notes after it left out); ``""`` when there is none."""
    text = ""
    for m in reversed(messages):
        if m.get("role") == "user":
            text = str(m.get("content") or "")
            break
    text = _NOTES_AT.split(text, maxsplit=1)[0]
    return "\n".join(line for line in text.splitlines() if not re.fullmatch(r"\[cell \d+\]", line))


def _final(value: Any) -> str:
    """``FINAL('text')``: the value written out as a quoted string literal."""
    return f"FINAL({str(value)!r})"


def opening(note: str, words: int = 3) -> str:
    """The first ``words`` words of a turn's note, each backticked name or number written as
    ``<name>`` (``"`quiet-otter` is followed by ..."`` -> ``"<name> is followed"``): what a
    family's final turns must not share with another family's."""
    parts = note.split()[:words]
    return " ".join("<name>" if re.fullmatch(r"`[^`]*`[.,:;]?|\d+[.,:;]?", w) else w for w in parts)


def sniah(key: str, lower: bool) -> list[Turn | Reader]:
    """Find the key, print around it, read the number after it (see the module docstring)."""
    if lower:
        find = f"i = context.lower().find({key.lower()!r})"
        note = f"I look for `{key}` in the text (ignoring case) and print what follows it."
    else:
        find = f"i = context.find({key!r})"
        note = f"I look for the key `{key}` in the text and print what follows it."
    look = (note, f"{find}\nprint(i)\nprint(context[max(0, i - 50):i + 150])")

    def read(messages: list[dict[str, Any]]) -> Turn:
        out = last_output(messages)
        at = out.lower().find(key.lower())
        m = re.search(r"\D{0,40}?(\d{5,})", out[at + len(key) :]) if at >= 0 else None
        if m:
            number = m.group(1)
            return (f"`{key}` is followed by the number {number}.", _final(number))
        return (  # nothing to read: search with code instead
            "The number is not in the printed text; I search for it with a regex.",
            f"import re\nm = re.search({key!r} + r'\\D{{0,40}}?(\\d{{5,}})', context, "
            "re.IGNORECASE)\nFINAL(m.group(1) if m else None)",
        )

    return [look, read]


@dataclass(frozen=True)
class ReadValue:
    """A turn that reads the last printed value and answers with it written out (a reader:
    called with the messages of its turn, it returns ``(note, code)``). ``kind``:

    * ``line`` — the last printed line as printed (a count, a category);
    * ``number`` — the last line, when it is a whole number;
    * ``list`` — the last line, when it is a list (written out as printed);
    * ``first`` — the file of the first item of a printed list (``path`` or ``path:line``);
    * ``rhs`` — the text after ``' = '`` of the first printed line that has one.

    The note is ``say`` with ``{v}`` replaced by the value read and ``{n}`` by the number of
    items of a printed list; it opens with the family's own words (module docstring). When
    the output holds no such value the turn answers ``FINAL_VAR(fallback)`` (the variable
    the code set), so the run still ends. Plain data, so two plays compare equal."""

    kind: str
    say: str
    fallback: str = "found"

    def __call__(self, messages: list[dict[str, Any]]) -> Turn:
        lines = [line for line in last_output(messages).splitlines() if line.strip()]
        text, value = "", None
        if self.kind == "rhs":  # the line as printed: its repr would double every backslash
            text = next((ln.partition(" = ")[2].strip() for ln in lines if " = " in ln), "")
        elif lines:
            last = lines[-1].strip()
            try:
                value = ast.literal_eval(last)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
            if self.kind == "line":
                text = last
            elif self.kind == "number" and type(value) is int:
                text = str(value)
            elif self.kind == "list" and isinstance(value, list):
                text = last
            elif self.kind == "first" and isinstance(value, list) and value:
                text = str(value[0]).split(":", 1)[0]
        if not text:
            return (
                f"Nothing printed reads as the answer, so I answer with the variable "
                f"`{self.fallback}`.",
                f"FINAL_VAR({self.fallback!r})",
            )
        n = str(len(value)) if isinstance(value, list) else ""
        return (self.say.replace("{v}", text).replace("{n}", n), _final(text))


def codeqa(template: str, params: dict[str, Any], strategy: str) -> list[Turn | Reader] | None:
    """The literal turns of a codebase question, or ``None`` when ``strategy`` has none for
    ``template`` (the ``ast`` strategy plays it then)."""
    if template == "where_defined" and strategy == "find_definition":
        name = params["name"]
        return [
            (
                f"I ask the symbol index where `{name}` is defined.",
                f"found = find_definition({name!r})\nprint(found)",
            ),
            defined_in(name),
        ]
    if strategy != "grep":
        return None
    if template == "where_defined":
        name = params["name"]
        code = (
            "found = [path for path, text in context.items()\n"
            f"         if {'def ' + name + '('!r} in text or {'class ' + name!r} in text]\n"
            "print(found)"
        )
        return [(f"I look for the file whose text defines `{name}`.", code), defined_in(name)]
    if template == "call_count":
        name = params["name"]
        code = (
            f"calls = sum(text.count({name + '('!r}) for text in context.values())\n"
            f"defs = sum(text.count({'def ' + name + '('!r}) for text in context.values())\n"
            "found = calls - defs\nprint(calls, defs)\nprint(found)"
        )
        return [
            (f"I count `{name}(` in every file, less its definitions.", code),
            called(name),
        ]
    if template == "subclasses":
        base = params["base"]
        code = (
            "heads = [line.strip() for text in context.values() for line in text.splitlines()\n"
            "         if line.strip().startswith('class ')]\n"
            f"found = sorted(h[6:].split('(')[0] for h in heads if {base!r} in h.partition('(')[2])\n"
            "print(found)"
        )
        return [
            (f"I look at every class line that names `{base}` among its bases.", code),
            subclasses_of(base),
        ]
    if template == "importers":
        mod = params["module"]
        code = (
            "found = sorted(path for path, text in context.items()\n"
            f"               if {'import ' + mod!r} in text or {'from ' + mod!r} in text)\n"
            "print(found)"
        )
        return [(f"I look for files that import `{mod}`.", code), imported_by(mod)]
    if template == "module_constant":
        name = params["name"]
        code = (
            "found = [line for text in context.values() for line in text.splitlines()\n"
            f"         if line.startswith({name + ' = '!r})]\n"
            "print('\\n'.join(found))"
        )
        return [(f"I look for the line that sets `{name}`.", code), set_to(name, "rhs")]
    return None


def defined_in(name: str) -> ReadValue:
    """Reads the file of the first printed definition: "The file `P` defines NAME."."""
    return ReadValue("first", f"The file `{{v}}` defines {name}.")


def called(name: str) -> ReadValue:
    """Reads the printed count: "The call count of NAME is `N`."."""
    return ReadValue("number", f"The call count of {name} is `{{v}}`.")


def subclasses_of(base: str) -> ReadValue:
    """Reads the printed list: "The subclasses of BASE are `[...]`."."""
    return ReadValue("list", f"The subclasses of {base} are `{{v}}`.")


def imported_by(module: str) -> ReadValue:
    """Reads the printed list: "The files importing MOD are `[...]`."."""
    return ReadValue("list", f"The files importing {module} are `{{v}}`.")


def set_to(name: str, kind: str = "line") -> ReadValue:
    """Reads the printed value (``rhs``: of a printed ``NAME = value`` line): "The value of
    NAME is `V`."."""
    return ReadValue(kind, f"The value of {name} is `{{v}}`.")


def defaults_to(function: str, param: str) -> ReadValue:
    """Reads the printed default: "The default of PARAM in FUNCTION is `V`."."""
    return ReadValue("line", f"The default of {param} in {function} is `{{v}}`.", "answer")


def number_read(key: str) -> ReadValue:
    """Reads a needle's printed number (the ``regex`` strategy's last step): "`KEY` is
    followed by the number N."."""
    return ReadValue("number", f"`{key}` is followed by the number {{v}}.", "number")


CODEQA_LITERAL: dict[str, tuple[str, ...]] = {
    "where_defined": ("find_definition", "grep"),
    "call_count": ("grep",),
    "subclasses": ("grep",),
    "importers": ("grep",),
    "module_constant": ("grep",),
}
"""The literal strategies of each codebase template (the others keep the ``ast`` walk)."""

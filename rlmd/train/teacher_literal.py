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
regex of the ``regex`` strategy, or ``FINAL(found)``), so such a run still ends; if it is
wrong, the export's reward filter drops it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
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
    return f"FINAL({value!r})"


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
            return (f"The output says the number for `{key}` is {number}.", _final(number))
        return (  # nothing to read: search with code instead
            "The number is not in the printed text; I search for it with a regex.",
            f"import re\nm = re.search({key!r} + r'\\D{{0,40}}?(\\d{{5,}})', context, "
            "re.IGNORECASE)\nFINAL(m.group(1) if m else None)",
        )

    return [look, read]


def _read_value(kind: str) -> Reader:
    """A turn that answers with the last printed line: ``list`` answers the printed list,
    ``first`` its first item, ``number`` the number, ``rhs`` the text after ``' = '`` of
    the first printed line that has one."""

    def read(messages: list[dict[str, Any]]) -> Turn:
        lines = [line for line in last_output(messages).splitlines() if line.strip()]
        if kind == "rhs":  # the line as printed: its repr would double every backslash
            rhs = next((ln.partition(" = ")[2].strip() for ln in lines if " = " in ln), "")
            if rhs:
                return (f"The line gives the value: {rhs}.", _final(rhs))
            lines = []
        value: Any = None
        try:
            value = ast.literal_eval(lines[-1].strip()) if lines else None
        except (ValueError, SyntaxError):
            value = None
        if kind == "number" and isinstance(value, int):
            return (f"The output shows {value}; that is the count.", _final(str(value)))
        if kind == "list" and isinstance(value, list):
            return ("The printed list is the answer.", _final(value))
        if kind == "first" and isinstance(value, list) and value:
            first = value[0]
            if isinstance(first, str) and kind == "first":
                path = first.split(":", 1)[0]
                return (f"The output names the file: {path}.", _final(path))
        return ("The output does not read as an answer; I answer with what the code found.",
                "FINAL(found)")  # fmt: skip

    return read


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
            _read_value("first"),
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
        return [(f"I look for the file whose text defines `{name}`.", code), _read_value("first")]
    if template == "call_count":
        name = params["name"]
        code = (
            f"calls = sum(text.count({name + '('!r}) for text in context.values())\n"
            f"defs = sum(text.count({'def ' + name + '('!r}) for text in context.values())\n"
            "found = calls - defs\nprint(calls, defs)\nprint(found)"
        )
        return [
            (f"I count `{name}(` in every file, less its definitions.", code),
            _read_value("number"),
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
            _read_value("list"),
        ]
    if template == "importers":
        mod = params["module"]
        code = (
            "found = sorted(path for path, text in context.items()\n"
            f"               if {'import ' + mod!r} in text or {'from ' + mod!r} in text)\n"
            "print(found)"
        )
        return [(f"I look for files that import `{mod}`.", code), _read_value("list")]
    if template == "module_constant":
        name = params["name"]
        code = (
            "found = [line for text in context.values() for line in text.splitlines()\n"
            f"         if line.startswith({name + ' = '!r})]\n"
            "print('\\n'.join(found))"
        )
        return [(f"I look for the line that sets `{name}`.", code), _read_value("rhs")]
    return None


CODEQA_LITERAL: dict[str, tuple[str, ...]] = {
    "where_defined": ("find_definition", "grep"),
    "call_count": ("grep",),
    "subclasses": ("grep",),
    "importers": ("grep",),
    "module_constant": ("grep",),
}
"""The literal strategies of each codebase template (the others keep the ``ast`` walk)."""

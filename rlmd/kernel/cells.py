"""How a cell's source becomes code: statements run in order and the value of a trailing
expression is echoed, as in ``python -i`` (see ``Kernel.exec_cell``).

Knowing whether the last statement is an expression takes a parse. The general way, a
parse to an AST and a compile of that AST, costs 1.5-2x a plain compile of the source
(building the AST's Python objects and converting them back). :func:`split` does it with
plain compiles of disjoint parts of the source instead, for the shapes cells usually end
with; every part must compile on its own, which proves the cut is where the whole cell
would have a statement boundary (a cut inside a string, brackets or a continued line
leaves a part that does not compile). The last part, when it is one simple statement, is
compiled in ``"single"`` mode (the interactive prompt's): an expression statement there
calls ``sys.displayhook`` with its value, from the cell's own frame, which the kernel points
at its echo while a cell runs. Anything else returns ``None``: the caller then takes the
AST way, which also reports syntax errors.
"""

from __future__ import annotations

import keyword

TYPE_CHECKING = False
if TYPE_CHECKING:  # importing typing costs milliseconds at every kernel start
    from types import CodeType

#: statements that hold a block: a tail starting with one is that one statement
_COMPOUND = frozenset({"if", "for", "while", "with", "try", "def", "class", "async"})
#: simple statements led by a keyword (several may share a line with ";")
_SIMPLE = frozenset(
    {
        "import",
        "from",
        "return",
        "raise",
        "del",
        "pass",
        "break",
        "continue",
        "global",
        "nonlocal",
        "assert",
    }
)
#: "match", "case", "_", "type" (as this Python has them; a kernel may run on another)
_SOFT = frozenset(getattr(keyword, "softkwlist", ()))
#: ``[A-Za-z_][A-Za-z0-9_]*`` by hand: ``re`` (with ``enum``) costs ~5 ms of every kernel
#: start, and a cell without ";" needs no other expression
_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_WORD_CHARS = _WORD_START | frozenset("0123456789")


def _leading_word(text: str) -> str:
    """The ASCII identifier ``text`` starts with (``""`` if none)."""
    if not text or text[0] not in _WORD_START:
        return ""
    end = 1
    while end < len(text) and text[end] in _WORD_CHARS:
        end += 1
    return text[:end]


def _assigns_a_name(statement: str) -> bool:
    """Whether ``statement`` (after leading blanks) starts ``name =`` (not ``==``): what
    starts so is an assignment, never an expression statement (or does not compile)."""
    text = statement.lstrip(" \t")
    word = _leading_word(text)
    if not word or keyword.iskeyword(word):
        return False
    rest = text[len(word) :].lstrip(" \t")
    return rest[:1] == "=" and rest[1:2] != "="


def _has_for(expr: str) -> bool:
    """``for`` as a whole word in ``expr`` (``\\bfor\\b``)."""
    if "for" not in expr:
        return False
    import re

    return re.search(r"\bfor\b", expr) is not None


def _compile(source: str, filename: str, mode: str) -> CodeType | None:
    try:
        return compile(source, filename, mode, dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def split(code: str, filename: str) -> list[CodeType] | None:
    """The cell ``code`` as code objects to run in order (the last one echoes a trailing
    expression through ``sys.displayhook``); ``None`` when the cell is not in a shape
    handled here (the caller parses it to an AST instead). Line and column numbers are the
    cell's own (parts are padded), so tracebacks point into the cell's text."""
    # Characters that make lines or columns mean something else than "\n"-split text.
    if "\r" in code or "\f" in code or "\v" in code or "__future__" in code:
        return None
    # The tail: from the last line that starts at column 0 with code (not a comment).
    pos = len(code)
    while True:
        start = code.rfind("\n", 0, pos) + 1
        if start < len(code) and code[start] not in " \t#\n":
            break
        if start == 0:
            return None
        pos = start - 1
    prefix, tail = code[:start], code[start:]
    pad = "\n" * prefix.count("\n")
    word = _leading_word(tail)
    if tail[0] == "@" or word in _COMPOUND or (word in _SIMPLE and ";" not in tail):
        # One statement (a block, or a lone simple statement): nothing to echo. ("single"
        # mode would echo expression statements inside a block too.)
        return _parts(prefix, filename, [(pad + tail, "exec")])
    if keyword.iskeyword(word) or word in _SOFT or word in _SIMPLE:
        return None
    if ";" not in tail:  # one simple statement: echoed if it is an expression
        return _parts(prefix, filename, [(pad + tail, "single")])
    if "\n" in tail.rstrip():
        return None
    # "a = f(x); g(a)": when every part before the last ";" is an assignment to a name,
    # the line in "single" mode is one compile that echoes the last part if it is an
    # expression. Each real statement on the line starts where a part starts (a ";"
    # inside a string or a comment only makes more parts), so every statement but the
    # one that starts the last part is such an assignment: no echo of its own.
    pieces = tail.split(";")
    if all(_assigns_a_name(piece) for piece in pieces[:-1]):
        whole = _parts(prefix, filename, [(pad + tail, "single")])
        if whole is not None:
            return whole
    # Else echo what follows the last ";" on a last line of its own.
    if "#" in tail:
        return None
    cut = tail.rfind(";")
    after = tail[cut + 1 :]
    expr = after.strip()
    if not expr or "*" in expr or ":=" in expr or _has_for(expr):
        return None  # a parenthesised copy of these would not mean the same
    col = cut + 1 + len(after) - len(after.lstrip())
    # In parentheses, to start at the expression's own column ("single" refuses an indent);
    # a statement that is not an expression does not compile so: the AST way takes it.
    wrapped = pad + "(" + " " * (col - 1) + expr + "\n)"
    return _parts(prefix, filename, [(pad + tail[:cut], "exec"), (wrapped, "single")])


def _parts(prefix: str, filename: str, sources: list[tuple[str, str]]) -> list[CodeType] | None:
    """``prefix`` (if any) and ``sources`` compiled in order; ``None`` if any part does
    not compile."""
    out = []
    for source, mode in [(prefix, "exec"), *sources] if prefix else sources:
        part = _compile(source, filename, mode)
        if part is None:
            return None
        out.append(part)
    return out

"""How a cell's source becomes code: statements run in order and the value of a trailing
expression is echoed, as in ``python -i`` (see ``Kernel.exec_cell``).

Knowing whether the last statement is an expression takes a parse. The general way, a
parse to an AST and a compile of that AST, costs 1.5-2x a plain compile of the source
(building the AST's Python objects and converting them back). :func:`split` does it with
plain compiles of disjoint parts of the source instead, for the shapes cells usually end
with; every part must compile on its own, which proves the cut is where the whole cell
would have a statement boundary (a cut inside a string, brackets or a continued line
leaves a part that does not compile). Anything else returns ``None``: the caller then
takes the AST way, which also reports syntax errors.
"""

from __future__ import annotations

import keyword
import re

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
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FOR = re.compile(r"\bfor\b")


def _compile(source: str, filename: str, mode: str) -> CodeType | None:
    try:
        return compile(source, filename, mode, dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def split(code: str, filename: str) -> list[tuple[CodeType, bool]] | None:
    """The cell ``code`` as code objects to run in order, each with whether its value is
    echoed (only the trailing expression's is); ``None`` when the cell is not in a shape
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
    m = _WORD.match(tail)
    word = m.group() if m else ""
    if tail[0] == "@" or word in _COMPOUND or (word in _SIMPLE and ";" not in tail):
        # One statement (a block, or a lone simple statement): nothing to echo.
        return _parts(prefix, filename, [(pad + tail, "exec")])
    if keyword.iskeyword(word) or keyword.issoftkeyword(word) or word in _SIMPLE:
        return None
    if ";" not in tail:
        part = _compile(pad + tail, filename, "eval")
        if part is not None:
            return _parts(prefix, filename, [], (part, True))
        if "*" in tail:  # "a, *b" is an expression statement but not an eval expression
            return None
        # A lone statement that is not an expression (an assignment, ...).
        return _parts(prefix, filename, [(pad + tail, "exec")])
    # "a = f(x); g(a)": echo what follows the last ";" on a last line of its own.
    if "\n" in tail.rstrip() or "#" in tail:
        return None
    cut = tail.rfind(";")
    after = tail[cut + 1 :]
    expr = after.strip()
    if not expr or "*" in expr or ":=" in expr or _FOR.search(expr):
        return None  # a parenthesised copy of these would not mean the same
    col = cut + 1 + len(after) - len(after.lstrip())
    # Wrapped in parentheses to start at the expression's own column (eval refuses indent).
    part = _compile(pad + "(" + " " * (col - 1) + expr + "\n)", filename, "eval")
    if part is None:
        return None
    return _parts(prefix, filename, [(pad + tail[:cut], "exec")], (part, True))


def _parts(
    prefix: str,
    filename: str,
    sources: list[tuple[str, str]],
    last: tuple[CodeType, bool] | None = None,
) -> list[tuple[CodeType, bool]] | None:
    """``prefix`` and ``sources`` compiled (``None`` if any part does not), then ``last``."""
    out = []
    for source, mode in [(prefix, "exec"), *sources] if prefix else sources:
        part = _compile(source, filename, mode)
        if part is None:
            return None
        out.append((part, False))
    if last is not None:
        out.append(last)
    return out

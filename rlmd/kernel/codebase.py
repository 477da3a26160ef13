"""Codebase helpers bound in the REPL when the context is a ``{relpath: text}`` dict.

Standard library only. The helpers work on a private copy of the mapping, so rebinding or
mutating ``context`` does not change what they see.

Glob rules (``list_files`` and ``grep(path_glob=...)``):

* ``*`` matches within one path segment, ``?`` one character, ``[abc]`` / ``[!abc]`` a set;
* ``**`` matches across segments; ``**/`` also matches no directory at all
  (``src/**/*.py`` matches ``src/a.py`` and ``src/x/y/b.py``);
* a pattern without ``/`` is matched against the file name at any depth (``*.py``);
* a pattern ending in ``/`` matches everything under that folder (``tests/``).
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:  # importing typing costs milliseconds at every kernel start
    import re
    from typing import Any

MAX_GREP_LINE = 500
"""Longer matching lines are cut to this many characters in ``grep`` results."""


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob (rules in the module docstring) to a regex for full paths."""
    import re  # here: ``re`` (with ``enum``) is ~5 ms of every kernel start otherwise

    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                j = i + 2
                while j < n and pattern[j] == "*":
                    j += 1
                if j < n and pattern[j] == "/":
                    out.append("(?:.*/)?")
                    j += 1
                else:
                    out.append(".*")
                i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^/' if negate else ''}{body}]")
                i = j + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("(?s:" + "".join(out) + r")\Z")


def _normalise(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path.lstrip("/")


def path_matcher(pattern: str) -> Callable[[str], bool]:
    """A predicate on relative paths for ``pattern`` (rules in the module docstring)."""
    pattern = _normalise(pattern)
    if pattern.endswith("/"):
        pattern += "**"
    rx = glob_to_regex(pattern)
    if "/" in pattern:
        return lambda p: rx.match(p) is not None
    return lambda p: rx.match(p.rpartition("/")[2]) is not None


def split_lines(text: str) -> list[str]:
    """Lines as an editor numbers them: split on ``\\n`` only, no trailing empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class Codebase:
    """The files of a codebase context and the helper functions over them."""

    def __init__(self, files: dict[str, str]):
        self.files = dict(files)
        self.paths = sorted(self.files)
        self._lines: dict[str, list[str]] = {}

    def update(self, changed: dict[str, str], removed: list[str]) -> None:
        """Apply a difference: ``changed`` files (``{relpath: text}``, new or with new text)
        set, ``removed`` paths dropped. Raises ``ValueError`` (nothing changed) when a
        removed path is not a file here or a value is not a ``str``."""
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in changed.items()):
            raise ValueError("a codebase update must be a {relative_path: text} dict of str")
        missing = [p for p in removed if p not in self.files]
        if missing:
            raise ValueError(f"a codebase update removes files it does not hold: {missing[:3]}")
        added = [p for p in changed if p not in self.files]
        for p in removed:
            del self.files[p]
            self._lines.pop(p, None)
        for p, text in changed.items():
            self.files[p] = text
            self._lines.pop(p, None)
        if removed or added:
            self.paths = sorted(self.files)

    def lines(self, path: str) -> list[str]:
        cached = self._lines.get(path)
        if cached is None:
            cached = self._lines[path] = split_lines(self.files[path])
        return cached

    # -- helpers (exposed to model code through the wrappers in ``helpers``) --

    def list_files(self, pattern: str | None = None) -> list[str]:
        if pattern is None:
            return list(self.paths)
        if not isinstance(pattern, str):
            raise TypeError("list_files(pattern): pattern must be a glob string or None")
        match = path_matcher(pattern)
        found = [p for p in self.paths if match(p)]
        if not found:
            _note(
                f"list_files: no path matches {pattern!r} ({len(self.paths)} files in all; "
                "list_files() lists them)"
            )
        return found

    def resolve(self, path: str) -> str:
        if not isinstance(path, str):
            raise TypeError("read_file(path): path must be a string")
        if path in self.files:
            return path
        norm = _normalise(path)
        if norm in self.files:
            return norm
        raise FileNotFoundError(self._missing_message(path, norm))

    def _missing_message(self, path: str, norm: str) -> str:
        import difflib

        under = [p for p in self.paths if p.startswith(norm.rstrip("/") + "/")] if norm else []
        if under:
            shown = ", ".join(under[:10]) + (", ..." if len(under) > 10 else "")
            return (
                f"read_file: {path!r} is a folder, not a file; it holds {len(under)} files: {shown}"
            )
        base = norm.rpartition("/")[2]
        same_name = [p for p in self.paths if p.rpartition("/")[2] == base]
        close = difflib.get_close_matches(norm, self.paths, n=5, cutoff=0.6)
        suggestions = list(dict.fromkeys(same_name[:5] + close))[:8]
        msg = f"read_file: no file {path!r} in the codebase ({len(self.paths)} files)"
        if suggestions:
            msg += "; did you mean: " + ", ".join(suggestions)
        return msg + ". list_files() lists every path."

    def read_file(self, path: str, start: int = 1, end: int | None = None) -> str:
        real = self.resolve(path)
        lines = self.lines(real)
        total = len(lines)
        try:
            start = int(start)
            end = None if end is None else int(end)
        except (TypeError, ValueError):
            raise TypeError("read_file: start and end must be integers") from None
        if start < 1:
            start = 1
        if end is None or end > total:
            end = total
        if total and start > total:
            raise ValueError(f"read_file: start={start} is past the end of {real} ({total} lines)")
        if end < start:
            # read_file(p, 41, 40) gave '' with no hint (issue 15): say what the range means.
            _note(
                f"read_file: end={end} is before start={start}, so no line was read; "
                f"end is the last line to show (inclusive), e.g. read_file({real!r}, {start}, "
                f"{min(start + 40, total)})"
            )
            return ""
        width = max(4, len(str(end)))
        return "\n".join(f"{n:>{width}}| {lines[n - 1]}" for n in range(start, end + 1))

    def grep(
        self,
        pattern: str,
        path_glob: str | list[str] | None = None,
        max_results: int = 200,
        ignore_case: bool = False,
    ) -> list[str]:
        if not isinstance(pattern, str):
            raise TypeError("grep(pattern): pattern must be a regular expression string")
        import re

        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        try:
            rx = re.compile(pattern, flags)
        except re.error as exc:
            raise ValueError(
                f"grep: invalid regular expression {pattern!r}: {exc}. "
                "Escape special characters with re.escape() or a backslash."
            ) from None
        max_results = int(max_results)
        # A whole-file search skips files without any match; \A and \Z mean something else
        # on a whole file than on one line, so they disable the shortcut.
        prefilter = "\\A" not in pattern and "\\Z" not in pattern
        if path_glob is None:
            paths = self.paths
        elif isinstance(path_glob, list | tuple):  # grep(pattern, list_files(...)) reads naturally
            paths = [_normalise(p) for p in path_glob if isinstance(p, str)]
            unknown = [p for p in paths if p not in self.files]
            if unknown:
                raise ValueError(f"grep: unknown paths {unknown[:5]}; list_files() lists them")
        else:
            paths = self.list_files(path_glob)
        results: list[str] = []
        more = False
        for path in paths:
            text = self.files[path]
            if prefilter and rx.search(text) is None:
                continue
            for n, line in enumerate(self.lines(path), 1):
                if rx.search(line) is None:
                    continue
                if len(results) >= max_results:
                    more = True
                    break
                shown = line.rstrip("\r")
                if len(shown) > MAX_GREP_LINE:
                    shown = shown[:MAX_GREP_LINE] + "..."
                results.append(f"{path}:{n}:{shown}")
            if more:
                break
        if more:
            _note(
                f"grep: stopped after max_results={max_results} matches; "
                "pass a larger max_results or a narrower pattern/path_glob to see more"
            )
        elif not results:
            where = (
                f"the {len(paths)} files given by path_glob"
                if path_glob
                else f"all {len(paths)} files"
            )
            hint = (
                f"; grep({pattern!r}) without a path_glob searches all {len(self.paths)} files at once"
                if path_glob
                else ""
            )
            _note(f"grep: no line matches {pattern!r} in {where}{hint}")
        return results


def _note(message: str) -> None:
    """Tell the model (through the cell's stderr) why a helper came back empty or cut short:
    small models otherwise read ``[]`` as an answer."""
    import sys

    print(message, file=sys.stderr)


CODE_HELPER_DOCS = {
    "find_definition": (
        "find_definition(name) -> list[str]: where ``name`` is defined (a bare name, "
        '``"Class.method"`` or ``"module.func"``); each hit is '
        '``"path:line: kind qualname: signature"``.'
    ),
    "find_references": (
        "find_references(name, path_glob=None, max_results=200) -> list[str]: the lines that "
        'use ``name`` as a whole word, definitions left out; each hit is ``"path:line:text"``.'
    ),
    "find_subclasses": (
        "find_subclasses(name, recursive=True) -> list[str]: classes deriving from ``name`` "
        "(directly, or through other classes of the codebase), as find_definition hits."
    ),
    "outline": (
        'outline(path) -> list[str]: one file\'s definitions in order, ``"  12| def f(x):"``, '
        "indented by nesting."
    ),
    "search_symbols": (
        "search_symbols(query, kind=None, max_results=50) -> list[str]: definitions whose name "
        'contains ``query`` (case-insensitive), best first; ``kind``: "class", "function", '
        '"method", "constant", ...'
    ),
}
"""The code-intelligence helpers: answered by the host from its symbol index (the kernel
holds no parser), so they work only while a task runs."""


def _code_helper(call: Callable[[str, dict], Any], name: str) -> Callable[..., Any]:
    def helper(*args: Any, **kwargs: Any) -> Any:
        reply = call("code", {"op": name, "args": list(args), "kwargs": kwargs})
        if isinstance(reply, dict):
            if reply.get("note"):
                _note(str(reply["note"]))
            return reply.get("results")
        return reply

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = CODE_HELPER_DOCS[name]
    return helper


def helpers(cb: Codebase, call: Callable[[str, dict], Any] | None = None) -> dict[str, Any]:
    """The REPL functions ``list_files``, ``read_file`` and ``grep`` bound to ``cb``, and,
    given the kernel's host ``call``, the code-intelligence helpers of
    :data:`CODE_HELPER_DOCS`."""

    def list_files(pattern: str | None = None) -> list[str]:
        """Sorted relative paths of the codebase's files, optionally filtered by a glob.

        ``*`` stays within a folder, ``**`` crosses folders, a pattern without ``/`` matches
        file names at any depth (``"*.py"``), a pattern ending in ``/`` matches a folder's
        contents (``"src/"``).
        """
        return cb.list_files(pattern)

    def read_file(path: str, start: int = 1, end: int | None = None) -> str:
        """The text of one file with line numbers (``"  12| code"``), lines ``start`` to
        ``end`` inclusive (1-based)."""
        return cb.read_file(path, start, end)

    def grep(
        pattern: str,
        path_glob: str | list[str] | None = None,
        max_results: int = 200,
        ignore_case: bool = False,
    ) -> list[str]:
        """Search every file (or those matching the glob ``path_glob``, or the paths in a list
        given as ``path_glob``) line by line with a Python regular expression; returns
        ``"path:line:text"`` strings, at most ``max_results``."""
        return cb.grep(pattern, path_glob, max_results, ignore_case)

    found: dict[str, Any] = {"list_files": list_files, "read_file": read_file, "grep": grep}
    if call is not None:
        for name in CODE_HELPER_DOCS:
            found[name] = _code_helper(call, name)
    return found

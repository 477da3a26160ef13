"""The symbol index of a codebase context and the queries the REPL helpers answer from it.

Built once per loaded codebase (:func:`index_for` caches it on the :class:`~rlmd.context.Context`,
which a daemon workspace keeps warm across tasks) and updated incrementally: a file whose text
is unchanged is never parsed again, in this index (:meth:`CodeIndex.update`) or in a new one
built in the same process (a process-wide cache keyed by the file's text), so a workspace that
reloads its folder after an edit re-parses only the edited files.

Query results are lists of short strings a model can print, filter and count:
``"path:line: kind qualname: signature"`` for definitions, ``"path:line:text"`` (grep's form)
for references. When a query finds nothing, :attr:`CodeIndex.last_note` says why and what
was close, so a model does not take ``[]`` for an answer.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlmd.codeintel.parsers import FileSymbols, Symbol, extract, language_of

MAX_PARSE_CHARS = 2_000_000
"""Files longer than this (characters) are not parsed (generated code, bundles)."""

EAGER_MAX_CHARS = 16_000_000
"""A codebase whose indexable files hold more characters than this is not indexed before
the first turn (no map in the metadata; ~10 s per 16 M characters on one core): its index
is built when a helper first needs it."""

SYNC_MAX_CHARS = 600_000
"""Up to this many indexable characters (~0.35 s to parse: a package of a few dozen files,
such as the README demo's ``asyncio`` with 490 K; from the disk cache much less) the index is
built before the first turn, so a small codebase's map never depends on the machine's speed.
A bigger one is indexed in a background thread started when the run starts, and the first
model request does not wait for it (issue 16: the first request as fast as reading the files):
its map goes to the model with the first turn after the build ends (and in every later
task's metadata)."""

CACHE_CHARS = 256 * 1024 * 1024
"""The process-wide parse cache holds results for files totalling at most this many
characters (oldest dropped first)."""

log = logging.getLogger(__name__)

_IDENT = re.compile(r"[A-Za-z_$][\w$]*")

_cache: OrderedDict[tuple[str, str, int, int], tuple[str, FileSymbols]] = OrderedDict()
_cache_chars = 0
_cache_lock = threading.Lock()


def _cached_extract(path: str, language: str, text: str) -> tuple[FileSymbols, bool]:
    """``extract`` through the process-wide cache; ``(symbols, was_cached)``."""
    global _cache_chars
    key = (language, path, len(text), hash(text))
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] == text:
            _cache.move_to_end(key)
            return hit[1], True
    try:
        result = extract(language, text)
    except ImportError as exc:  # a grammar package is missing: the file is not indexed
        result = FileSymbols(language, (), (), f"no parser: {exc}")
    with _cache_lock:
        if key not in _cache:
            _cache[key] = (text, result)
            _cache_chars += len(text)
            while _cache_chars > CACHE_CHARS and _cache:
                _, (old, _r) = _cache.popitem(last=False)
                _cache_chars -= len(old)
    return result, False


def clear_cache() -> None:
    """Forget every cached parse (tests; memory pressure)."""
    global _cache_chars
    with _cache_lock:
        _cache.clear()
        _cache_chars = 0


@dataclass
class UpdateStats:
    """What one build or update did: files parsed anew, reused unchanged, dropped, and
    seconds taken."""

    parsed: int = 0
    reused: int = 0
    removed: int = 0
    seconds: float = 0.0


@dataclass
class CodeIndex:
    """Definitions, imports and file outlines of a ``{relative_path: text}`` codebase.

    Attributes:
        files: path → its :class:`FileSymbols` (indexed languages only).
        texts: path → text of every file (references are searched in all of them).
        last_note: why the last query came back empty or cut short, else ``None``.
        last_next: the helper call :attr:`last_note` names as the next step (``"outline(
            'lib/help.js')"``), else ``None``.
    """

    files: dict[str, FileSymbols] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    last_note: str | None = None
    last_next: str | None = None
    _by_name: dict[str, list[tuple[str, Symbol]]] | None = field(default=None, repr=False)
    _refcounts: Counter[str] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, files: Mapping[str, str]) -> CodeIndex:
        """Index ``files`` (``{relative_path: text}``)."""
        index = cls()
        index.update(files)
        return index

    # -- building -------------------------------------------------------------------------

    def update(
        self,
        files: Mapping[str, str],
        saved: Mapping[str, tuple[str, FileSymbols]] | None = None,
    ) -> UpdateStats:
        """Make the index describe ``files`` (the whole codebase as it is now): parse new and
        changed files, drop removed ones, keep the rest. ``saved`` (``{path: (text hash,
        symbols)}``, see :mod:`rlmd.codeintel.diskcache`) supplies files unchanged since a
        saved index. Returns what it did."""
        from rlmd.codeintel.diskcache import text_hash

        t0 = time.perf_counter()
        stats = UpdateStats()
        for path in [p for p in self.texts if p not in files]:
            del self.texts[path]
            self.files.pop(path, None)
            stats.removed += 1
        for path, text in files.items():
            old = self.texts.get(path)
            if old is not None and (old is text or old == text):
                stats.reused += 1
                continue
            self.texts[path] = text
            language = language_of(path)
            if language is None or len(text) > MAX_PARSE_CHARS:
                self.files.pop(path, None)
                continue
            hit = saved.get(path) if saved else None
            if hit is not None and hit[1].language == language and hit[0] == text_hash(text):
                self.files[path] = hit[1]
                stats.reused += 1
                continue
            self.files[path], cached = _cached_extract(path, language, text)
            if cached:
                stats.reused += 1
            else:
                stats.parsed += 1
        self._by_name = None
        self._refcounts = None
        stats.seconds = time.perf_counter() - t0
        return stats

    @property
    def by_name(self) -> dict[str, list[tuple[str, Symbol]]]:
        """Bare name → every ``(path, symbol)`` defining it."""
        if self._by_name is None:
            table: dict[str, list[tuple[str, Symbol]]] = {}
            for path, info in self.files.items():
                for sym in info.symbols:
                    table.setdefault(sym.name, []).append((path, sym))
            self._by_name = table
        return self._by_name

    def symbol_count(self) -> int:
        return sum(len(info.symbols) for info in self.files.values())

    def languages(self) -> Counter[str]:
        """Indexed files per language."""
        return Counter(info.language for info in self.files.values())

    def reference_counts(self) -> Counter[str]:
        """Defined name → number of files that mention it outside its definitions' files
        (a whole-word match), computed once per index state."""
        if self._refcounts is None:
            names = self.by_name
            counts: Counter[str] = Counter()
            for path, text in self.texts.items():
                own = {s.name for s in self.files[path].symbols} if path in self.files else set()
                for word in set(_IDENT.findall(text)):
                    if word in names and word not in own:
                        counts[word] += 1
            self._refcounts = counts
        return self._refcounts

    # -- queries (each sets last_note) ----------------------------------------------------

    def find_definition(self, name: str) -> list[str]:
        """Where ``name`` is defined: a bare name (``"read"``), a qualified one
        (``"TextIOWrapper.read"``) or module-qualified (``"json.dumps"``)."""
        self.last_note = self.last_next = None
        name = _check_name(name, "find_definition")
        hits = self._definitions(name)
        if not hits:
            self.last_note = (
                f"find_definition: no definition of {name!r} in the "
                f"{len(self.files)} indexed files{self._similar(name)}. "
                + self._uses_hint(name)
                + "search_symbols(part) finds names containing a part; grep(pattern) searches text."
            )
        return [_format(path, sym) for path, sym in hits]

    def _uses_hint(self, name: str) -> str:
        """For a name with no definition the index holds (a parameter, local variable or
        attribute: only module- and class-level definitions are indexed), where it is used,
        so the next step can read the code around it."""
        word = name.rpartition(".")[2]
        if word in self.by_name:  # defined, under another qualifier
            return ""
        rx = re.compile(r"(?<![\w$])" + re.escape(word) + r"(?![\w$])")
        owners = []
        for path, info in self.files.items():
            text = self.texts.get(path, "")
            if word not in text:
                continue
            lines = text.split("\n")
            for sym in info.symbols:
                if sym.kind not in ("function", "method"):
                    continue
                head = _header(lines, sym.line)
                found = rx.search(head)
                if found:
                    param = _parameter(head, found.start())
                    owners.append(f"{path}:{sym.line}: {sym.kind} {sym.qualname}({param}, ...)")
        if owners:  # named in a definition's header: a parameter of these
            shown = "\n  ".join(owners[:5]) + ("\n  ..." if len(owners) > 5 else "")
            return f"It is a parameter of {len(owners)} function(s):\n  {shown}\n"
        uses = self.find_references(name, max_results=3)
        self.last_note = self.last_next = None
        if not uses:
            return ""
        path, line = uses[0].split(":", 2)[:2]
        shown = "\n  ".join(uses)
        return (
            f"It is used (a parameter, local variable or attribute?) on lines such as:\n  "
            f"{shown}\nread_file({path!r}, {max(1, int(line) - 10)}, {int(line) + 10}) shows "
            "the code around the first. "
        )

    def _definitions(self, name: str) -> list[tuple[str, Symbol]]:
        table = self.by_name
        if "." not in name:
            hits = list(table.get(name, []))
        else:
            head, _, tail = name.rpartition(".")
            hits = []
            for path, sym in table.get(tail, []):
                qual = sym.qualname
                if qual == name or qual.endswith("." + name) or _module_matches(path, head):
                    hits.append((path, sym))
                elif (
                    sym.container
                    and head.endswith(sym.container)
                    and _module_matches(path, head[: -len(sym.container)].rstrip("."))
                ):
                    hits.append((path, sym))
        hits.sort(key=lambda ps: (_KIND_ORDER.get(ps[1].kind, 9), ps[0], ps[1].line))
        return hits

    def find_references(
        self, name: str, path_glob: str | None = None, max_results: int = 200
    ) -> list[str]:
        """Lines that use ``name`` as a whole word (its last dotted part), definition lines
        left out: ``"path:line:text"``, at most ``max_results``."""
        from rlmd.kernel.codebase import path_matcher, split_lines

        self.last_note = self.last_next = None
        name = _check_name(name, "find_references")
        word = name.rpartition(".")[2]
        rx = re.compile(r"(?<![\w$])" + re.escape(word) + r"(?![\w$])")
        defs = {(p, s.line) for p, s in self.by_name.get(word, [])}
        match = path_matcher(path_glob) if path_glob else None
        out: list[str] = []
        more = False
        for path, text in self.texts.items():
            if word not in text or (match is not None and not match(path)):
                continue
            for n, line in enumerate(split_lines(text), 1):
                if (path, n) in defs or rx.search(line) is None:
                    continue
                if len(out) >= max_results:
                    more = True
                    break
                shown = line.strip()
                out.append(f"{path}:{n}:{shown[:300]}")
            if more:
                break
        if more:
            self.last_note = (
                f"find_references: stopped after max_results={max_results}; pass a larger "
                "max_results or a path_glob to see more"
            )
        elif not out:
            where = f"files matching {path_glob!r}" if path_glob else f"all {len(self.texts)} files"
            self.last_note = (
                f"find_references: {word!r} is not used in {where} (whole words)"
                + self._defined_at(word)
            )
        return out

    def outline(self, path: str) -> list[str]:
        """The definitions of one file in order, indented by nesting: ``"  12| def f(x):"``."""
        self.last_note = self.last_next = None
        real = self._resolve(path)
        if real is None:
            return []
        info = self.files.get(real)
        if info is None:
            self.last_note = (
                f"outline: {real!r} is not in an indexed language; read_file() shows it"
            )
            return []
        width = max(4, len(str(max((s.line for s in info.symbols), default=1))))
        out = []
        for sym in info.symbols:
            depth = sym.container.count(".") + 1 if sym.container else 0
            out.append(f"{sym.line:>{width}}| {'    ' * depth}{sym.signature}")
        if not out:
            self.last_note = f"outline: {real} defines nothing" + (
                f" ({info.error})" if info.error else ""
            )
        return out

    def _resolve(self, path: str) -> str | None:
        if not isinstance(path, str):
            raise TypeError("outline(path): path must be a string")
        from rlmd.kernel.codebase import _normalise

        norm = _normalise(path)
        if norm in self.texts:
            return norm
        ends = [p for p in self.texts if p.endswith("/" + norm)]
        if len(ends) == 1:
            return ends[0]
        close = ends[:8] or difflib.get_close_matches(norm, list(self.texts), n=5, cutoff=0.6)
        self.last_note = f"outline: no file {path!r}" + (
            f"; did you mean: {', '.join(close)}" if close else "; list_files() lists every path"
        )
        return None

    def search_symbols(
        self, query: str, kind: str | None = None, max_results: int = 50
    ) -> list[str]:
        """Definitions whose name contains ``query`` (case-insensitive), exact names first,
        then prefixes, then by how many files mention them; optionally only one ``kind``
        (``"class"``, ``"function"``, ``"method"``, ``"constant"``, ...)."""
        self.last_note = self.last_next = None
        query = _check_name(query, "search_symbols")
        q = query.lower()
        refs = self.reference_counts()
        scored = []
        for name, entries in self.by_name.items():
            low = name.lower()
            if q not in low:
                continue
            rank = 0 if low == q else 1 if low.startswith(q) else 2
            for path, sym in entries:
                if kind is None or sym.kind == kind:
                    scored.append((rank, -refs.get(name, 0), path, sym.line, sym))
        scored.sort(key=lambda t: t[:4])
        max_results = int(max_results)
        if len(scored) > max_results:
            self.last_note = (
                f"search_symbols: {len(scored)} matches, showing {max_results}; pass "
                "max_results or kind= to see others"
            )
        elif not scored:
            self.last_note = f"search_symbols: no defined name contains {query!r}" + (
                f" with kind={kind!r}" if kind else ""
            )
        return [_format(path, sym) for _, _, path, _, sym in scored[:max_results]]

    def find_subclasses(self, name: str, recursive: bool = True) -> list[str]:
        """Classes (and interfaces) deriving from ``name`` (its last dotted part), directly or,
        with ``recursive``, through other classes of the codebase. Matches base names, not
        resolved types: two unrelated classes with the same name are not told apart."""
        self.last_note = self.last_next = None
        name = _check_name(name, "find_subclasses").rpartition(".")[2]
        children: dict[str, list[tuple[str, Symbol]]] = {}
        for path, info in self.files.items():
            for sym in info.symbols:
                for base in sym.bases:
                    children.setdefault(base, []).append((path, sym))
        found: list[tuple[str, Symbol]] = []
        seen: set[tuple[str, int]] = set()
        todo: list[tuple[str, str | None]] = [(name, None)]  # (class name, its file)
        while todo:
            base, where = todo.pop()
            ambiguous = where is not None and len(self.by_name.get(base, [])) > 1
            for path, sym in children.get(base, []):
                if (path, sym.line) in seen:
                    continue
                if ambiguous and where is not None and not self._sees(path, where):
                    continue  # another class of the same name (shutil.Error vs xdrlib.Error)
                seen.add((path, sym.line))
                found.append((path, sym))
                if recursive:
                    todo.append((sym.name, path))
        if not found:
            self.last_note = (
                f"find_subclasses: no class in the codebase derives from {name!r}"
                + self._defined_at(name)
            )
        found.sort(key=lambda ps: (ps[0], ps[1].line))
        return [_format(path, sym) for path, sym in found]

    def _sees(self, path: str, defining: str) -> bool:
        """Whether ``path`` can see a name defined in ``defining``: the same file, or it
        imports that file's module."""
        if path == defining:
            return True
        stem = defining.rsplit(".", 1)[0]
        if stem.endswith(("/__init__", "/index", "/mod")):
            stem = stem.rsplit("/", 1)[0]
        module = stem.rpartition("/")[2]
        info = self.files.get(path)
        return info is not None and any(
            imp == module or imp.endswith(("." + module, "/" + module)) for imp in info.imports
        )

    def _defined_at(self, name: str, most: int = 3) -> str:
        """For a query that found nothing about a name the codebase does define, where it is
        defined (at most ``most`` places) and, for a class, that ``outline`` lists its
        members: the empty result is about the name's users, not the name, and a question
        about the name itself is answered where it is defined (the 1.5B ran
        ``find_subclasses`` for a class's own methods, got ``[]`` and answered that;
        issue 15, held-out codeintel-007). ``""`` when the name is defined nowhere."""
        hits = self._definitions(name)
        if not hits:
            return ""
        shown = ", ".join(f"{p}:{s.line} ({s.kind} {s.qualname})" for p, s in hits[:most])
        more = f" and {len(hits) - most} more" if len(hits) > most else ""
        note = f"; {name!r} itself is defined at {shown}{more}"
        if hits[0][1].kind in ("class", "interface"):
            self.last_next = f"outline({hits[0][0]!r})"
            note += f"; {self.last_next} lists its methods"
        return note

    def _similar(self, name: str) -> str:
        word = name.rpartition(".")[2]
        low = word.lower()
        exact_ci = [n for n in self.by_name if n.lower() == low]
        close = exact_ci or difflib.get_close_matches(word, list(self.by_name), n=5, cutoff=0.75)
        return f"; similar names: {', '.join(close[:5])}" if close else ""


_KIND_ORDER = {"class": 0, "interface": 0, "type": 1, "function": 1, "method": 2, "constant": 3}


def _header(lines: list[str], line: int, most: int = 30) -> str:
    """A definition's header from its 1-based first ``line``: up to the line that opens its
    body (ends with ``:``, ``{`` or ``=>``), at most ``most`` lines; the parameter list in
    full (a symbol's ``signature`` is cut at 200 characters)."""
    out = []
    for text in lines[line - 1 : line - 1 + most]:
        out.append(text.strip())
        code = text.split("#", 1)[0].split("//", 1)[0].rstrip()  # a trailing comment
        if code.endswith((":", "{", "=>")):
            break
    return " ".join(out)


def _parameter(head: str, start: int) -> str:
    """The parameter starting at ``head[start]``, with its annotation and default: up to
    the next ``,`` or closing bracket outside brackets and quotes (80 characters at most)."""
    depth, quote = 0, ""
    for i in range(start, min(len(head), start + 80)):
        ch = head[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return head[start:i].strip()
            depth -= 1
        elif ch == "," and depth == 0:
            return head[start:i].strip()
    return head[start : start + 80].strip() + "..."


def _format(path: str, sym: Symbol) -> str:
    return f"{path}:{sym.line}: {sym.kind} {sym.qualname}: {sym.signature}"


def _module_matches(path: str, module: str) -> bool:
    """Whether ``path`` is the file of dotted ``module`` (``json`` → ``json/__init__.py``,
    ``json.py``, ``lib/json/index.js``...): its module path ends with the module's parts."""
    if not module:
        return False
    stem = path.rsplit(".", 1)[0]
    if stem.endswith(("/__init__", "/index", "/mod")):
        stem = stem.rsplit("/", 1)[0]
    want = module.replace(".", "/")
    return stem == want or stem.endswith("/" + want)


def _check_name(name: object, fn: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"{fn}(name): name must be a non-empty string")
    return name.strip()


_index_lock = threading.Lock()
_start_lock = threading.Lock()


def indexable_chars(files: Mapping[str, str]) -> int:
    """Characters in the files :class:`CodeIndex` would parse."""
    return sum(len(t) for p, t in files.items() if len(t) <= MAX_PARSE_CHARS and language_of(p))


def index_for(context: object) -> CodeIndex:
    """The index of a codebase ``Context``, built on first use and kept on the context
    (a workspace's context lives as long as its warm REPL).

    Raises:
        ValueError: the context is not a codebase.
    """
    if getattr(context, "kind", None) != "codebase":
        raise ValueError("code intelligence needs a codebase context (a loaded folder)")
    with _index_lock:
        index = getattr(context, "_code_index", None)
        if index is None:
            index = _build_cached(context.value, getattr(context, "source", None))  # type: ignore[attr-defined]
            context._code_index = index  # type: ignore[attr-defined]
        return index


def update_index(index: CodeIndex, files: Mapping[str, str]) -> UpdateStats:
    """:meth:`CodeIndex.update` while no query runs (a REPL helper of another task)."""
    with _index_lock:
        return index.update(files)


def index_within(context: object, seconds: float) -> CodeIndex | None:
    """The index of a codebase ``Context`` if it is built, or gets built within ``seconds``;
    ``None`` otherwise, while a background thread goes on building it (a later call, or a
    REPL helper through :func:`index_for`, finds it; one build per context).

    Raises:
        ValueError: the context is not a codebase.
    """
    index = getattr(context, "_code_index", None)
    if index is not None:
        return index
    if getattr(context, "kind", None) != "codebase":
        raise ValueError("code intelligence needs a codebase context (a loaded folder)")
    with _start_lock:
        thread = getattr(context, "_index_thread", None)
        if thread is None:
            thread = threading.Thread(
                target=_build_in_background, args=(context,), name="rlmd-code-index", daemon=True
            )
            context._index_thread = thread  # type: ignore[attr-defined]
            thread.start()
    thread.join(seconds)
    return getattr(context, "_code_index", None)


def _build_in_background(context: object) -> None:
    try:
        index_for(context)
    except Exception:  # a failed build leaves no index: helpers build (and raise) on demand
        log.warning("code index build failed", exc_info=True)


def _build_cached(files: Mapping[str, str], source: str | None) -> CodeIndex:
    """Build an index, through the on-disk index of the folder ``source`` when there is one
    (and save it again when files were parsed)."""
    if not source:
        return CodeIndex.build(files)
    from rlmd.codeintel import diskcache

    saved = diskcache.load(source)
    index = CodeIndex()
    stats = index.update(files, saved)
    if stats.parsed or stats.removed or len(saved) != len(index.files):
        diskcache.save(
            source,
            {p: (diskcache.text_hash(index.texts[p]), fs) for p, fs in index.files.items()},
        )
    return index


QUERIES = ("find_definition", "find_references", "find_subclasses", "outline", "search_symbols")
"""The :class:`CodeIndex` methods the REPL's code-intelligence helpers call."""


def answer(context: object, op: str, args: list, kwargs: dict) -> dict:
    """Serve one REPL helper call: ``{"results": list[str], "note": str | None, "next": str |
    None}`` (``next``: the helper call the note names as the next step, :attr:`CodeIndex.
    last_next`; the host keeps it for a refusal and does not pass it to the REPL).

    Raises:
        ValueError: an unknown ``op``, or a context that is not a codebase.
        TypeError: bad arguments (the message names the helper).
    """
    if op not in QUERIES:
        raise ValueError(f"unknown code-intelligence helper {op!r}")
    index = index_for(context)
    with _index_lock:  # last_note belongs to one query at a time
        try:
            results = getattr(index, op)(*args, **kwargs)
        except TypeError as exc:
            if str(exc).startswith(op):
                raise
            raise TypeError(f"{op}(): {exc}") from None
        return {"results": results, "note": index.last_note, "next": index.last_next}

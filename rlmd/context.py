"""Context loaders: what becomes the REPL variable ``context``, and the metadata the root
model sees instead of it.

A context is a string, a list, a dict, or a **codebase**: a folder loaded as a
``{relative_path: text}`` dict, honouring ``.gitignore`` files (via pathspec's gitwildmatch,
the same rules git uses), skipping binary and oversized files and counting what it skipped.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import errno
import itertools
import json
import os
import random
import re
import stat
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NotRequired, TypedDict

from rlmd import paths

DEFAULT_MAX_FILE_BYTES = 1_000_000
"""Files larger than this are skipped when loading a codebase (1 MB)."""

MAX_CODEBASE_FILES = 150_000
"""A folder with more files to read than this is refused as a codebase. The Linux kernel's
tree (~90,000 files) and a Python installation with site-packages (~32,000) fit; a home
folder or ``/`` (~400,000 on the dev VM) does not: read whole, ``/`` took the daemon to
5.3 GB and a MemoryError (session 23, user23)."""

MAX_CODEBASE_BYTES = 2 * 1024**3
"""A folder whose files to read hold more bytes than this (2 GiB, sizes on disk) is refused
as a codebase, for the same reason as :data:`MAX_CODEBASE_FILES`."""

MAX_CONTEXT_FILE_BYTES = 2 * 1024**3
"""A single context file larger than this (2 GiB) is refused rather than read into memory."""

MAX_NESTING = 500
"""Lists and dicts nested deeper than this are refused as a context: what carries it
(the metadata, the JSON to the REPL, the store) recurses per level, and at ~1,000 levels
Python's recursion limit ended the run with a bare "maximum recursion depth exceeded"."""

ALWAYS_IGNORED = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    ".venv/",
    "node_modules/",
    ".tox/",
    "*.pyc",
)
"""Ignored even without a .gitignore: VCS internals, caches, virtualenvs, dependencies. A
folder holding a ``pyvenv.cfg`` (a virtualenv under any name: ``venv/``, ``env/``...) is
skipped too; all are counted as ``skipped["ignored"]``."""
_ALWAYS_IGNORED_RX = re.compile(
    r"(?:.+/)?(?:\.git|\.hg|\.svn|__pycache__|\.venv|node_modules|\.tox)/"
    r"|(?:.+/)?[^/]*\.pyc(?:/|$)"
)
"""``ALWAYS_IGNORED`` as one expression, what ``ignore_matcher(ALWAYS_IGNORED)`` matches (a
test checks both on the same paths): pathspec is imported only for a folder with a
``.gitignore`` (~35 ms of ``rlmd run``'s start-up otherwise)."""


class ContextMeta(TypedDict):
    """What the root model is told about a context instead of its contents (see
    :meth:`Context.metadata`): kind, Python type, size; for a list or dict its items, for a
    codebase its files and a folder summary."""

    kind: str
    type: str
    chars: int
    tokens: int
    source: NotRequired[str]
    items: NotRequired[int]
    item_chars: NotRequired[list[int | str]]
    keys: NotRequired[list[str]]
    files: NotRequired[int]
    lines: NotRequired[int]
    example_path: NotRequired[str]
    tree: NotRequired[list[str]]
    map: NotRequired[list[str]]
    skipped: NotRequired[dict[str, int]]


@dataclass
class Context:
    """The run's input and what the loader learned about it.

    Attributes:
        value: the object bound to ``context`` in the REPL (str, list, dict; a codebase is a
            ``{relative_path: text}`` dict).
        kind: ``"text" | "list" | "dict" | "codebase"``.
        source: the file or folder it was loaded from, if any.
        skipped: for a codebase, files skipped by reason (``{"ignored": n, "binary": n,
            "oversized": n, "unreadable": n}``).
        stamps: for a codebase, ``{path: (size in bytes, mtime in ns, ctime in ns, inode)}``
            of each file in
            ``value`` and each file skipped as binary, as it was before being read (what
            :func:`refresh_codebase` compares).
        files_read: for a codebase, how many files this load opened and read (the others
            were unchanged since the previous load it was given).
        changes: for a codebase from :func:`refresh_codebase`, ``(changed, removed)``
            against the context it refreshed: ``{path: text}`` of the files new or changed,
            and the paths no longer there (see :func:`codebase_delta`).
    """

    value: Any
    kind: str
    source: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    stamps: dict[str, tuple[int, int, int, int]] = field(
        default_factory=dict, repr=False, compare=False
    )
    files_read: int = field(default=0, compare=False)
    changes: tuple[dict[str, str], list[str]] | None = field(
        default=None, repr=False, compare=False
    )
    _meta_cache: dict[tuple[object, int], ContextMeta] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _derived: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a child run sent to a cluster node) without the process-local caches:
        the symbol index, its build thread and the metadata cache are rebuilt there."""
        state = {k: v for k, v in self.__dict__.items() if k not in _LOCAL_CACHES}
        state["_meta_cache"] = {}
        state["_derived"] = {}
        return state

    @property
    def is_codebase(self) -> bool:
        return self.kind == "codebase"

    def chars(self) -> int:
        """Total characters of text in the context (for containers: of their items)."""
        if not self.is_codebase:
            return _chars(self.value)
        n = self._derived.get("chars")
        if n is None:
            n = self._derived["chars"] = _chars(self.value)
        return int(n)

    def metadata(self, count_tokens: Callable[[str], int], *, tree_lines: int = 30) -> ContextMeta:
        """What the root model is told about the context instead of its contents.

        Computed once per counting model and ``tree_lines``: a context's value is not changed
        once loaded, and a daemon workspace's codebase would otherwise be counted again for
        every task, on the event loop.

        Args:
            count_tokens: ``str -> int`` of the root model (a bound ``Model.count_tokens``
                is cached under the model's name).
            tree_lines: at most this many lines of folder summary for a codebase.

        Returns:
            ``{"type", "kind", "chars", "tokens", "items"?, "files"?, "tree"?, "map"?,
            "skipped"?, "source"?}`` (``map``: :func:`rlmd.codeintel.repomap.repo_map`) (a fresh dict each call); for a long string, ``tokens`` is counted
            on the text, for a container on its items' text.
        """
        owner = getattr(count_tokens, "__self__", None)
        key = (getattr(owner, "name", None) or count_tokens, tree_lines)
        cached = self._meta_cache.get(key)
        if cached is None:
            cached = self._metadata(count_tokens, tree_lines)
            if not _map_pending(self):  # a map still being built: a later task gets it
                self._meta_cache[key] = cached
        return cached.copy()

    def _metadata(self, count_tokens: Callable[[str], int], tree_lines: int) -> ContextMeta:
        meta: ContextMeta = {
            "kind": self.kind,
            "type": type(self.value).__name__,
            "chars": self.chars(),
            "tokens": context_tokens(self.value, count_tokens),
        }
        if self.source:
            meta["source"] = self.source
        if isinstance(self.value, list | dict) and not self.is_codebase:
            meta["items"] = len(self.value)
            lengths = [
                _chars(v)
                for v in (self.value.values() if isinstance(self.value, dict) else self.value)
            ]
            shown: list[int | str] = [*lengths[:20]]
            meta["item_chars"] = shown + (["..."] if len(lengths) > 20 else [])
            if isinstance(self.value, dict):
                meta["keys"] = [str(k)[:80] for k in list(self.value)[:20]]
        if isinstance(self.value, str):
            meta["lines"] = self.value.count("\n") + (not self.value.endswith("\n"))
        if self.is_codebase:
            meta["files"] = len(self.value)
            meta["example_path"] = next((p for p in self.value if not p.startswith(".")), "")
            tree = self._derived.get(("tree", tree_lines))
            if tree is None:
                tree = self._derived["tree", tree_lines] = summarise_tree(
                    list(self.value), tree_lines
                )
            meta["tree"] = list(tree)
            code_map = _code_map(self, count_tokens)
            if code_map:
                meta["map"] = code_map
            meta["skipped"] = {k: v for k, v in self.skipped.items() if v}
        return meta


_LOCAL_CACHES = ("_code_index", "_index_thread", "_meta_cache", "_folders", "_derived")


def _code_map(context: Context, count_tokens: Callable[[str], int]) -> list[str]:
    """The codebase's map from its symbol index (see :mod:`rlmd.codeintel`), ``[]`` when no
    file is in an indexed language, the codebase is too big to index before a helper needs
    it (``EAGER_MAX_CHARS``), or its index is not built yet: above ``SYNC_MAX_CHARS`` the
    build runs in a background thread and nothing waits for it (:func:`map_ready` tells the
    loop when a later turn can carry the map)."""
    from rlmd.codeintel.index import (
        EAGER_MAX_CHARS,
        SYNC_MAX_CHARS,
        index_for,
        index_within,
        indexable_chars,
    )
    from rlmd.codeintel.repomap import repo_map

    if getattr(context, "_code_index", None) is None:
        size = context._derived.get("indexable")
        if size is None:
            size = context._derived["indexable"] = indexable_chars(context.value)
        if size > EAGER_MAX_CHARS:
            return []
        if size > SYNC_MAX_CHARS:
            index = index_within(context, 0.0)  # starts the background build
            return repo_map(index, count_tokens) if index is not None else []
    return repo_map(index_for(context), count_tokens)


def map_ready(context: Context) -> bool:
    """Whether a codebase's symbol index, built in the background since its metadata was
    first asked for, is now ready (its map can go to the model)."""
    return getattr(context, "_code_index", None) is not None


def _map_pending(context: Context) -> bool:
    """Whether a background build of ``context``'s symbol index is still running."""
    thread = getattr(context, "_index_thread", None)
    return thread is not None and thread.is_alive()


def _check_nesting(value: Any, where: str, depth: int = 1) -> None:
    """Raise ``ValueError`` (naming ``where``) when ``value``, at ``depth`` in the context,
    nests lists/dicts deeper than :data:`MAX_NESTING` (walked without recursion)."""
    if not isinstance(value, list | tuple | dict):
        return
    todo = [(value, depth)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > MAX_NESTING:
            raise ValueError(
                f"{where}: lists/dicts nested more than {MAX_NESTING} levels deep; "
                "flatten it (or pass the inner parts)"
            )
        todo.extend((c, depth + 1) for c in children if isinstance(c, list | tuple | dict))


def _chars(value: Any) -> int:
    """The characters of ``value``'s strings (other leaves as ``str()``), walked without
    recursion: a JSON context nested 500 levels deep overflowed the stack here."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
        else:
            total += len(str(item))
    return total


TOKENS_FULL_COUNT_CHARS = 2_000_000
"""Up to this many characters, a context's tokens are counted over all of its text; above
it, over :data:`TOKENS_SAMPLE_SLICES` spread slices (see :func:`context_tokens`)."""
TOKENS_SAMPLE_SLICES = 1024
TOKENS_SLICE_CHARS = 1024
TOKENS_GROUP_SLICES = 256


def context_tokens(value: Any, count_tokens: Callable[[str], int]) -> int:
    """Tokens of a context's text (for containers: of their items' text, summed).

    Up to :data:`TOKENS_FULL_COUNT_CHARS` characters every string is counted. Above it the
    count is estimated from 1,024 slices of 1,024 characters, one at a seeded random offset
    in each of 1,024 equal strides of the concatenated text (a slice stays within one
    string), scaled by the total length: the cost is bounded (~1 M characters counted,
    ~60 ms with the estimate) for any size, where counting all of a 37 M-character codebase
    took ~30 s with the old per-character estimate. Error of the sampled count against the
    full one: +1.1 % on the CPython 3.11 stdlib (2,450 files, 37 M characters) and +0.01 %
    on the tests' mixed corpus (code, prose, digit tables and whitespace runs in turn), which
    the tests hold within 2 %. A context of many tiny strings is undercounted slightly
    (counted alone, each string would round up).

    Args:
        value: the context's value (str, list, dict, nested; other leaves as ``str()``).
        count_tokens: ``str -> int``.

    Returns:
        Tokens, an int >= 0.
    """
    texts = list(value.values()) if type(value) is dict else None
    if texts is not None and all(type(v) is str for v in texts):  # a codebase: no recursion
        leaves = [v for v in texts if v]
    else:
        leaves = [v for v in _leaves(value) if v]
    lengths = [len(v) for v in leaves]
    total = sum(lengths)
    if total <= TOKENS_FULL_COUNT_CHARS:
        return sum(count_tokens(v) for v in leaves)
    ends = list(itertools.accumulate(lengths))
    stride = total / TOKENS_SAMPLE_SLICES
    rng = random.Random(total)  # the same context always gets the same count
    pieces = []
    for i in range(TOKENS_SAMPLE_SLICES):
        # a random offset in each stride: evenly spread, but not in step with a layout that
        # repeats (files of four kinds in turn would alias with fixed offsets)
        offset = int((i + rng.random()) * stride)
        j = bisect.bisect_right(ends, offset)
        start = offset - (ends[j - 1] if j else 0)
        pieces.append(leaves[j][start : start + TOKENS_SLICE_CHARS])
    # Counted in groups of slices joined together: one call per 256 KiB instead of one per
    # slice (the per-call cost was most of the 0.25 s on the stdlib; a word cut at a slice's
    # edge may join its neighbour's, <0.5 % of the count).
    counted = chars = 0
    for g in range(0, len(pieces), TOKENS_GROUP_SLICES):
        group = "".join(pieces[g : g + TOKENS_GROUP_SLICES])
        counted += count_tokens(group)
        chars += len(group)
    return round(counted * total / chars)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield str(value)


def summarise_tree(paths: list[str], max_lines: int = 30) -> list[str]:
    """A short folder summary: ``"folder/ (n files)"`` lines for the top two levels, largest
    first, then top-level files; at most ``max_lines`` lines, the last saying what was cut."""
    folders: Counter[str] = Counter()
    top_files: list[str] = []
    for p in paths:
        parts = p.split("/")
        if len(parts) == 1:
            top_files.append(p)
            continue
        folders[parts[0] + "/"] += 1
        if len(parts) > 2:
            folders["/".join(parts[:2]) + "/"] += 1
    lines = [
        f"{name} ({n} files)" for name, n in sorted(folders.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    lines += sorted(top_files)
    if len(lines) > max_lines:
        cut = len(lines) - (max_lines - 1)
        lines = lines[: max_lines - 1] + [f"... {cut} more entries"]
    return lines


class LoadStopped(Exception):
    """A load was stopped through its ``stop`` event (its caller was cancelled)."""


class CodebaseTooLarge(ValueError):
    """A folder holds more files, or more bytes, than a codebase may
    (:data:`MAX_CODEBASE_FILES`, :data:`MAX_CODEBASE_BYTES`); the load stopped there."""


def load_codebase(
    root: Path,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    stop: threading.Event | None = None,
    previous: Context | None = None,
    spool: Spool | None = None,
    on_folder: Callable[[str, str, os.stat_result], None] | None = None,
    reread: Collection[str] = (),
    max_files: int | None = None,
    max_bytes: int | None = None,
) -> Context:
    """Load a folder as a codebase context.

    Walks ``root``; applies ``ALWAYS_IGNORED`` and every ``.gitignore`` found (patterns of a
    nested .gitignore apply below its folder; an ignored folder is not walked at all);
    skips virtualenvs under any name (a folder with ``pyvenv.cfg``), files over
    ``max_file_bytes`` bytes (a ``.gitignore`` over it is not applied either, and is counted
    as an ``"oversized"`` file: git's ``dir.c`` skips one of ``PATTERN_MAX_FILE_SIZE``, 100 MiB, but
    100 MB of blank lines took 17 s and 0.9 GB here, and such a file is a few MB in git), files with a NUL byte in their first 8 KiB (binary) and files
    that do not decode as UTF-8 (counted as binary). Symlinks are not followed. The rlmd
    home, the files of any store this process holds open (under any name: hard links too)
    and files named like SQLite databases are skipped without being opened (counted as
    ``"protected"``): closing a descriptor of a database the process holds drops SQLite's
    locks on it (see :func:`rlmd.paths.protect_store`).

    With ``previous`` (an earlier load of the same folder), a file whose size and
    modification time (ns) are those recorded in ``previous.stamps`` is not opened: its text
    is taken from ``previous`` (the same ``str`` object, so the symbol index knows it is
    unchanged at a glance); an unchanged file skipped as binary last time is counted as
    binary again without being opened. Unreadable and special files are examined again. A
    file whose relative path is in ``reread`` is read again whatever its stamps say (a
    change that left its size and times as they were: within the file system's time
    granularity).

    ``on_folder(path, rel, lstat)`` is called for the root (``rel`` ``""``) and for every
    folder below it that is not ignored (``rel`` ends with ``/``), before the folder is
    listed or looked into (:class:`rlmd.workspace.watch.FolderWatch` adds its watch there).

    With ``spool`` (and no ``previous``), each file's bytes go to it as the file is read
    (see :class:`Spool`).

    Returns:
        A ``Context`` of kind ``"codebase"`` whose value maps POSIX relative paths, sorted,
        to file text.

    Raises:
        NotADirectoryError: ``root`` is not a folder.
        ValueError: ``root`` lies inside the rlmd home.
        LoadStopped: ``stop`` was set (checked before every folder and file).
        CodebaseTooLarge: more than ``max_files`` files would be kept, or more than
            ``max_bytes`` bytes of them (sizes on disk; default :data:`MAX_CODEBASE_FILES`,
            :data:`MAX_CODEBASE_BYTES`); raised as soon as the walk passes either, so a
            mistaken ``/`` costs at most that much reading.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"not a folder: {root}")
    if paths.in_home(root):
        raise ValueError(f"{root} is inside the rlmd home; it holds the store, not a codebase")
    if previous is not None:
        spool = None  # unchanged files are not read: their bytes never come by
    walker = _Walker(root, max_file_bytes, stop, previous, spool, on_folder, reread)
    walker.max_files = MAX_CODEBASE_FILES if max_files is None else max_files
    walker.max_bytes = MAX_CODEBASE_BYTES if max_bytes is None else max_bytes
    walker.walk(str(root), "", os.stat(root), [])
    files: dict[str, str] = {}
    stamps: dict[str, tuple[int, int, int, int]] = {}
    for record in walker.folders.values():
        files.update(record.files)
        stamps.update(record.stamps)
    ctx = Context(
        value=dict(sorted(files.items())),
        kind="codebase",
        source=str(root),
        skipped=_total_skipped(walker.folders),
        stamps=stamps,
        files_read=walker.read,
    )
    ctx._folders = walker.folders  # type: ignore[attr-defined]
    return ctx


_SKIPPED_KEYS = ("ignored", "binary", "oversized", "unreadable", "special", "protected")


@dataclass(eq=False)
class _FolderRecord:
    """What one walk saw of one folder of a codebase: its identity, its ``.gitignore``'s
    rule, the files listed in it (text, and the stamps of those read or skipped as binary),
    what it skipped, and the folders below it that were walked. A later refresh that knows
    only some folders changed lists those again and keeps the others' records."""

    ident: tuple[int, int]  # st_dev, st_ino
    rule: Callable[[str], bool] | None
    files: dict[str, str] = field(default_factory=dict)
    stamps: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)
    subdirs: list[str] = field(default_factory=list)
    bytes: int = 0  # the sizes on disk of ``files``


def _total_skipped(folders: dict[str, _FolderRecord]) -> dict[str, int]:
    total = Counter(dict.fromkeys(_SKIPPED_KEYS, 0))
    for record in folders.values():
        total.update(record.skipped)
    return dict(total)


class _NeedWholeWalk(Exception):
    """A partial refresh met something it cannot place: the whole folder is walked."""


class _Walker:
    """One walk (or partial walk) of a codebase's folder: lists folders into
    :class:`_FolderRecord` s, reading the files whose stamps changed (see
    :func:`load_codebase`)."""

    def __init__(
        self,
        root: Path,
        max_file_bytes: int,
        stop: threading.Event | None,
        previous: Context | None,
        spool: Spool | None,
        on_folder: Callable[[str, str, os.stat_result], None] | None,
        reread: Collection[str],
    ) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.stop = stop
        self.spool = spool
        self.on_folder = on_folder
        self.reread = reread
        self.protected = paths.protected_files()
        self.old_stamps = previous.stamps if previous is not None else {}
        self.old_files = previous.value if previous is not None else {}
        self.read = 0
        self.folders: dict[str, _FolderRecord] = {}
        self.listed: set[str] = set()  # the folders this walk listed
        # files kept (and their bytes on disk) in all of ``folders``, against the caps; a
        # partial walk starts from the old totals (``slack``): it stops early only when what
        # it added alone passes a cap, and its result is checked once assembled
        self.max_files, self.max_bytes = MAX_CODEBASE_FILES, MAX_CODEBASE_BYTES
        self.kept = self.kept_bytes = 0
        self.slack_files = self.slack_bytes = 0
        self.always: tuple[str, Callable[[str], bool]] = (
            "",
            lambda path: _ALWAYS_IGNORED_RX.match(path) is not None,
        )

    def forget(self, record: _FolderRecord) -> None:
        """A record replaced or dropped: its files no longer count."""
        self.kept -= len(record.files)
        self.kept_bytes -= record.bytes

    def keep_file(self, record: _FolderRecord, size: int) -> None:
        """Count a file kept in ``record`` (``size``: bytes on disk).

        Raises:
            CodebaseTooLarge: past a cap (for a partial walk: by what it added alone).
        """
        record.bytes += size
        self.kept += 1
        self.kept_bytes += size
        if (
            self.kept - self.slack_files > self.max_files
            or self.kept_bytes - self.slack_bytes > self.max_bytes
        ):
            raise self.too_large()

    def too_large(self) -> CodebaseTooLarge:
        """The error for a codebase past a cap, with the counts so far."""
        return CodebaseTooLarge(
            f"{self.root} is too large to read as a codebase: more than "
            + (
                f"{self.max_files:,} files"
                if self.kept > self.max_files
                else f"{self.max_bytes:,} bytes"
            )
            + f" to read ({self.kept:,} files, {self.kept_bytes:,} bytes when the walk "
            "stopped); ask about a project's folder, or .gitignore what the model need not see"
        )

    def rules_above(self, rel_dir: str) -> list[tuple[str, Callable[[str], bool]]]:
        """The ``.gitignore`` rules of the folders above ``rel_dir`` (not its own), from
        their records."""
        rules = []
        parts = rel_dir.split("/")[:-1]
        for i in range(len(parts)):
            base = "/".join(parts[:i]) + "/" if i else ""
            record = self.folders.get(base)
            if record is None:
                raise _NeedWholeWalk(f"no record of {base!r} above {rel_dir!r}")
            if record.rule is not None:
                rules.append((base, record.rule))
        return rules

    def walk(
        self,
        dirpath: str,
        rel_dir: str,
        st: os.stat_result,
        rules: list[tuple[str, Callable[[str], bool]]],
        keep: Callable[[str, os.stat_result], bool] | None = None,
    ) -> None:
        """Walk the folder at ``dirpath`` (``rel_dir``: ``""`` or ending with ``/``; ``st``:
        its ``lstat``) and every folder below it, recording each in :attr:`folders`.
        ``rules``: the ``.gitignore`` rules of the folders above it. ``keep(rel_dir, st)``
        says a subfolder's record from an earlier walk is still good (not walked again).

        Raises:
            LoadStopped: ``stop`` was set.
        """
        if self.on_folder is not None and rel_dir == "":
            self.on_folder(dirpath, "", st)
        todo = [(dirpath, rel_dir, st, len(rules))]
        rules = list(rules)
        while todo:
            dirpath, rel_dir, st, depth_rules = todo.pop()
            del rules[depth_rules:]  # the rules of the folders above this one only
            subdirs = self.list_folder(dirpath, rel_dir, st, rules, keep)
            for sub in reversed(subdirs):  # depth first, in name order
                todo.append((*sub, len(rules)))

    def list_folder(
        self,
        dirpath: str,
        rel_dir: str,
        st: os.stat_result,
        rules: list[tuple[str, Callable[[str], bool]]],
        keep: Callable[[str, os.stat_result], bool] | None = None,
    ) -> list[tuple[str, str, os.stat_result]]:
        """List one folder into its record (appending its ``.gitignore`` rule to ``rules``);
        returns the subfolders to walk ``(path, rel, lstat)``, in name order."""
        stop, skipped = self.stop, Counter[str]()
        if stop is not None and stop.is_set():
            raise LoadStopped(str(self.root))
        before = self.folders.get(rel_dir)
        if before is not None:
            self.forget(before)
        record = self.folders[rel_dir] = _FolderRecord((st.st_dev, st.st_ino), None)
        self.listed.add(rel_dir)
        record.skipped = skipped
        gitignore = os.path.join(dirpath, ".gitignore")
        if _is_regular(gitignore):  # a symlinked .gitignore is not followed out of the folder
            try:
                with open(gitignore, "rb") as fh:
                    data = fh.read(self.max_file_bytes + 1)
            except OSError:
                skipped["unreadable"] += 1
            else:
                if len(data) <= self.max_file_bytes:  # else not applied (counted as a file)
                    lines = data.decode("utf-8", errors="replace").splitlines()
                    record.rule = ignore_matcher(lines)
                    rules.append((rel_dir, record.rule))
        rules = [self.always, *rules]

        def ignored(rel: str, is_dir: bool) -> bool:
            probe = rel + "/" if is_dir else rel
            for base, match in rules:
                if base and not probe.startswith(base):
                    continue
                if match(probe[len(base) :]):
                    return True
            return False

        # One scandir per folder, one lstat per entry (cached on the DirEntry): symlink,
        # identity and the change stamp all come from it (os.walk plus separate checks took
        # four calls).
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:  # a folder we may not list is passed over (and counted)
            skipped["unreadable"] += 1
            return []
        protected, old_stamps, old_files = self.protected, self.old_stamps, self.old_files
        files, stamps, reread = record.files, record.stamps, self.reread
        subdirs = []
        for entry in entries:
            if stop is not None and stop.is_set():
                raise LoadStopped(str(self.root))
            rel = rel_dir + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                skipped["unreadable"] += 1
                continue
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in protected:
                    skipped["protected"] += 1
                    continue
                if ignored(rel, True):
                    skipped["ignored"] += 1
                    continue
                if keep is not None and keep(rel + "/", st):
                    record.subdirs.append(rel + "/")
                    continue
                if self.on_folder is not None:  # before the pyvenv.cfg check: a removed one is seen
                    self.on_folder(entry.path, rel + "/", st)
                if os.path.isfile(os.path.join(entry.path, "pyvenv.cfg")):
                    skipped["ignored"] += 1  # a virtualenv under any name, too
                else:
                    subdirs.append((entry.path, rel + "/", st))
                    record.subdirs.append(rel + "/")
            elif stat.S_ISLNK(st.st_mode) or ignored(rel, False):
                skipped["ignored"] += 1
            elif (
                entry.name.lower().endswith(paths.SQLITE_SUFFIXES)
                or (st.st_dev, st.st_ino) in protected
            ):
                skipped["protected"] += 1
            elif not stat.S_ISREG(st.st_mode):  # a FIFO or device: never opened
                skipped["special"] += 1
            else:
                # taken before the read: a file changed meanwhile is seen as changed next
                # time; ctime and inode too, which no utime() forges (a file replaced by
                # another, or by a FIFO, with the old size and mtime)
                stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                if old_stamps.get(rel) == stamp and rel not in reread:
                    stamps[rel] = stamp
                    if rel in old_files:
                        files[rel] = old_files[rel]
                        self.keep_file(record, st.st_size)
                    else:  # skipped as binary last time, and unchanged since
                        skipped["binary"] += 1
                    continue
                binary = skipped["binary"]
                spool = self.spool
                text = _read_text(
                    entry.path, self.max_file_bytes, skipped, (spool, rel) if spool else None
                )
                self.read += 1
                if text is not None:
                    if old_files.get(rel) == text:  # touched, not changed: the same object
                        text = old_files[rel]
                    files[rel], stamps[rel] = text, stamp
                    self.keep_file(record, st.st_size)
                elif skipped["binary"] > binary:
                    stamps[rel] = stamp
        return subdirs


def _partial_refresh(
    context: Context,
    named: Collection[str],
    stop: threading.Event | None,
    on_folder: Callable[[str, str, os.stat_result], None] | None,
) -> Context:
    """:func:`load_codebase` of ``context``'s folder as a full walk would give it, listing
    only the folders a watch named changes in (``named``: relative paths of the entries
    changed) and walking the subtree of each folder that is new, named itself, or whose
    ``.gitignore`` changed; every other folder's record from the last walk is kept.

    Raises:
        _NeedWholeWalk: a name it cannot place (the caller walks the whole folder).
        LoadStopped, NotADirectoryError, ValueError: as :func:`load_codebase`.
    """
    old: dict[str, _FolderRecord] | None = getattr(context, "_folders", None)
    if old is None or not context.source:
        raise _NeedWholeWalk("no folder records")
    root = Path(context.source)
    st_root = os.stat(root)  # NotADirectoryError below when it is gone
    if not stat.S_ISDIR(st_root.st_mode) or old[""].ident != (st_root.st_dev, st_root.st_ino):
        raise _NeedWholeWalk("the root changed")
    relist: set[str] = set()  # folders listed again
    deep: set[str] = set()  # folders walked again with everything below them
    for name in named:
        folder, _, entry = name.rpartition("/")
        folder = folder + "/" if folder else ""
        while folder and folder not in old:  # not walked (a virtualenv, or moved): its parent
            parent, _, entry = folder[:-1].rpartition("/")
            folder = parent + "/" if parent else ""
        if entry == ".gitignore":
            deep.add(folder)
        elif entry == "pyvenv.cfg" and folder:  # whether it is walked is its parent's call
            parent = folder[:-1].rpartition("/")[0]
            parent = parent + "/" if parent else ""
            relist.add(parent)
            deep.add(folder)
        else:
            relist.add(folder)
            deep.add(folder + entry + "/")  # if it is a folder (or now is one)
    folders = dict(old)
    walker = _Walker(root, DEFAULT_MAX_FILE_BYTES, stop, context, None, on_folder, set(named))
    walker.folders = folders
    walker.kept = walker.slack_files = len(context.value)
    walker.kept_bytes = walker.slack_bytes = sum(r.bytes for r in old.values())

    def drop(rel_dir: str) -> None:
        todo = [rel_dir]
        while todo:
            record = folders.pop(todo.pop(), None)
            if record is not None:
                walker.forget(record)
                todo.extend(record.subdirs)

    def keep(rel_dir: str, st: os.stat_result) -> bool:
        record = old.get(rel_dir)
        if record is None or rel_dir in deep or record.ident != (st.st_dev, st.st_ino):
            return False
        return rel_dir in folders

    def depth(rel_dir: str) -> tuple[int, str]:
        return rel_dir.count("/"), rel_dir

    for rel_dir in sorted(relist | {d for d in deep if d in old}, key=depth):
        if rel_dir not in folders or rel_dir in walker.listed:
            continue  # dropped with a folder above it (removed, moved...), or walked already
        if stop is not None and stop.is_set():
            raise LoadStopped(str(root))
        record = folders[rel_dir]
        before = set(record.subdirs)
        path = os.path.join(root, rel_dir) if rel_dir else str(root)
        try:
            st = os.lstat(path)
        except OSError:
            raise _NeedWholeWalk(f"{rel_dir!r} is gone but its parent did not say so") from None
        if not stat.S_ISDIR(st.st_mode) or record.ident != (st.st_dev, st.st_ino):
            raise _NeedWholeWalk(f"{rel_dir!r} was replaced but its parent did not say so")
        rules = walker.rules_above(rel_dir)
        if rel_dir in deep:
            for sub in record.subdirs:
                drop(sub)
            walker.walk(path, rel_dir, st, rules)
        else:
            subs = walker.list_folder(path, rel_dir, st, rules, keep)
            for sub in before - set(folders[rel_dir].subdirs):
                drop(sub)
            for sub_path, sub_rel, sub_st in subs:
                drop(sub_rel)  # an old record under that name (replaced): walked anew
                walker.walk(sub_path, sub_rel, sub_st, list(rules))
    if walker.kept > walker.max_files or walker.kept_bytes > walker.max_bytes:
        raise walker.too_large()
    return _assemble(context, folders, walker.listed, walker.read)


def _assemble(
    context: Context, folders: dict[str, _FolderRecord], listed: set[str], read: int
) -> Context:
    """The codebase :class:`Context` of ``folders`` (the records of every folder walked:
    those in ``listed`` new, the others ``context``'s), with its :attr:`Context.changes`
    against ``context``; built from ``context``'s value, stamps and counts by changing only
    what the listed and dropped folders held, in the order a full load gives."""
    before: dict[str, _FolderRecord] = getattr(context, "_folders", {})
    gone = [r for rel, r in before.items() if folders.get(rel) is not r]
    came = [folders[rel] for rel in listed if rel in folders]
    old_files: dict[str, str] = {}
    new_files: dict[str, str] = {}
    skipped = Counter(context.skipped)
    stamps = dict(context.stamps)
    for record in gone:
        old_files.update(record.files)
        skipped.subtract(record.skipped)
        for rel in record.stamps:
            stamps.pop(rel, None)
    for record in came:
        new_files.update(record.files)
        skipped.update(record.skipped)
        stamps.update(record.stamps)
    changed = {p: t for p, t in new_files.items() if old_files.get(p) is not t}
    removed = [p for p in old_files if p not in new_files]
    old = context.value
    value = dict(old)
    if removed or any(p not in old for p in changed):
        for p in removed:
            del value[p]
        value.update(changed)
        value = dict(sorted(value.items()))
    else:
        value.update(changed)  # the same paths: their order stays
    fresh = Context(
        value=value,
        kind="codebase",
        source=context.source,
        skipped=dict(skipped),
        stamps=stamps,
        files_read=read,
        changes=(changed, removed),
    )
    fresh._folders = folders  # type: ignore[attr-defined]
    return fresh


def ignore_matcher(lines: Iterable[str]) -> Callable[[str], bool]:
    """``path -> bool``: whether git's ignore rules in ``lines`` (a ``.gitignore``) ignore
    ``path`` (POSIX, relative to the file's folder; a folder ends with ``/``), by pathspec's
    gitwildmatch patterns. Without negated (``!``) patterns, the patterns' expressions are
    joined into one, matched once per path (pathspec tries each in turn: a quarter of a
    30,000-file load); with them, pathspec's own matching decides."""
    import pathspec  # here, not at the top: see _ALWAYS_IGNORED_RX

    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    patterns = [p for p in spec.patterns if p.include is not None]
    if not patterns:
        return lambda path: False
    regexes: list[re.Pattern[str]] = [
        r for r in (getattr(p, "regex", None) for p in patterns) if isinstance(r, re.Pattern)
    ]
    flags = {r.flags for r in regexes}
    if not all(p.include for p in patterns) or len(regexes) != len(patterns) or len(flags) != 1:
        return spec.match_file
    joined = "|".join("(?:" + r.pattern.replace("(?P<ps_d>", "(?:") + ")" for r in regexes)
    rx = re.compile(joined, flags.pop())
    return lambda path: rx.match(path) is not None


def refresh_codebase(
    context: Context,
    stop: threading.Event | None = None,
    *,
    on_folder: Callable[[str, str, os.stat_result], None] | None = None,
    reread: Collection[str] = (),
    named: Collection[str] | None = None,
) -> Context | None:
    """The codebase ``context`` as its folder is now, re-reading only the files whose size
    or modification time changed (and new ones); ``None`` when nothing changed (no file
    added, removed or changed, and the counts of skipped files the same: a file touched but
    with the same text counts as unchanged, and ``context`` keeps its new stamp so it is not
    read again). The symbol index, if ``context`` has one, moves to the new
    context and is updated in place: only changed files are parsed again. ``on_folder`` and
    ``reread``: as :func:`load_codebase`'s.

    With ``named`` (the relative paths of every entry changed since ``context`` was read,
    as a :class:`rlmd.workspace.watch.FolderWatch` names them), only the folders holding
    them are listed again, with the whole subtree of a folder that is new, named, or whose
    ``.gitignore`` changed; the named files are read again whatever their stamps. The result
    is what a walk of the whole folder gives (a test holds them equal); where the names
    cannot be placed (``context`` not from :func:`load_codebase`, its root replaced, a folder
    gone that its parent did not name), the whole folder is walked.

    Blocking (walks the folder): call it in a worker thread.

    Raises:
        ValueError: ``context`` is not a codebase loaded from a folder.
        NotADirectoryError: the folder is gone.
        LoadStopped: ``stop`` was set.
        CodebaseTooLarge: the folder grew past :data:`MAX_CODEBASE_FILES` or
            :data:`MAX_CODEBASE_BYTES`.
    """
    if not context.is_codebase or not context.source:
        raise ValueError("only a codebase loaded from a folder can be refreshed")
    fresh = None
    if named is not None:
        try:
            fresh = _partial_refresh(context, named, stop, on_folder)
        except _NeedWholeWalk:
            fresh = None
        except FileNotFoundError as exc:
            raise NotADirectoryError(f"not a folder: {context.source}") from exc
        reread = {*reread, *named}
    if fresh is None:
        fresh = load_codebase(
            Path(context.source), stop=stop, previous=context, on_folder=on_folder, reread=reread
        )
    if fresh.changes is None:
        fresh.changes = codebase_delta(context.value, fresh.value)
    changed, removed = fresh.changes
    if not changed and not removed and fresh.skipped == context.skipped:
        context.stamps = fresh.stamps  # a touched file is not read again next time
        context._folders = fresh._folders  # type: ignore[attr-defined]
        return None
    _carry_derived(context, fresh)
    index = getattr(context, "_code_index", None)
    if index is not None and not _map_pending(context):
        from rlmd.codeintel.index import update_index

        update_index(index, fresh.value)  # unchanged texts are the same objects: kept
        fresh._code_index = index  # type: ignore[attr-defined]
    return fresh


def _carry_derived(old: Context, fresh: Context) -> None:
    """Give ``fresh`` (a refresh of ``old``, with its :attr:`Context.changes`) what
    ``old`` computed for its metadata, brought up to date through the changed files only:
    the total and indexable characters (sums over files), the folder summary (when the
    paths are the same). Each equals what ``fresh`` would compute itself."""
    assert fresh.changes is not None
    changed, removed = fresh.changes
    was = old.value
    replaced = {p: was[p] for p in (*removed, *(p for p in changed if p in was))}
    derived = old._derived
    if "chars" in derived:
        fresh._derived["chars"] = (
            derived["chars"] - sum(map(len, replaced.values())) + sum(map(len, changed.values()))
        )
    if "indexable" in derived:
        from rlmd.codeintel.index import indexable_chars

        fresh._derived["indexable"] = (
            derived["indexable"] - indexable_chars(replaced) + indexable_chars(changed)
        )
    if not removed and all(p in was for p in changed):  # the same paths
        for key, tree in derived.items():
            if isinstance(key, tuple) and key[0] == "tree":
                fresh._derived[key] = tree


def codebase_delta(old: dict[str, str], new: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``(changed, removed)``: the files of the codebase ``new`` that are not in ``old``
    or whose text is another object (:func:`refresh_codebase` keeps an unchanged file's
    text object), and the paths of ``old`` that ``new`` lacks. Applying them to ``old``
    gives ``new``."""
    changed = {p: t for p, t in new.items() if old.get(p) is not t}
    removed = [p for p in old if p not in new]
    return changed, removed


def _identity(path: str | Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` itself (a symlink is not followed), else ``None``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_regular(path: str) -> bool:
    """Whether ``path`` itself (a symlink is not followed) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_text(
    path: str, max_bytes: int, skipped: Counter, spool: tuple[Spool, str] | None = None
) -> str | None:
    """The text of the file at ``path``, or ``None`` (counted in ``skipped`` by reason). With
    ``spool = (spool, rel)``, the file's bytes go to ``spool`` under ``rel`` once they decoded
    (strictly: the bytes are exactly the text's UTF-8)."""
    try:
        # Not following a symlink, not blocking on a FIFO, not taking a terminal: the entry
        # was a regular file by lstat, but may have been swapped since; what is checked
        # below is the file actually opened.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        skipped["ignored" if exc.errno == errno.ELOOP else "unreadable"] += 1
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            skipped["special"] += 1
            return None
        if st.st_size > max_bytes:
            skipped["oversized"] += 1
            return None
        data = _read_upto(fd, st.st_size, max_bytes)
        if len(data) > max_bytes:  # grew after the check
            skipped["oversized"] += 1
            return None
    except OSError:
        skipped["unreadable"] += 1
        return None
    finally:
        os.close(fd)
    if b"\x00" in data[:8192]:
        skipped["binary"] += 1
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        skipped["binary"] += 1
        return None
    if spool is not None:
        spool[0].add(spool[1], data)
    return text


def _read_upto(fd: int, size: int, limit: int) -> bytes:
    """The bytes of the open file ``fd`` up to its end, at most ``limit + 1`` (one more than
    allowed shows it is over): one read of the ``size`` fstat gave, then reads of at most
    64 KiB until the end (a file that grew). ``fh.read(limit + 1)`` made a ``limit``-sized
    buffer for every file (1 MB each: ~2.5x the time of reading the stdlib's files)."""
    parts = []
    total = 0
    want = min(size, limit) + 1
    while total <= limit:
        chunk = os.read(fd, want)
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        want = min(limit + 1 - total, 1 << 16)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def load_context(source: Any = None) -> Context:
    """Turn what the user gave into a :class:`Context`.

    Args:
        source: a folder path (codebase), a file path (``.json`` → parsed, ``.jsonl`` → list
            of parsed lines, anything else → text), or a Python str/list/dict used as is.
            ``None`` gives an empty string.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a JSON/JSONL file that does not parse (with the line number), or
            lists/dicts nested more than :data:`MAX_NESTING` levels deep.
    """
    if source is None:
        return Context(value="", kind="text")
    if isinstance(source, Path):
        return _load_path(source)
    if isinstance(source, str):
        return Context(value=source, kind="text")
    if isinstance(source, dict):
        _check_nesting(source, "context")
        return Context(value=source, kind="dict")
    if isinstance(source, list | tuple):
        _check_nesting(source, "context")
        return Context(value=list(source), kind="list")
    raise TypeError(f"context must be a str, list, dict or Path, not {type(source).__name__}")


class Spool:
    """A codebase's files, as raw bytes, written on to a file while they are read: the
    run's REPL binds its ``context`` from that file as soon as the read ends, with nothing
    encoded a second time and no second copy of the codebase built (writing the stdlib's
    37 MB after the read cost 0.1-0.4 s).

    The reader thread :meth:`add` s each file's bytes; until a file is :meth:`offer` ed
    (the REPL's folder may not exist yet) they are kept, then written to it in one go and
    later files ~1 MiB at a time (one ``writev`` each: few GIL hand-overs in the reader).
    :meth:`finish` appends the index and closes the file; :meth:`discard` gives it up.
    Thread-safe; a write that fails (a full disk) gives up the spool, never the read.

    File layout: the files' bytes back to back in the order they were read, then from
    offset ``index_at`` (what :meth:`finish` returns) one line of ASCII JSON ``{"paths":
    [...], "offsets": [...], "sizes": [...]}`` in the context's order (see
    ``rlmd.kernel.serve._codebase_files``).
    """

    BATCH_BYTES = 1 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[bytes] = []  # not written yet: all of them until a file comes
        self._pending_bytes = 0
        self._file: BinaryIO | None = None
        self._opener: Callable[[], BinaryIO | None] | None = None
        self._size = 0
        self._entries: dict[str, tuple[int, int]] = {}
        self._usable = True

    def add(self, rel: str, data: bytes) -> None:
        """Take the bytes of the file ``rel`` (read, and decoded strictly as UTF-8)."""
        with self._lock:
            if not self._usable:
                return
            self._entries[rel] = (self._size, len(data))
            self._size += len(data)
            self._pending.append(data)
            self._pending_bytes += len(data)
            if self._file is None:
                self._try_open()
            elif self._pending_bytes >= self.BATCH_BYTES:
                self._flush()

    def offer(self, opener: Callable[[], BinaryIO | None]) -> None:
        """Where to write: ``opener()`` returns an empty file open for binary writing (its
        descriptor is written to directly), or ``None`` while there is none yet. It is
        tried, under the spool's lock, as each file comes and at :meth:`finish`; once it
        gives a file, the bytes kept so far are written to it. An ``OSError`` from it gives
        the spool up."""
        with self._lock:
            self._opener = opener
            self._try_open()

    def _try_open(self) -> None:
        if self._file is not None or self._opener is None or not self._usable:
            return
        try:
            self._file = self._opener()
        except OSError:
            self._usable = False
            self._close()
            return
        if self._file is not None:
            self._flush()

    def finish(self, paths: list[str]) -> int | None:
        """After the read: append the index of ``paths`` (every file of the context, in its
        order) and close the file. Returns the index's offset, or ``None`` when the spool
        cannot serve (given up, never given a file, or a path whose bytes it lacks); the file is
        closed either way. Blocking: call it in a worker thread."""
        with self._lock:
            self._try_open()
            entries = [self._entries.get(p) for p in paths]
            if self._file is None or not self._usable or None in entries:
                self._usable = False
                self._close()
                return None
            index = {
                "paths": paths,
                "offsets": [e[0] for e in entries if e is not None],
                "sizes": [e[1] for e in entries if e is not None],
            }
            self._pending.append(json.dumps(index, separators=(",", ":")).encode("ascii"))
            self._flush()
            self._close()
            return self._size if self._usable else None

    def discard(self) -> None:
        """Give the spool up: drop the kept bytes, close the file (its owner removes it)."""
        with self._lock:
            self._usable = False
            self._close()

    def _flush(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        assert self._file is not None
        try:
            _write_all(self._file.fileno(), pending)
        except (OSError, ValueError):  # full disk, or closed: the REPL binds the usual way
            self._usable = False
            self._close()

    def _close(self) -> None:
        self._pending, self._pending_bytes = [], 0
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except (OSError, ValueError):
                self._usable = False


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write ``chunks`` to ``fd`` in order, in as few ``writev`` calls as the system takes
    (the GIL is released during each)."""
    limit = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
    views = [memoryview(c) for c in chunks if c]
    while views:
        batch = views[:limit]
        done = os.writev(fd, batch)
        for i, view in enumerate(batch):  # what a short write left
            if done < len(view):
                views = [view[done:], *batch[i + 1 :], *views[limit:]]
                break
            done -= len(view)
        else:
            views = views[limit:]


class PendingLoad:
    """A path being read into a :class:`Context` in a worker thread, started before anyone
    awaits it: ``rlmd run`` starts reading the codebase first thing, so the reads overlap
    its own start-up (imports, the store, the kernel's start). Pass it where a context
    goes (:func:`load_context_async`, :func:`rlmd.engine.run_task`); cancelling the awaiting
    task stops the read within one file. A thread that nobody awaits is a daemon: it does
    not hold up the process's exit.

    With ``spool=True`` a codebase's files also go to :attr:`spool` as they are read (given
    up if the read fails); whoever takes the load offers it the REPL's file, or
    discards it."""

    def __init__(self, path: Path, *, spool: bool = False) -> None:
        self.path = path
        self.stop = threading.Event()
        self.spool = Spool() if spool else None
        self._future: concurrent.futures.Future[Context] = concurrent.futures.Future()
        threading.Thread(target=self._run, name="rlmd-context-load", daemon=True).start()

    def _run(self) -> None:
        # Running from here on: cancelling an awaiting task no longer cancels the future
        # (``asyncio.wrap_future`` would), which then could not take the load's outcome.
        if not self._future.set_running_or_notify_cancel():
            return  # cancelled before the thread ran
        try:
            self._future.set_result(_load_path(self.path, self.stop, self.spool))
        except BaseException as exc:  # handed to whoever awaits the load
            if self.spool is not None:
                self.spool.discard()
            self._future.set_exception(exc)

    async def result(self) -> Context:
        """The loaded context. Raises what :func:`load_context` raises, or
        :class:`LoadStopped` after :attr:`stop` was set."""
        import asyncio  # not at the top: `rlmd run` starts a load before importing asyncio

        try:
            return await asyncio.wrap_future(self._future)
        except asyncio.CancelledError:
            self.stop.set()
            raise


async def load_context_async(source: Any = None, *, keep_spool: bool = False) -> Context:
    """:func:`load_context` without blocking the event loop: a path is read in a worker
    thread (a :class:`PendingLoad` is awaited); cancelling the awaiting task stops a
    codebase walk within one file (so SIGTERM acts at once, and the thread does not hold up
    the loop's shutdown). A :class:`PendingLoad`'s spool is discarded once the load ends,
    unless ``keep_spool`` (its taker uses it). Raises what :func:`load_context` raises."""
    import asyncio

    if isinstance(source, PendingLoad):
        try:
            return await source.result()
        finally:
            if source.spool is not None and not keep_spool:
                source.spool.discard()
    if not isinstance(source, Path):
        return load_context(source)
    stop = threading.Event()
    try:
        return await asyncio.to_thread(_load_path, source, stop)
    except asyncio.CancelledError:
        stop.set()
        raise


def _load_path(
    path: Path, stop: threading.Event | None = None, spool: Spool | None = None
) -> Context:
    path = path.expanduser()
    if path.is_dir():
        return load_codebase(path, stop=stop, spool=spool)
    if spool is not None:
        spool.discard()  # one file: the usual context file, if large
    if not path.exists():
        raise FileNotFoundError(f"context path does not exist: {path}")
    if not path.is_file():
        raise ValueError(f"context path is not a regular file or folder: {path}")
    if paths.in_home(path):
        raise ValueError(f"context file {path} is inside the rlmd home; it is not read")
    if _identity(path.resolve()) in paths.protected_files():
        raise ValueError(f"context file {path} is a file of the rlmd store; it is not read")
    with path.open("rb") as fh:
        if fh.read(16) == b"SQLite format 3\x00":
            raise ValueError(
                f"context file {path} is a SQLite database; export what the question needs "
                "as text, JSON or JSONL"
            )
    if path.stat().st_size > MAX_CONTEXT_FILE_BYTES:
        raise ValueError(
            f"context file is {path.stat().st_size:,} bytes; the limit is {MAX_CONTEXT_FILE_BYTES:,} "
            "(split it, or load it yourself and pass the pieces as a list)"
        )
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".json", ".jsonl"):
        text = text.removeprefix("\ufeff")  # a byte-order mark (Windows editors), not JSON
    if path.suffix == ".json":
        try:
            value = json.loads(text)
        except ValueError as exc:  # also an integer of more than 4,300 digits
            raise ValueError(f"{path}: not valid JSON: {exc}") from exc
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deeply to load") from None
        _check_nesting(value, str(path))
        kind = "dict" if isinstance(value, dict) else "list" if isinstance(value, list) else "text"
        return Context(value=value if kind != "text" else str(value), kind=kind, source=str(path))
    if path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as exc:  # also an integer of more than 4,300 digits
                    raise ValueError(f"{path}:{n}: not valid JSON: {exc}") from exc
                except RecursionError:
                    raise ValueError(f"{path}:{n}: JSON nested too deeply to load") from None
                _check_nesting(items[-1], f"{path}:{n}", depth=2)  # in the lines' list
        return Context(value=items, kind="list", source=str(path))
    return Context(value=text, kind="text", source=str(path))

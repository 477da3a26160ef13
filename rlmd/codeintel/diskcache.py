"""The symbol index on disk, so a new process (another ``rlmd run``, a restarted daemon)
re-parses only the files that changed since the last index of the same folder.

One JSON file per codebase folder under ``<rlmd home>/cache/codeintel/`` (the rlmd home is
hidden from sandboxes), holding per file a hash of its text and its :class:`FileSymbols`.
A file that cannot be read or does not match the format is ignored (the index is rebuilt);
writing is atomic (a temporary file renamed over the old one).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from rlmd.codeintel.parsers import FileSymbols, Symbol

FORMAT = 1


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def cache_file(source: str) -> Path:
    """Where the index of the folder ``source`` is kept."""
    from rlmd import paths

    # fsencode: a folder name that is not UTF-8 (b"bad\xff" decodes to "bad\udcff") stopped
    # every run on it with "'utf-8' codec can't encode character '\udcff'"
    key = hashlib.sha256(os.fsencode(os.path.abspath(source))).hexdigest()[:32]
    return paths.home() / "cache" / "codeintel" / f"{key}.json"


def load(source: str) -> dict[str, tuple[str, FileSymbols]]:
    """``{path: (text hash, symbols)}`` saved for ``source``; ``{}`` when there is none."""
    try:
        data = json.loads(cache_file(source).read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or data.get("source") != os.path.abspath(source):
            return {}
        return {
            path: (
                h,
                FileSymbols(
                    lang,
                    tuple(Symbol(s[0], s[1], s[2], s[3], s[4], s[5], tuple(s[6])) for s in syms),
                    tuple(imports),
                    error,
                ),
            )
            for path, (h, lang, syms, imports, error) in data["files"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}


def save(source: str, files: dict[str, tuple[str, FileSymbols]]) -> None:
    """Write ``{path: (text hash, symbols)}`` for ``source`` (errors are ignored: the cache
    only saves time)."""
    target = cache_file(source)
    body = {
        "format": FORMAT,
        "source": os.path.abspath(source),
        "files": {
            path: [h, fs.language, [list(s) for s in fs.symbols], list(fs.imports), fs.error]
            for path, (h, fs) in files.items()
        },
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(body, fh, separators=(",", ":"))
        os.replace(tmp, target)
    except OSError:
        return

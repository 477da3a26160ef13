"""Code intelligence: indexing the CPython standard library, and the queries over it.

Run: ``.venv/bin/python bench/codeintel_index.py [--folder DIR] [--reps 3]`` (about a minute on
2 cores). Prints a table and writes ``bench/out/codeintel_index.json``; exits non-zero when a
target is missed.

What is measured, in this process (the index lives in the daemon's process too):

* **cold build**: :class:`rlmd.codeintel.index.CodeIndex` over every file, the parse cache
  cleared first (``ast`` for Python, tree-sitter for the C files);
* **warm build**: a new index over the same texts (what a workspace that reloads its folder
  pays: unchanged files come from the process-wide cache);
* **from disk**: the index of the same folder in a new process (the in-memory cache cleared,
  the on-disk index of :mod:`rlmd.codeintel.diskcache` read: every file hashed, none parsed);
* **one-file update**: :meth:`CodeIndex.update` after one file changed;
* **map**: the repo map for the root model's metadata (reference counts included);
* **queries**: ``find_definition`` / ``find_subclasses`` / ``search_symbols`` medians;
* **floor**: ``ast.parse`` of every Python file and nothing else (any Python indexer's cost).

The folder defaults to this interpreter's standard library without ``test/``, ``idlelib``'s
tests, ``site-packages`` and ``__pycache__`` (CPython 3.11: about 700 files, 11 MB).
**Targets** (2 shared cores): cold build <= 20 s and <= 3x the floor; warm build <= 1 s;
from disk <= 3 s; one-file update <= 0.5 s; map <= 3 s; each query median <= 50 ms.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlmd.codeintel import index as codeindex  # noqa: E402
from rlmd.codeintel.repomap import repo_map  # noqa: E402

SKIP = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
TARGETS = {
    "cold_s": 20.0,
    "cold_vs_floor": 3.0,
    "warm_s": 1.0,
    "disk_s": 3.0,
    "update_s": 0.5,
    "map_s": 3.0,
    "query_ms": 50.0,
}


def read_stdlib(folder: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP)
        for name in sorted(filenames):
            if not name.endswith((".py", ".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, encoding="utf-8") as fh:
                    files[os.path.relpath(path, folder)] = fh.read()
            except (OSError, UnicodeDecodeError):
                continue
    return files


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    files = read_stdlib(args.folder)
    chars = sum(map(len, files.values()))
    print(f"{len(files)} files, {chars / 1e6:.1f} M characters from {args.folder}")
    print(f"load average: {os.getloadavg()}")

    def floor() -> None:
        for path, text in files.items():
            if path.endswith(".py"):
                try:
                    ast.parse(text)
                except SyntaxError:
                    pass

    floors, colds, warms = [], [], []
    ix = None
    for _ in range(args.reps):
        floors.append(timed(floor)[0])
        codeindex.clear_cache()
        t, ix = timed(lambda: codeindex.CodeIndex.build(files))
        colds.append(t)
        warms.append(timed(lambda: codeindex.CodeIndex.build(files))[0])
    assert isinstance(ix, codeindex.CodeIndex)
    with tempfile.TemporaryDirectory() as home:
        os.environ["RLMD_HOME"] = home
        source = str(args.folder)
        codeindex._build_cached(files, source)  # writes the on-disk index
        codeindex.clear_cache()
        disk_t, from_disk = timed(lambda: codeindex._build_cached(files, source))
        assert isinstance(from_disk, codeindex.CodeIndex)
        assert from_disk.symbol_count() == ix.symbol_count()
    some = next(p for p in sorted(files) if p.endswith(".py") and len(files[p]) > 2000)
    changed = dict(files)
    changed[some] = files[some] + "\n\ndef _bench_added():\n    return 1\n"
    update_t, stats = timed(lambda: ix.update(changed))
    assert stats.parsed == 1 and ix.find_definition("_bench_added"), stats
    map_t, lines = timed(lambda: repo_map(ix, lambda s: len(s) // 4 + 1, 400))

    queries = {
        "find_definition": lambda: ix.find_definition("TextIOWrapper"),
        "find_subclasses": lambda: ix.find_subclasses("OSError"),
        "search_symbols": lambda: ix.search_symbols("encode"),
    }
    query_ms = {}
    for name, fn in queries.items():
        runs = [timed(fn)[0] * 1000 for _ in range(7)]
        query_ms[name] = statistics.median(runs)

    result = {
        "files": len(files),
        "chars": chars,
        "symbols": ix.symbol_count(),
        "languages": dict(ix.languages()),
        "floor_s": statistics.median(floors),
        "cold_s": statistics.median(colds),
        "warm_s": statistics.median(warms),
        "disk_s": disk_t,
        "update_s": update_t,
        "map_s": map_t,
        "map_lines": len(lines),
        "query_ms": query_ms,
        "load": os.getloadavg(),
        "python": sys.version.split()[0],
    }
    result["cold_vs_floor"] = result["cold_s"] / result["floor_s"]
    checks = {
        "cold_s": result["cold_s"] <= TARGETS["cold_s"],
        "cold_vs_floor": result["cold_vs_floor"] <= TARGETS["cold_vs_floor"],
        "warm_s": result["warm_s"] <= TARGETS["warm_s"],
        "disk_s": result["disk_s"] <= TARGETS["disk_s"],
        "update_s": result["update_s"] <= TARGETS["update_s"],
        "map_s": result["map_s"] <= TARGETS["map_s"],
        "query_ms": max(query_ms.values()) <= TARGETS["query_ms"],
    }
    result["targets"] = TARGETS
    result["met"] = checks
    print(f"symbols: {result['symbols']:,} in {result['languages']}")
    print(f"{'measure':<16}{'value':>12}{'target':>10}  met")
    for key in ("cold_s", "cold_vs_floor", "warm_s", "disk_s", "update_s", "map_s"):
        print(f"{key:<16}{result[key]:>12.3f}{TARGETS[key]:>10}  {checks[key]}")
    for name, ms in query_ms.items():
        print(
            f"{name + ' ms':<16}{ms:>12.2f}{TARGETS['query_ms']:>10}  {ms <= TARGETS['query_ms']}"
        )
    print(f"floor (ast.parse only): {result['floor_s']:.3f} s")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "codeintel_index.json").write_text(json.dumps(result, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

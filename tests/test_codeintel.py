"""Code intelligence: per-language symbol extraction, the index's queries and incremental
updates, the repo map, and the REPL helpers end to end (a scripted model calling them in the
real subprocess REPL over a loaded folder)."""

from __future__ import annotations

import pytest
from helpers.scripted import last_user, repl, scripted_registry, turn_of

from rlmd.codeintel import index as codeindex
from rlmd.codeintel.index import CodeIndex, index_for
from rlmd.codeintel.parsers import extract, language_of, supported_languages
from rlmd.codeintel.repomap import repo_map
from rlmd.context import load_codebase, map_ready
from rlmd.engine import Budget, RunConfig, run_task

PY_BASE = '''\
"""A small package."""
import os
from .util import helper

DEFAULT_LIMIT = 10


class Shape:
    sides = 0

    def area(self, scale=1.5):
        return 0


class Square(Shape):
    def area(self, scale=2):
        return helper(scale)


def build(kind: str,
          limit=DEFAULT_LIMIT):
    # a comment inside
    return Square()
'''

PY_UTIL = """\
from pkg.base import Square


class Tiny(Square):
    pass


def helper(x):
    return Square() if x else None
"""

FILES = {
    "pkg/base.py": PY_BASE,
    "pkg/util.py": PY_UTIL,
    "web/app.js": "import {x} from './lib.js';\nclass Widget extends Base {\n  render() { return 1; }\n}\nfunction mount(el) { return new Widget(); }\n",
    "web/types.ts": "export interface Store { get(k: string): number }\nexport class MemStore implements Store {\n  get(k: string) { return 1 }\n}\n",
    "srv/main.go": 'package main\n\nimport "fmt"\n\ntype Server struct{}\n\nfunc (s *Server) Serve() {}\n\nfunc main() { fmt.Println() }\n',
    "core/lib.rs": "use std::io;\npub struct Engine;\nimpl Engine {\n    pub fn start(&self) {}\n}\npub fn run() {}\ntrait Plugin {}\n",
    "java/App.java": "import java.util.List;\npublic class App extends Base implements Runnable {\n  public void run() {}\n}\n",
    "native/io.c": "#include <stdio.h>\nstruct buffer { int n; };\nint read_all(int fd) {\n  return fd;\n}\n",
    "native/gfx.cpp": "#include <vector>\nclass Canvas : public Surface {\n public:\n  void draw();\n};\nvoid Canvas::draw() {}\n",
    "README.md": "Shape and Square are documented here.\n",
}


def names(fs) -> set[tuple[str, str]]:
    return {(s.kind, s.qualname) for s in fs.symbols}


def test_python_symbols_come_from_ast_with_signatures_bases_and_imports():
    fs = extract("python", PY_BASE)
    assert fs.error is None
    assert names(fs) == {
        ("constant", "DEFAULT_LIMIT"),
        ("class", "Shape"),
        ("variable", "Shape.sides"),
        ("method", "Shape.area"),
        ("class", "Square"),
        ("method", "Square.area"),
        ("function", "build"),
    }
    by = {s.qualname: s for s in fs.symbols}
    assert by["Square"].bases == ("Shape",)
    assert by["Square.area"].signature == "def area(self, scale=2):"
    # a multi-line header is joined; the comment line after it is not part of it
    assert by["build"].signature == "def build(kind: str, limit=DEFAULT_LIMIT):"
    assert (by["Shape"].line, by["Shape"].end_line) == (8, 12)
    assert fs.imports == ("os", ".util")


def test_a_python_file_that_does_not_parse_has_no_symbols_and_says_why():
    fs = extract("python", "def broken(:\n")
    assert fs.symbols == () and fs.error is not None and "SyntaxError" in fs.error


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("web/app.js", {("class", "Widget"), ("method", "Widget.render"), ("function", "mount")}),
        ("web/types.ts", {("interface", "Store"), ("class", "MemStore")}),
        ("srv/main.go", {("type", "Server"), ("method", "Serve"), ("function", "main")}),
        ("core/lib.rs", {("class", "Engine"), ("method", "start"), ("function", "run")}),
        ("java/App.java", {("class", "App"), ("method", "App.run")}),
        ("native/io.c", {("class", "buffer"), ("function", "read_all")}),
        ("native/gfx.cpp", {("class", "Canvas"), ("method", "draw")}),
    ],
)
def test_other_languages_come_from_tree_sitter_tags(path, expected):
    language = language_of(path)
    assert language in supported_languages()
    assert expected <= names(extract(language, FILES[path]))


def test_class_bases_are_read_for_other_languages_too():
    bases = {
        s.name: s.bases
        for p in ("web/app.js", "web/types.ts", "java/App.java", "native/gfx.cpp")
        for s in extract(language_of(p), FILES[p]).symbols  # type: ignore[arg-type]
    }
    assert bases["Widget"] == ("Base",)
    assert bases["MemStore"] == ("Store",)
    assert bases["App"] == ("Base", "Runnable")
    assert bases["Canvas"] == ("Surface",)


def test_unindexed_files_have_no_language():
    assert language_of("README.md") is None and language_of("Makefile") is None
    assert language_of("a/b.PY") == "python"


def test_find_definition_by_bare_qualified_and_module_name():
    ix = CodeIndex.build(FILES)
    assert ix.find_definition("Square") == ["pkg/base.py:15: class Square: class Square(Shape):"]
    # both areas, each with its signature
    areas = ix.find_definition("area")
    assert [a.split(":")[0:2] for a in areas] == [["pkg/base.py", "11"], ["pkg/base.py", "16"]]
    assert ix.find_definition("Square.area") == [
        "pkg/base.py:16: method Square.area: def area(self, scale=2):"
    ]
    assert ix.find_definition("pkg.util.helper") == [
        "pkg/util.py:8: function helper: def helper(x):"
    ]
    assert ix.find_definition("other.helper") == []
    assert ix.last_note is not None and "no definition of 'other.helper'" in ix.last_note


def test_find_definition_of_a_parameter_names_the_functions_taking_it():
    ix = CodeIndex.build(FILES)
    assert ix.find_definition("scale") == []  # a parameter: not a module/class definition
    note = ix.last_note or ""
    assert "no definition of 'scale'" in note and "a parameter of 2 function(s)" in note
    assert "pkg/base.py:11: method Shape.area(scale=1.5, ...)" in note
    assert "pkg/base.py:16: method Square.area(scale=2, ...)" in note
    # found past the 200 characters a signature keeps, and across lines
    many = ", ".join(f"p{i}: int = {i}" for i in range(40))
    long = CodeIndex.build(
        {
            "l.py": f"def g({many},\n      last: dict[str, int] = {{'a': 1, 'b': 2}}) -> None:\n    pass\n"
        }
    )
    assert long.find_definition("last") == []
    assert "l.py:1: function g(last: dict[str, int] = {'a': 1, 'b': 2}, ...)" in (
        long.last_note or ""
    )
    # a local or attribute (in no signature): where it is used, and how to read around it
    local = CodeIndex.build({"m.py": "def f():  # sums\n    total = 0\n    return total\n"})
    assert local.find_definition("total") == []
    note = local.last_note or ""
    assert "parameter, local variable" in note and "m.py:2:total = 0" in note
    assert "read_file('m.py', 1, 12)" in note
    # a name defined elsewhere, or used nowhere, gets no such hint
    for name in ("other.helper", "nowhere_at_all"):
        ix.find_definition(name)
        assert "parameter" not in (ix.last_note or "")


def test_find_definition_of_a_missing_name_suggests_close_ones():
    ix = CodeIndex.build(FILES)
    assert ix.find_definition("square") == []
    assert ix.last_note is not None and "similar names: Square" in ix.last_note


def test_find_references_lists_uses_and_leaves_definitions_out():
    ix = CodeIndex.build(FILES)
    refs = ix.find_references("Square")
    assert "pkg/base.py:15:class Square(Shape):" not in refs
    assert set(refs) == {
        "pkg/base.py:23:return Square()",
        "pkg/util.py:1:from pkg.base import Square",
        "pkg/util.py:4:class Tiny(Square):",
        "pkg/util.py:9:return Square() if x else None",
        "README.md:1:Shape and Square are documented here.",
    }
    assert ix.find_references("Square", path_glob="pkg/util.py", max_results=1) == [
        "pkg/util.py:1:from pkg.base import Square"
    ]
    assert ix.last_note is not None and "max_results=1" in ix.last_note
    assert ix.find_references("Squar") == []  # whole words only
    assert ix.last_note is not None and "is not used" in ix.last_note


def test_find_subclasses_follows_the_hierarchy():
    ix = CodeIndex.build(FILES)
    found = [h.split(": ")[1] for h in ix.find_subclasses("Shape")]
    assert found == ["class Square", "class Tiny"]
    assert [h.split(": ")[1] for h in ix.find_subclasses("Shape", recursive=False)] == [
        "class Square"
    ]
    assert ix.find_subclasses("Nothing") == [] and ix.last_note is not None


def test_an_empty_result_about_a_defined_name_says_where_it_is_defined():
    """find_subclasses / find_references that find nothing about a name the codebase does
    define say where it is defined, and for a class that outline lists its members (the 1.5B
    ran find_subclasses for a class's own methods, got [] and answered that: session 10)."""
    ix = CodeIndex.build(FILES)
    assert ix.find_subclasses("Tiny") == []
    assert ix.last_note == (
        "find_subclasses: no class in the codebase derives from 'Tiny'; 'Tiny' itself is "
        "defined at pkg/util.py:4 (class Tiny); outline('pkg/util.py') lists its methods"
    )
    assert ix.last_next == "outline('pkg/util.py')"  # the note's next step, for a refusal
    assert ix.find_subclasses("pkg.util.Tiny") == []  # a dotted name: its last part
    assert ix.last_note is not None and "'Tiny' itself is defined at pkg/util.py:4" in ix.last_note
    # a function has no members to outline; a name defined twice shows both places
    assert ix.find_references("mount") == []
    assert ix.last_note == (
        "find_references: 'mount' is not used in all 10 files (whole words); 'mount' itself "
        "is defined at web/app.js:5 (function mount)"
    )
    assert ix.last_next is None  # a function: no next step
    assert ix.find_subclasses("Square", recursive=False) != []
    assert ix.find_subclasses("area") == []
    assert ix.last_note == (
        "find_subclasses: no class in the codebase derives from 'area'; 'area' itself is "
        "defined at pkg/base.py:11 (method Shape.area), pkg/base.py:16 (method Square.area)"
    )
    # a name defined nowhere: the note as before
    assert ix.find_subclasses("Nothing") == []
    assert ix.last_note == "find_subclasses: no class in the codebase derives from 'Nothing'"
    assert ix.last_next is None


def test_find_subclasses_does_not_cross_to_an_unrelated_class_of_the_same_name():
    files = {
        "a.py": "class Error(OSError): pass\nclass AErr(Error): pass\n",
        "b.py": "class Error(Exception): pass\nclass BErr(Error): pass\n",
        "c.py": "from a import Error\nclass CErr(Error): pass\n",
    }
    found = {h.split(": ")[1] for h in CodeIndex.build(files).find_subclasses("OSError")}
    assert found == {"class Error", "class AErr", "class CErr"}


def test_outline_lists_a_files_definitions_indented():
    ix = CodeIndex.build(FILES)
    assert ix.outline("pkg/util.py") == ["   4| class Tiny(Square):", "   8| def helper(x):"]
    # a unique end of a path is enough
    assert ix.outline("base.py")[:2] == ["   5| DEFAULT_LIMIT = 10", "   8| class Shape:"]
    assert "  11|     def area(self, scale=1.5):" in ix.outline("pkg/base.py")
    assert ix.outline("README.md") == []
    assert ix.last_note is not None and "not in an indexed language" in ix.last_note
    assert ix.outline("pkg/nope.py") == []
    assert ix.last_note is not None and "did you mean" in ix.last_note


def test_search_symbols_ranks_exact_then_prefix_then_substring_and_filters_kind():
    files = {
        "m.py": "def load(): pass\ndef load_all(): pass\ndef reload(): pass\nclass Loader: pass\n"
    }
    ix = CodeIndex.build(files)
    hits = [h.split(": ")[1] for h in ix.search_symbols("load")]
    assert hits[0] == "function load"
    assert set(hits[1:3]) == {"function load_all", "class Loader"}
    assert hits[3] == "function reload"
    assert [h.split(": ")[1] for h in ix.search_symbols("load", kind="class")] == ["class Loader"]
    assert ix.search_symbols("zzz") == [] and ix.last_note is not None


def test_update_parses_only_changed_files_and_drops_removed_ones():
    codeindex.clear_cache()
    ix = CodeIndex()
    first = ix.update(FILES)
    assert first.parsed == 9 and first.reused == 0  # README.md is not parsed
    changed = dict(FILES)
    changed["pkg/util.py"] = PY_UTIL + "\ndef extra():\n    pass\n"
    del changed["web/app.js"]
    second = ix.update(changed)
    assert (second.parsed, second.removed) == (1, 1)
    assert ix.find_definition("extra") and ix.find_definition("Widget") == []
    # a new index over the same texts reuses the process-wide cache: nothing parsed again
    assert CodeIndex().update(changed).parsed == 0


def test_the_index_is_built_once_per_codebase_context(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    pass\n")
    ctx = load_codebase(tmp_path)
    assert index_for(ctx) is index_for(ctx)
    with pytest.raises(ValueError, match="codebase"):
        index_for(load_codebase(tmp_path).__class__(value="x", kind="text"))


def test_answer_serves_the_helpers_and_rejects_unknown_ones(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    pass\n")
    ctx = load_codebase(tmp_path)
    assert codeindex.answer(ctx, "find_definition", ["f"], {}) == {
        "results": ["m.py:1: function f: def f():"],
        "note": None,
        "next": None,
    }
    with pytest.raises(ValueError, match="unknown"):
        codeindex.answer(ctx, "exec", [], {})
    with pytest.raises(TypeError, match="find_definition"):
        codeindex.answer(ctx, "find_definition", [], {"nope": 1})


def count_words(text: str) -> int:
    return len(text.split())


def test_repo_map_has_the_summary_most_used_definitions_and_biggest_files_within_budget():
    ix = CodeIndex.build(FILES)
    lines = repo_map(ix, count_words, budget=200)
    assert lines[0].startswith("Indexed: ") and "python" in lines[0]
    assert "Most-used definitions (files mentioning them):" in lines
    assert any(line.strip().startswith("class Square (pkg/base.py:15)") for line in lines)
    assert "Biggest files (lines; top-level definitions):" in lines
    assert any(line.strip().startswith("pkg/base.py (") for line in lines)
    for budget in (20, 40, 60):
        cut = repo_map(ix, count_words, budget=budget)
        assert sum(count_words(x) + 1 for x in cut) <= budget + 1  # +1 per line joined
        assert len(cut) <= len(lines)
    assert repo_map(ix, count_words, budget=5) == []  # not even the summary fits
    assert repo_map(CodeIndex.build({"README.md": "x"}), count_words) == []


def config(**kw) -> RunConfig:
    return RunConfig(
        root_model="root", sub_model="sub", budget=Budget(**kw.pop("budget", {})), **kw
    )


async def test_the_helpers_answer_in_the_repl_and_the_map_reaches_the_model(tmp_path):
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    seen: list[list[dict]] = []

    def root(messages):
        seen.append(messages)
        if turn_of(messages) == 0:
            return repl(
                "d = find_definition('Square')\nprint(d)\n"
                "print(len(find_references('Square')))\n"
                "print(find_subclasses('Base'))\n"
                "print(outline('srv/main.go'))\n"
                "print(search_symbols('eng'))\n"
                "print(find_definition('Nope'))"
            )
        return repl("FINAL(d[0].split(':')[0])")

    registry = scripted_registry(root=root, sub=root)
    try:
        result = await run_task(
            "Where is Square defined?", tmp_path, config(), get_model=registry.get
        )
    finally:
        await registry.aclose()
    assert (result.status, result.answer, result.answer_source) == (
        "completed",
        "pkg/base.py",
        "final",
    )
    first_user = seen[0][1]["content"]
    assert "Code map (from the symbol index):" in first_user
    assert "find_definition(name)" in seen[0][0]["content"]  # documented in the system prompt
    out = last_user(seen[1])
    assert "pkg/base.py:15: class Square: class Square(Shape):" in out
    assert "\n5\n" in out
    assert "web/app.js:2: class Widget" in out and "java/App.java:2: class App" in out
    assert "type Server struct{}" in out
    assert "core/lib.rs:2: class Engine" in out
    # the empty result comes with the index's note on stderr
    assert "find_definition: no definition of 'Nope'" in out


def test_a_new_process_reuses_the_index_saved_for_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RLMD_HOME", str(tmp_path / "home"))
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text("def one():\n    pass\n")
    (proj / "b.py").write_text("def two():\n    pass\n")
    codeindex.clear_cache()
    first = index_for(load_codebase(proj))
    assert first.find_definition("one") == ["a.py:1: function one: def one():"]
    codeindex.clear_cache()  # as in a new process: only the disk has it
    (proj / "b.py").write_text("def three():\n    pass\n")
    from rlmd.codeintel import diskcache

    saved = diskcache.load(str(proj))
    assert set(saved) == {"a.py", "b.py"}
    again = CodeIndex()
    stats = again.update(load_codebase(proj).value, saved)
    assert (stats.parsed, stats.reused) == (1, 1)  # only the edited file is parsed
    assert index_for(load_codebase(proj)).find_definition("three") == [
        "b.py:1: function three: def three():"
    ]
    # a corrupt cache file is ignored, not fatal
    diskcache.cache_file(str(proj)).write_text("{not json")
    assert diskcache.load(str(proj)) == {}
    assert index_for(load_codebase(proj)).find_definition("one")


def slow_index(tmp_path, monkeypatch):
    """A one-file codebase above SYNC_MAX_CHARS whose index build waits for the returned
    event: ``(context, release)``."""
    import threading

    (tmp_path / "m.py").write_text("class Widget:\n    pass\n")
    ctx = load_codebase(tmp_path)
    release = threading.Event()
    real = codeindex._build_cached

    def slow(files, source):
        assert release.wait(60)
        return real(files, source)

    monkeypatch.setattr(codeindex, "_build_cached", slow)
    monkeypatch.setattr(codeindex, "SYNC_MAX_CHARS", 0)
    return ctx, release


def test_a_slow_index_does_not_hold_the_first_turn_and_a_later_task_gets_the_map(
    tmp_path, monkeypatch
):
    """Above SYNC_MAX_CHARS the first turn does not wait for the map; the build goes on in
    the background and the next metadata (a later turn or task) has the map."""
    ctx, release = slow_index(tmp_path, monkeypatch)
    first = ctx.metadata(len)
    assert "map" not in first and first["files"] == 1  # not ready: no map, no wait
    assert not map_ready(ctx)
    release.set()
    ctx._index_thread.join(60)
    later = ctx.metadata(len)
    assert map_ready(ctx) and any("Widget" in line for line in later["map"])
    assert index_for(ctx) is ctx._code_index  # one build, shared with the REPL helpers


async def test_a_map_not_ready_for_the_first_request_goes_with_a_later_turn(tmp_path, monkeypatch):
    """The first model request never waits for the index (above SYNC_MAX_CHARS); once its
    background build has ended, the next turn carries the map, once."""
    ctx, release = slow_index(tmp_path, monkeypatch)
    seen: list[str] = []

    def root(messages):
        seen.append(messages[-1]["content"])
        if turn_of(messages) == 0:
            release.set()  # the build ends while the model thinks
            ctx._index_thread.join(60)
        if turn_of(messages) < 2:
            return repl(f"x{turn_of(messages)} = 1")
        return repl("FINAL('done')")

    registry = scripted_registry(root=root, sub=root)
    try:
        result = await run_task("What is here?", ctx, config(), get_model=registry.get)
    finally:
        await registry.aclose()
    assert result.status == "completed"
    assert "Code map" not in seen[0] and "code map" not in seen[0]
    assert "The code map is ready now (from the symbol index):" in seen[1]
    assert "Widget" in seen[1]
    assert "code map is ready" not in seen[2]  # sent once


def test_a_codebase_context_pickles_without_its_index(tmp_path):
    """A child run's context goes to a cluster node pickled: the symbol index (locks), its
    build thread and the metadata cache stay behind and are rebuilt there."""
    import pickle

    (tmp_path / "m.py").write_text("class Widget:\n    pass\n")
    ctx = load_codebase(tmp_path)
    assert any("Widget" in line for line in ctx.metadata(len)["map"])
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy.value == ctx.value and getattr(copy, "_code_index", None) is None
    assert any("Widget" in line for line in copy.metadata(len)["map"])

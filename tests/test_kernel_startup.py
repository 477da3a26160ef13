"""The kernel's start-up imports (issue 16 item 4): ``re``, ``enum``, ``linecache`` and
``tokenize`` are not imported before a first cell that does not need them, and nothing a
cell sees changes for it: the leading word of a cell is read as the expression read it, and
the cells' sources reach ``linecache`` whenever it is imported (tracebacks,
``inspect.getsource``, warnings)."""

from __future__ import annotations

import re

import pytest
from helpers.sandbox_host import FakeHost, ok, run

from rlmd.kernel import cells
from rlmd.sandbox import create_sandbox, unavailable_reason

HEAVY = ("re", "enum", "linecache", "tokenize")

WORDS = [
    "",
    "x = 1",
    "_private = 2",
    "__dunder__",
    "a1b2 = 3",
    "1abc",
    "  indented",
    "for x in y: pass",
    "print(x)",
    "éclair = 1",  # not ASCII: the expression took no word
    "xé = 1",  # the word stops at the first non-ASCII character
    "Z",
    "@decorator",
    "#comment",
    "match x:",
    "x;y",
]


@pytest.mark.parametrize("text", WORDS)
def test_the_leading_word_is_the_old_expressions(text):
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text)
    assert cells._leading_word(text) == (m.group() if m else "")


@pytest.mark.parametrize(
    "expr",
    ["x", "for", "[a for a in b]", "format(x)", "x.for_", "fore", "a+for+b", "ƒor", "_for", "éfor"],
)
def test_the_for_check_is_the_old_expressions(expr):
    assert cells._has_for(expr) is (re.search(r"\bfor\b", expr) is not None)


def _variants() -> list[str]:
    out = []
    if unavailable_reason("subprocess") is None:
        out += ["hardened", "plain"]
    return out


async def _started(variant: str):
    options = {"spare_kernel": False, "timeout_s": 30}
    if variant == "plain":
        options["isolation"] = "none"
    box = create_sandbox("subprocess", **options)
    await box.start(FakeHost())
    return box


_PTH_ONLY = """
import os, sys
heavy, skip = sys.argv[1].split(","), sys.argv[2]
for folder in sys.argv[3:]:
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".pth") and not name.startswith(skip):
            for line in open(os.path.join(folder, name), encoding="utf-8"):
                if line.startswith(("import ", "import\\t")):
                    try:
                        exec(line)
                    except Exception:
                        pass
print(",".join(m for m in heavy if m in sys.modules))
"""


def _from_pth_files() -> set[str]:
    """Which of :data:`HEAVY` this interpreter's site-packages ``.pth`` import lines load by
    themselves (none here; another installation's may): not the kernel's doing."""
    import site
    import subprocess
    import sys

    from rlmd.sandbox.process.launch import OWN_EDITABLE_PTH

    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PTH_ONLY, ",".join(HEAVY), OWN_EDITABLE_PTH]
        + site.getsitepackages(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return set(out.split(",")) - {""}


@pytest.mark.parametrize("variant", _variants())
async def test_a_first_cell_imports_none_of_the_heavy_modules(variant):
    expected = sorted(m for m in HEAVY if m in _from_pth_files())
    box = await _started(variant)
    try:
        await ok(box, "x = 1")
        r = await ok(
            box,
            f"import sys\nloaded = [m for m in {HEAVY!r} if m in sys.modules]\nprint(sorted(loaded))",
        )
        assert r.stdout == f"{expected}\n"
    finally:
        await box.close()


@pytest.mark.parametrize("variant", _variants())
async def test_cell_sources_reach_linecache_when_it_is_imported_later(variant):
    box = await _started(variant)
    try:
        first = "def f():\n    return 'from cell one'\n"
        await ok(box, first)
        await ok(box, "y = 2")
        # linecache is imported by this cell (through inspect), after both cells ran.
        r = await ok(box, "import inspect\nprint(inspect.getsource(f), end='')")
        assert r.stdout == first
        r = await ok(
            box,
            "import linecache\nprint(sorted(k for k in linecache.cache if k.startswith('<cell-')))",
        )
        assert r.stdout == "['<cell-1>', '<cell-2>', '<cell-3>', '<cell-4>']\n"
        # Once it is imported, later cells go straight in.
        r = await run(box, "def g():\n    raise ValueError('bad value')\n\ng()")
        assert "raise ValueError('bad value')" in r.error
        assert r.error.rstrip().endswith("ValueError: bad value")
    finally:
        await box.close()


@pytest.mark.parametrize("variant", _variants())
async def test_a_first_failing_cell_shows_its_source_lines(variant):
    # The kernel imports traceback (and so linecache) only to format this error.
    box = await _started(variant)
    try:
        r = await run(box, "def g():\n    raise KeyError('nope')\n\ng()")
        assert "raise KeyError('nope')" in r.error
        assert "line 4, in <module>" in r.error
        r = await ok(box, "import warnings\nwarnings.warn('careful')\n")
        assert "warnings.warn('careful')" in r.stderr
    finally:
        await box.close()


async def test_in_process_cells_still_reach_linecache():
    box = create_sandbox("inprocess", timeout_s=30)
    await box.start(FakeHost())
    try:
        src = "def h():\n    return 3\n"
        await ok(box, src)
        r = await ok(box, "import inspect\nprint(inspect.getsource(h), end='')")
        assert r.stdout == src
    finally:
        await box.close()


# --------------------------------------------------------------- setpriv's uid and gid


def _etc(tmp_path, nsswitch: str | None, passwd: str, group: str = ""):
    if nsswitch is not None:
        (tmp_path / "nsswitch.conf").write_text(nsswitch)
    (tmp_path / "passwd").write_text(passwd)
    (tmp_path / "group").write_text(group)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("nsswitch", "passwd", "expected"),
    [
        (
            "passwd: files systemd\n",
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/x\n",
            "nobody",
        ),
        (None, "nobody:x:65534:65534::/:/x\n", None),  # the C library's default: not guessed
        ("group: files\n", "nobody:x:65534:65534::/:/x\n", None),  # no passwd line
        ("passwd: sss files\n", "nobody:x:65534:65534::/:/x\n", None),  # another source first
        ("passwd: compat\n", "nobody:x:65534:65534::/:/x\n", None),
        (
            "passwd: files\n",
            "nobody:x:99:99::/:/x\nnobody:x:65534:65534::/:/x\n",
            None,
        ),  # first wins
        ("passwd: files\n", "65534:x:65534:1::/:/x\n", None),  # a number is no name here
        ("passwd: files\n", "+nobody:x:65534:1::/:/x\n", None),  # NIS compat entries
        ("passwd: files\n", "other:x:1:1::/:/x\n", None),
        ("passwd: files\n", "broken line\nnobody:x:65534:65534::/:/x\n", "nobody"),
    ],
)
def test_setpriv_gets_a_name_only_when_files_map_it_to_the_same_number(
    tmp_path, nsswitch, passwd, expected
):
    from rlmd.sandbox.process.isolate import _files_name

    assert _files_name("passwd", 65534, _etc(tmp_path, nsswitch, passwd)) == expected


def test_setpriv_ids_resolve_to_the_numbers_here():
    import grp
    import pwd

    from rlmd.sandbox.process.isolate import NOBODY, setpriv_ids

    user, group = setpriv_ids(NOBODY)
    assert (user.isdigit() and int(user) == NOBODY) or pwd.getpwnam(user).pw_uid == NOBODY
    assert (group.isdigit() and int(group) == NOBODY) or grp.getgrnam(group).gr_gid == NOBODY
    assert _files_missing_gives_numbers()


def _files_missing_gives_numbers() -> bool:
    from rlmd.sandbox.process.isolate import _files_name

    return _files_name("passwd", 65534, "/nonexistent-etc") is None

"""The kernel's pieces, without a backend: globs, codebase helpers, capture, protocol."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from rlmd.kernel import protocol
from rlmd.kernel.codebase import Codebase, path_matcher, split_lines
from rlmd.kernel.core import Capture, Kernel, format_exception, json_copy, preview, size_of
from rlmd.sandbox import base

KERNEL_DIR = Path(protocol.__file__).parent


def test_the_host_takes_the_kernels_reserved_names():
    # One list, written in the kernel: the host imports it rather than keeping a copy.
    assert base.RESERVED_NAMES is protocol.RESERVED_NAMES
    assert base.CODEBASE_HELPERS is protocol.CODEBASE_HELPERS
    assert "context" in base.RESERVED_NAMES and "grep" in base.CODEBASE_HELPERS


def test_kernel_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    for path in KERNEL_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in stdlib or top == "__future__", f"{path.name} imports {name}"


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "deep/down/a.py", True),  # no "/": matches the file name at any depth
        ("*.py", "a.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**", "src/x/y/a.txt", True),
        ("src/", "src/x/a.txt", True),
        ("src/", "other/src/a.txt", False),
        ("./src/?.py", "src/a.py", True),
        ("test_[ab].py", "t/test_a.py", True),
        ("test_[!ab].py", "t/test_a.py", False),
        ("test_[!ab].py", "t/test_c.py", True),
        ("README*", "README.md", True),
        ("[", "[", True),
        ("a+b(c).txt", "a+b(c).txt", True),
    ],
)
def test_glob(pattern, path, expected):
    assert path_matcher(pattern)(path) is expected


def test_split_lines():
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("a\nb") == ["a", "b"]
    assert split_lines("") == []
    assert split_lines("a\x0cb\u2028c\n") == ["a\x0cb\u2028c"]  # only \n splits


def test_read_file_width_and_range():
    cb = Codebase({"f.txt": "".join(f"line {i}\n" for i in range(1, 10001))})
    text = cb.read_file("f.txt", 9999)
    assert text == " 9999| line 9999\n10000| line 10000"
    assert cb.read_file("f.txt", 0, 1) == "   1| line 1"
    assert cb.read_file("f.txt", 5, 4) == ""
    with pytest.raises(ValueError, match="past the end"):
        cb.read_file("f.txt", 20000)
    assert Codebase({"e": ""}).read_file("e") == ""


def test_read_file_crlf_and_suggestions():
    cb = Codebase({"pkg/mod.py": "a\r\nb\r\n", "pkg/other.py": ""})
    assert cb.read_file("pkg/mod.py") == "   1| a\r\n   2| b\r"
    with pytest.raises(FileNotFoundError, match="did you mean: pkg/mod.py"):
        cb.read_file("mod.py")
    with pytest.raises(TypeError):
        cb.read_file(3)  # type: ignore[arg-type]


def test_grep_details():
    cb = Codebase({"a.txt": "x" * 600 + "\nfoo\n", "b.txt": "foo\nbar foo\n"})
    hits = cb.grep("x+")
    assert hits == ["a.txt:1:" + "x" * 500 + "..."]
    assert cb.grep("^foo$") == ["a.txt:2:foo", "b.txt:1:foo"]
    assert cb.grep(r"\Afoo") == ["a.txt:2:foo", "b.txt:1:foo"]  # per line, no prefilter
    assert cb.grep("foo", path_glob="b.*") == ["b.txt:1:foo", "b.txt:2:bar foo"]
    with pytest.raises(ValueError, match="invalid regular expression"):
        cb.grep("(")
    # a list of paths works as path_glob (models write grep(p, list_files()))
    assert cb.grep("foo", path_glob=["b.txt"]) == ["b.txt:1:foo", "b.txt:2:bar foo"]
    with pytest.raises(ValueError, match="unknown paths"):
        cb.grep("foo", path_glob=["nope.txt"])


def test_empty_helper_results_say_why(capsys):
    cb = Codebase({"a.py": "x = 1\n", "b.py": "y = 2\n"})
    assert cb.grep("zzz", path_glob="a.py") == []
    note = capsys.readouterr().err
    assert "no line matches 'zzz' in the 1 files given by path_glob" in note
    assert "without a path_glob searches all 2 files" in note
    assert cb.list_files("*.rs") == []
    assert "no path matches '*.rs' (2 files in all" in capsys.readouterr().err


def test_capture_cap_and_bytes():
    cap = Capture(10)
    cap.write("hello ")
    cap.write("world, and more")
    cap.buffer.write("é".encode()[:1])
    cap.buffer.write("é".encode()[1:])
    assert cap.getvalue().startswith("hello worl\n[rlmd: output truncated: 12 more characters")
    with pytest.raises(TypeError):
        cap.write(b"bytes")  # type: ignore[arg-type]
    assert not cap.isatty()


def test_preview_and_size():
    assert preview("a" * 10_000_000).startswith("'aaaa")
    assert len(preview(list(range(1000)))) <= 80
    assert len(preview(b"\x00" * 10_000)) <= 80

    class BadRepr:
        def __repr__(self):
            raise RuntimeError("no")

        def __len__(self):
            raise RuntimeError("no")

    assert preview(BadRepr()).startswith("<BadRepr")
    assert size_of(BadRepr()) is None
    assert size_of([1, 2]) == 2 and size_of(3) is None and size_of(list) is None


def test_format_exception_hides_kernel_frames():
    k = Kernel(lambda fn, args: (_ for _ in ()).throw(RuntimeError("host says no")))
    res = k.exec_cell("def go():\n    return llm_query('x')\n\ngo()")
    err = res["error"]
    assert "line 4, in <module>" in err and "line 2, in go" in err
    assert str(KERNEL_DIR) not in err
    assert err.rstrip().endswith("RuntimeError: host says no")
    try:
        raise ValueError("outside")
    except ValueError as exc:
        assert "ValueError: outside" in format_exception(exc)


def test_chained_exceptions_are_kept():
    k = Kernel(lambda fn, args: None)
    err = k.exec_cell("try:\n    1/0\nexcept Exception as e:\n    raise KeyError('k') from e")[
        "error"
    ]
    assert "ZeroDivisionError" in err and "direct cause" in err and "KeyError: 'k'" in err


def test_cells_do_not_inherit_future_flags():
    # core.py uses `from __future__ import annotations`; cells must not.
    k = Kernel(lambda fn, args: None)
    res = k.exec_cell("def f(x: int) -> int:\n    return x\nann = f.__annotations__['x']")
    assert res["error"] is None
    assert k.ns["ann"] is int


def test_thread_capture_leaves_other_threads_alone(capsys):
    k = Kernel(lambda fn, args: None, capture="thread")
    res = k.exec_cell("print('in cell')")
    print("host output")
    assert res["stdout"] == "in cell\n"
    assert capsys.readouterr().out == "host output\n"


def test_protocol_round_trip():
    frame = protocol.encode({"op": "x", "text": "héllo \udcff"})
    n = int.from_bytes(frame[:4], "big")
    assert n == len(frame) - 4
    assert protocol.decode(frame[4:]) == {"op": "x", "text": "héllo \udcff"}
    with pytest.raises(TypeError):
        protocol.encode({"op": "x", "v": {1, 2}})
    with pytest.raises(ValueError):
        protocol.decode(b"[1]")
    assert json.loads(protocol.encode({"op": "y"})[4:]) == {"op": "y"}
    assert protocol.sentinel("ab", 12) == b"\x00rlmd:ab:12\x00"


def test_frames_are_the_json_modules_text():
    """The kernel encodes and decodes frames with the C accelerator directly (it does not
    import json to start): the same text as ``json.dumps`` and the same values as
    ``json.loads``, non-finite numbers, big integers and lone surrogates included."""
    values = [
        {"op": "x", "v": [1, 2.5, None, True, False, 'é\u2028\x00 "q" \\']},
        {"n": float("nan"), "i": float("inf"), "m": -float("inf"), "big": 10**30, "e": {}},
        {"nested": {"k": [{"z": []}]}, "f": 1e-300},
        [1, 2],
        "text",
    ]
    for value in values:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert protocol.encode(value)[4:] == text.encode("utf-8")
        ascii_text = json.dumps(value, separators=(",", ":"))
        assert protocol.encode_line(value) == ascii_text.encode("ascii") + b"\n"
    surrogate = {"s": "a\ud800b"}
    assert protocol.encode(surrogate)[4:] == json.dumps(surrogate, separators=(",", ":")).encode()
    text = '{"a":NaN,"b":-Infinity,"c":12345678901234567890,"d":1.5,"e":"\\ud800","f":[{}]}'
    assert repr(protocol.decode(text.encode())) == repr(json.loads(text))
    for bad in (b'{"a":', b"nope", b'{"a":1}x', b"[1]"):
        with pytest.raises(ValueError):
            protocol.decode(bad)
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular"):
        protocol.encode(loop)


def test_handle_unknown_op():
    k = Kernel(lambda fn, args: None)
    with pytest.raises(ValueError, match="unknown op"):
        k.handle({"op": "frobnicate"})
    assert k.handle({"op": "ping"})["pid"] > 0


def test_an_exec_result_names_the_variables_only_when_the_cell_changed_which_exist():
    """The names of 200,000 variables (~2.6 MB) were decoded by the host after every cell:
    ``names`` is null when a cell added and removed none."""
    k = Kernel(lambda fn, args: None, capture="thread")
    assert k.exec_cell("a = 1\nb = [2]")["names"] == ["a", "b"]
    assert k.exec_cell("a = 3\nb.append(4)\nprint(a)\nimport os\n_x = 1")["names"] is None
    assert k.exec_cell("del a\nc = 5")["names"] == ["b", "c"]  # as many, not the same
    assert k.exec_cell("del c")["names"] == ["b"]
    assert k.exec_cell("b = os")["names"] == []  # a module is no variable
    assert k.exec_cell("b = 1")["names"] == ["b"]
    assert k.exec_cell("raise ValueError")["names"] is None


def test_a_page_of_variables_is_sorted_by_name_counts_all_and_previews_only_its_own():
    k = Kernel(lambda fn, args: None, capture="thread")
    code = (
        "import os\nB = 1\na = 2\n_hidden = 3\nzeta = 4\nalpha2 = 5\n"
        "class Loud:\n    def __repr__(self):\n        seen.append(1)\n        return 'loud'\n"
        "seen = []\nloud = Loud()\n"
    )
    assert k.exec_cell(code)["error"] is None
    k.ns[1] = "not a name"  # what globals()[1] = ... leaves (set here: a cell trips on it)
    k.ns["seen"].clear()  # the cell's own report previewed loud
    page = k.handle({"op": "list_vars_page", "offset": 0, "limit": 3, "match": ""})
    # code point order: capitals first; modules, _names and the int key are no variables
    assert [v["name"] for v in page["variables"]] == ["B", "Loud", "a"]
    assert page["total"] == 7
    assert k.ns["seen"] == []  # loud's __repr__ was not called for a page without it
    rest = k.handle({"op": "list_vars_page", "offset": 3, "limit": 10, "match": ""})
    assert [v["name"] for v in rest["variables"]] == ["alpha2", "loud", "seen", "zeta"]
    assert k.ns["seen"] == [1]
    defined = k.handle({"op": "list_vars_page", "offset": 1, "limit": 3, "order": "defined"})
    assert [v["name"] for v in defined["variables"]] == ["a", "zeta", "alpha2"]
    found = k.handle({"op": "list_vars_page", "offset": 0, "limit": 10, "match": "a"})
    assert [v["name"] for v in found["variables"]] == ["a", "alpha2", "zeta"]
    assert found["total"] == 3
    assert k.handle({"op": "list_vars_page", "offset": 99, "limit": 10, "match": ""}) == {
        "total": 7,
        "variables": [],
    }
    assert k.handle({"op": "list_vars_page", "offset": 0, "limit": 0}) == {
        "total": 7,
        "variables": [],
    }
    for bad in ({"offset": -1, "limit": 1}, {"offset": 0, "limit": True}, {"limit": "2"}):
        with pytest.raises(ValueError, match="must be an integer"):
            k.handle({"op": "list_vars_page", **bad})
    with pytest.raises(ValueError, match="match must be a string"):
        k.handle({"op": "list_vars_page", "offset": 0, "limit": 1, "match": 3})


def test_plain_values_are_previewed_inline_and_others_after_the_ran_signal():
    # Previews of builtin scalars run no model code, so the cell needs no helper thread and
    # no separate "ran" frame; anything else keeps both (its __repr__ is model code).
    kernel = Kernel(lambda fn, args: None)
    ran: list[int] = []
    r = kernel.exec_cell(
        "a = 12345678\nb = 'x' * 10**6\nc = 2.5\nd = None", on_ran=lambda: ran.append(1)
    )
    assert ran == []
    assert {v["name"]: v["preview"][:10] for v in r["variables"]} == {
        "a": "12345678",
        "b": "'xxxxxxxxx",
        "c": "2.5",
        "d": "None",
    }
    digits = sys.get_int_max_str_digits()  # a cell below lifts the limit in this process
    for code in (
        "class I(int):\n    def __repr__(self): return 'mine'\ne = I(3)",
        "import sys\nsys.set_int_max_str_digits(0)\nf = 7 ** 5000",
        "g = [1, 2]",
    ):
        r = kernel.exec_cell(code, on_ran=lambda: ran.append(1))
        assert r["error"] is None
        assert ran == [1], code
        ran.clear()
    sys.set_int_max_str_digits(digits)
    assert [v["preview"] for v in kernel.list_vars() if v["name"] == "e"] == ["mine"]


# -- json_copy: what the in-process sandbox copies each host call's arguments and answer with


class _Str(str):
    pass


class _Int(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        "a prompt \udcff é 😀",
        {"prompt": "p", "model": None},
        {"prompts": ["a", "b"], "n": [1, 2.5, True, None, float("nan")], "d": {"e": {}}},
        ("tuple", ("nested", [1])),
        {1: "int key", None: "none key", False: "bool key", 2.5: "float key"},
        {"s": _Str("subclass"), "i": _Int(3), "l": [_Str("x")]},
        [10**40, -0.0, float("inf")],
    ],
)
def test_json_copy_gives_what_the_json_round_trip_gives(value: object) -> None:
    copy = json_copy(value, "it")
    expected = json.loads(json.dumps(value))
    assert json.dumps(copy) == json.dumps(expected)
    assert _types(copy) == _types(expected)  # only exact built-in types, as JSON gives


def _types(value: object) -> object:
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()} | {"__type__": type(value).__name__}
    if isinstance(value, list):
        return [type(value).__name__, *(_types(v) for v in value)]
    return type(value).__name__


def test_json_copy_is_a_copy_of_containers() -> None:
    inner = {"k": ["v"]}
    value = {"a": inner, "b": [inner]}
    copy = json_copy(value, "it")
    inner["k"].append("changed")
    assert copy == {"a": {"k": ["v"]}, "b": [{"k": ["v"]}]}
    assert copy["a"] is not copy["b"][0]


def test_json_copy_refuses_what_json_refuses() -> None:
    cycle: list = []
    cycle.append(cycle)
    for bad in ({"x": object()}, {"s": {1, 2}}, cycle, {"b": b"x"}):
        with pytest.raises(TypeError, match="it must be JSON-serialisable"):
            json_copy(bad, "it")

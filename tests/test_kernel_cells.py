"""A cell compiled in parts (rlmd.kernel.cells.split) behaves exactly as the same cell
compiled through its AST: same output, echo, errors (with their line and column marks) and
variables, for every shape, including the ones split must refuse."""

from __future__ import annotations

import re
import sys

import pytest

from rlmd.kernel import cells, core

CELLS = [
    # what split handles
    "x = sum(range(100)); print(x)",
    "x = 5",
    "x = 5\nx",
    "x = 5\nx  # a comment\n# a trailing comment\n\n",
    "def f(a):\n    return a * 2\nf(21)",
    "for i in range(3):\n    print(i)",
    "for i in range(3): print(i); i",
    "if True:\n    y = 1\n",
    "@staticmethod\ndef g():\n    pass\n",
    "class C:\n    pass\nC.__name__",
    "import os\nos.sep",
    "import os",
    "y = 2; y",
    "y = 2;  y + 1",
    "print(\n    'a',\n    'b',\n)",
    "(1,\n2); 3",
    "a = 1; b = 2; a + b",
    "None",
    "y = None\ny",
    "z = 3\nz += 1",
    "w: int = 4",
    "print(1); None",
    "[i for i in range(3)]",
    "x = 1; [i for i in range(x)]",
    # a line whose parts before the last ";" assign to names: one compile in "single" mode
    "x = 1; y = 2",
    "x = 1; y = x * 2; y * 3",
    "x = 1; x",
    "x = 1; del x",
    "x = 1; import os",
    "x=1;x",
    "x = 1;\tx",
    "x = 1; ",
    "x = 'a; y = 2'; x",
    "x = 'a; y = 2'; y = 3",
    "x = 1; y = 2  # ; z = 3",
    "x = 1; y = 2  # ; 5",
    "x = [1]; *x, 0",
    "f = print; f(1); 2",
    "x = 1; x == 1",
    "x = y = 3; x + y",
    "x = 1; x += 1; x",
    "a = 1\nb = 2; a + b",
    "def f():\n    return 5\nr = f(); r",
    "_ = 7; _",
    "type = 8; type",
    "x = 1; y = 1/0; x",
    "x = 1; 1/0",
    "x = 1/0; x",
    "x = 1; b c",
    "x = 1; return 1",
    "x; y = 1; z",
    # errors at run time: the traceback's line and column marks
    "1/0",
    "y = 1; 1/ 0",
    "a = 1\nb = 0\na /  b",
    "def f():\n    raise ValueError('no')\nf()",
    "q = 1; undefined_name + q",
    "class R:\n    def __repr__(self):\n        raise ValueError('bad repr')\nR()",
    "b = [1]\n*b, 0",
    "import sys\nsys.displayhook is sys.__displayhook__",
    # shapes split must refuse (the AST way decides)
    "x;",
    "import os; os.sep",
    "*a, = [1, 2]\na",
    "a, *b = [1, 2]; b",
    "b = [1]; 0, *b",
    "[*range(2)]",
    "y = 1; (z := y + 1)",
    "y = 1; x for x in range(2)",
    "s = '''\nfor\n'''\ns",
    "t = 'a;b'; t",
    "t = 'a#b'; t  # ;",
    "if False:\n    pass\nelse:\n    print('else')",
    "try:\n    1/0\nexcept ZeroDivisionError:\n    print('caught')",
    "from __future__ import annotations\nx = 1\nx",
    "x = (1 +\n2)\nx",
    "x = 1 + \\\n2\nx",
    "match = 3\nmatch",
    "x = 1\r\nx",
    "lambda: 0",
    "not False",
    # syntax errors: the same message either way
    "x = = 1",
    "x = 1\ny = (",
    "print x",
    "for i in range(2):\nprint(i)",
    "x = 1\n  y = 2",
    "return 1",
    "x = 1; ",
    "'unterminated",
    "a = 1; b c",
]


def _run(code: str, *, use_split: bool, capture: str, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        if not use_split:
            m.setattr(cells, "split", lambda code, filename: None)
        kernel = core.Kernel(lambda fn, args: None, capture=capture)
        result = kernel.exec_cell(code)
    result.pop("duration_s")
    return eval(re.sub(r" at 0x[0-9a-f]+", "", repr(result)))  # object addresses differ


@pytest.mark.parametrize("capture", ["global", "thread"])
@pytest.mark.parametrize("code", CELLS)
def test_a_cell_split_into_parts_runs_as_its_ast_would(
    code: str, capture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = sys.displayhook
    split = _run(code, use_split=True, capture=capture, monkeypatch=monkeypatch)
    assert split == _run(code, use_split=False, capture=capture, monkeypatch=monkeypatch)
    assert sys.displayhook is hook  # the echo hook is the cell's only


@pytest.mark.parametrize(
    ("code", "parts"),
    [
        ("x = sum(range(100)); print(x)", 1),
        ("a = 1; b = 2; a + b", 1),
        ("x = 1\ny = 2; y", 2),
        ("b = [1]; 0, *b", 1),
        ("print(1); 2", 2),
        ("x = 5\nx", 2),
        ("x = 5", 1),
        ("for i in range(3):\n    print(i)", 1),
        ("a = 1\nb = 2\nfor i in range(3):\n    print(i)", 2),
        ("print(1)", 1),
    ],
)
def test_the_usual_shapes_are_split(code: str, parts: int) -> None:
    split = cells.split(code, "<cell>")
    assert split is not None
    assert len(split) == parts


@pytest.mark.parametrize(
    "code",
    ["import os; os.sep", "x = 1\r\nx", "if a:\n    b\nelse:\n    c", "a; b = 1"],
)
def test_shapes_it_cannot_prove_are_left_to_the_ast(code: str) -> None:
    assert cells.split(code, "<cell>") is None

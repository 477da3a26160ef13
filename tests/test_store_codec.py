"""The store's JSON encoding (``rlmd.store.codec.dumps``) against ``json.dumps``, and the batched
store's shortcut past the payload walk (``plain_json``, ``may_redact_json``)."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest

from rlmd.redact import may_redact_json
from rlmd.store.codec import ascii_json, dumps, plain_json, to_jsonable


@pytest.mark.parametrize(
    "value",
    [
        {"role": "sub", "messages": [{"role": "user", "content": 'é ü 中文 \u2028 \x00 "q" \\'}]},
        {"n": 3, "f": 0.1, "big": 10**30, "neg": -2.5e-300, "t": True, "f2": False, "none": None},
        [1, [2, [3, {"a": []}]], {}],
        "a bare string with \n and \t",
        42,
        None,
        {"\ud83d\ude00 key": "emoji 😀", "esc": "\\ud800"},
    ],
)
def test_dumps_is_json_dumps_compact_without_ascii_escapes(value: object) -> None:
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})


# -- plain_json: the batched store's shortcut past to_jsonable's walk ---------------------------


class _Str(str):
    pass


class _Int(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {"role": "sub", "messages": [{"role": "user", "content": 'é ü \u2028 \x00 "q" \\ \uc000'}]},
        {"n": 3, "f": 0.1, "big": 10**30, "t": True, "f2": False, "none": None, "e": [], "d": {}},
        {"tuple": (1, "a", (2.5, None)), "nested": [[[{"k": ["v"]}]]]},
        {1: "int key", 2.5: "float key", "s": _Str("a str subclass"), "i": _Int(7)},
        {"q": '"true": not a key, "null": neither'},
    ],
)
def test_plain_json_decodes_to_what_to_jsonable_makes(value: dict) -> None:
    text = plain_json(value)
    assert text is not None and text.isascii()
    assert json.loads(text) == to_jsonable(value)
    assert text == ascii_json(to_jsonable(value))


@pytest.mark.parametrize(
    "value",
    [
        {"lone surrogate": "\udcff"},  # to_jsonable escapes it as text: six characters
        {"astral": "emoji 😀"},  # a surrogate pair in ASCII JSON: not told apart, so walked
        {True: "bool key"},  # JSON writes "true", to_jsonable "True"
        {None: "none key"},
        {"nan": float("nan")},  # to_jsonable writes "nan" as a string
        {"inf": [float("inf")]},
        {"set": {1, 2}},
        {"bytes": b"x"},
        {"path": PurePosixPath("/a")},
        {"object": object()},
        {"esc": "\\ud800, six characters"},  # a false alarm: the walk then makes it
    ],
)
def test_plain_json_leaves_what_to_jsonable_converts_to_it(value: dict) -> None:
    assert plain_json(value) is None
    assert to_jsonable(value) is not None  # the walk still makes it JSON-safe


def test_plain_json_of_a_cycle_or_deep_nesting_is_none() -> None:
    cycle: list = []
    cycle.append(cycle)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert plain_json({"c": cycle}) is None and plain_json({"d": deep}) is None


@pytest.mark.parametrize(
    ("text", "secrets", "might"),
    [
        ('{"a":"nothing here"}', (), False),
        ('{"a":"key sk-' + "x" * 22 + '"}', (), True),  # a key shape's mark
        ('{"a":"hf_ then ghp_"}', (), True),
        ('{"a":"x s3cr3t-value x"}', ("s3cr3t-value",), True),
        ('{"a":"x"}', ("s3cr3t-value",), False),
        ('{"a":"x"}', ('with"quote',), True),  # JSON would escape it: cannot be looked for
        ('{"a":"x"}', ("back\\slash",), True),
        ('{"a":"x"}', ("non-ascii-é-secret",), True),
        ('{"a":"x"}', ("tab\tsecret",), True),
    ],
)
def test_may_redact_json(text: str, secrets: tuple[str, ...], might: bool) -> None:
    assert may_redact_json(text, secrets) is might


def test_may_redact_json_sees_the_environments_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZZ_TEST_API_KEY", "env-secret-value")
    assert may_redact_json('{"a":"the env-secret-value"}')
    assert not may_redact_json('{"a":"the env secret value"}')

"""The store's JSON encoding (``rlmd.store.codec.dumps``) against ``json.dumps``."""

from __future__ import annotations

import json

import pytest

from rlmd.store.codec import dumps


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

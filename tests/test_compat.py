"""`from rlmd import RLM`: the rlms-compatible Python API."""

from __future__ import annotations

import asyncio

from helpers.scripted import repl, turn_of

from rlmd import RLM
from rlmd.store import Store


def test_completion_returns_response_and_usage_and_records(rlmd_home):
    def model(messages):
        if turn_of(messages) == 0:
            return repl("words = context.split()\nprint(len(words))")
        return repl("FINAL(len(words))")

    rlm = RLM(
        backend="scripted", backend_kwargs={"model_name": "s", "callable": model}, max_iterations=5
    )
    try:
        result = rlm.completion("one two three four", root_prompt="How many words?")
    finally:
        rlm.close()
    assert result.response == "4"
    assert result.status == "completed"
    # keyed by the model's name, as in the reference (review17: it was rlmd's "root")
    assert list(result.usage_summary.model_usage_summaries) == ["s"]
    assert result.usage_summary.model_usage_summaries["s"].total_calls == 2
    assert result.usage_summary.total_input_tokens > 0
    assert result.execution_time > 0
    run = Store(rlmd_home / "rlmd.db").get_run(result.run_id)
    assert run["question"] == "How many words?" and run["answer"] == "4"


def test_persistent_keeps_variables_across_completions():
    def model(messages):
        question = messages[1]["content"]
        if "first" in question:
            return repl("memo = context.upper()\nFINAL(memo)")
        return repl("FINAL(memo + '+' + context)")

    with RLM(
        backend="scripted",
        backend_kwargs={"model_name": "s", "callable": model},
        environment="local",
        persistent=True,
    ) as rlm:
        a = rlm.completion("abc", root_prompt="first: look at context")
        b = rlm.completion("xyz", root_prompt="second: combine")
    assert a.response == "ABC"
    assert b.response == "ABC+xyz"


def test_works_inside_a_running_event_loop():
    def model(messages):
        return repl("FINAL(len(context))")

    async def inside():
        with RLM(backend="scripted", backend_kwargs={"model_name": "s", "callable": model}) as rlm:
            return rlm.completion("12345").response

    assert asyncio.run(inside()) == "5"


def test_other_backends_route_subcalls_and_keys_never_recorded(rlmd_home):
    key = "sk-test-SECRETVALUE1234567890"

    def root(messages):
        if turn_of(messages) == 0:
            return repl("print(llm_query('hi'))")
        return repl("FINAL('ok')")

    rlm = RLM(
        backend="scripted",
        backend_kwargs={"model_name": "r", "callable": root, "api_key": key},
        other_backends=["scripted"],
        other_backend_kwargs=[{"model_name": "s", "callable": lambda m: "from sub"}],
    )
    try:
        result = rlm.completion("ctx", root_prompt="q")
    finally:
        rlm.close()
    summaries = result.usage_summary.model_usage_summaries
    assert sorted(summaries) == ["r", "s"] and summaries["s"].total_calls == 1
    assert key.encode() not in (rlmd_home / "rlmd.db").read_bytes()


def test_the_references_callbacks_fire_and_a_typo_is_a_type_error(rlmd_home):
    """Review17: ``RLM(**kwargs)`` swallowed every keyword it did not know, so an rlms
    user's ``on_subcall_start=...`` never fired and a typo (``max_iteration=3``) passed
    without a word. The reference's callbacks now fire, its ignored keywords warn, and a
    keyword neither has is a ``TypeError``."""
    import pytest

    seen: list[tuple] = []

    def root(messages):
        if "child question" in messages[1]["content"]:
            return repl("FINAL(context)")
        if turn_of(messages) == 0:
            return repl("r = rlm_query('child question', context='abc')\nprint(r)")
        return repl("FINAL(r)")

    def boom(*args):
        raise RuntimeError("a callback that raises is ignored")

    with RLM(
        backend="scripted",
        backend_kwargs={"model_name": "s", "callable": root},
        max_depth=2,
        on_subcall_start=lambda *a: seen.append(("sub start", *a)),
        on_subcall_complete=lambda d, m, s, e: seen.append(("sub done", d, m, s >= 0, e)),
        on_iteration_start=lambda *a: seen.append(("turn", *a)),
        on_iteration_complete=boom,
    ) as rlm:
        result = rlm.completion("ctx", root_prompt="q")
    assert result.response == "abc"
    assert seen == [
        ("turn", 0, 1),
        ("sub start", 1, "s", "child question"),
        ("turn", 1, 1),
        ("sub done", 1, "s", True, None),
        ("turn", 0, 2),
    ]
    with pytest.raises(TypeError, match="max_iteration"):
        RLM(backend="scripted", backend_kwargs={"model_name": "s"}, max_iteration=3)
    with pytest.warns(UserWarning, match=r"RLM\(logger=...\) is ignored"):
        RLM(backend="scripted", backend_kwargs={"model_name": "s"}, logger=object()).close()


def test_a_bad_argument_is_named_as_the_caller_wrote_it():
    """Review17: ``RLM(max_budget=-1)`` said "budget max_usd must be ..." (the engine's
    field), and two ``other_backends`` with one ``other_backend_kwargs`` "zip() argument 2
    is shorter than argument 1"."""
    import pytest

    base = {"backend": "scripted", "backend_kwargs": {"model_name": "s"}}
    for arg, value, said in [
        ("max_budget", -1, "max_budget must be a number > 0, got -1"),
        ("max_timeout", 0, "max_timeout must be a number of seconds > 0, got 0"),
        ("max_errors", 0, "max_errors must be >= 1, got 0"),
        ("max_iterations", 0, "max_iterations must be >= 1"),
    ]:
        with pytest.raises(ValueError) as err:
            RLM(**base, **{arg: value})
        assert str(err.value).startswith(said), err.value
    with pytest.raises(ValueError, match="other_backend_kwargs has 1 dict"):
        RLM(
            **base,
            other_backends=["scripted", "scripted"],
            other_backend_kwargs=[{"model_name": "a"}],
        )


def test_a_completion_after_close_says_the_rlm_is_closed():
    """Review17: it raised "Event loop is closed" and warned of a coroutine never awaited."""
    import warnings

    import pytest

    rlm = RLM(backend="scripted", backend_kwargs={"model_name": "s", "callable": lambda m: ""})
    rlm.close()
    rlm.close()  # twice is fine
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="this RLM is closed"):
            rlm.completion("abc")

"""The loop's history token count is a running total equal to a full recount."""

from __future__ import annotations

from rlmd.engine.feedback import LoopState
from rlmd.models.base import ModelSpec
from rlmd.models.scripted import ScriptedModel


def _model(name: str = "s") -> ScriptedModel:
    spec = ModelSpec(name=name, provider="scripted", model="<callable>", options={"callable": str})
    return ScriptedModel(spec)


def test_running_total_equals_a_recount_and_counts_only_new_messages():
    model, other = _model(), _model("t")
    state = LoopState(messages=[{"role": "system", "content": "sys " * 50}])
    counted: list[str] = []
    real = model.count_messages

    def spy(messages):
        counted.extend(m["content"] for m in messages)
        return real(messages)

    model.count_messages = spy  # type: ignore[method-assign]
    for i in range(30):
        state.say(f"output {i} " * (i + 1))
        state.reply(f"```repl\nprint({i})\n```")
        assert state.message_tokens(model) == real(state.messages)
    assert len(counted) == len(state.messages)  # each message counted once
    # a compaction replaces the list: counted afresh
    state.messages = state.messages[:2] + [{"role": "user", "content": "summary"}]
    assert state.message_tokens(model) == real(state.messages)
    # another model: counted with its own tokenizer
    assert state.message_tokens(other) == other.count_messages(state.messages)

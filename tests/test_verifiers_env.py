"""The verifiers environment (rlmd.train.verifiers_env), loaded by verifiers' own loader and
played once end to end: verifiers' interception server in front of a scripted
OpenAI-compatible server on 127.0.0.1, rlmd's real engine and subprocess sandbox, a real
store. Needs verifiers 0.4.0, which lives in its own venv (scripts/verifiers-venv.sh);
scripts/test.sh runs this file there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

try:
    import verifiers.v1 as vf
except ImportError:
    if os.environ.get("RLMD_EXPECT_VERIFIERS"):  # scripts/test.sh: a skip there is a failure
        raise
    pytest.skip(
        "verifiers 0.4.0 is not in this venv: it pins mcp==2.0.0 and rlmd's mcp extra needs "
        "mcp>=2.3, so it has its own (scripts/verifiers-venv.sh; scripts/test.sh runs this "
        "file with .venv-verifiers/bin/python)",
        allow_module_level=True,
    )

from helpers.http_server import FakeServer, openai_reply  # noqa: E402
from helpers.scripted import last_user, repl, turn_of  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from verifiers.v1.utils.loaders import load_environment, resolve_env_config  # noqa: E402

from rlmd.store import Store  # noqa: E402
from rlmd.train.tasks import TaskFileError  # noqa: E402
from rlmd.train.verifiers_env import RlmdHarness, RlmdTaskset  # noqa: E402

ENV_ID = "rlmd-verifiers"
KEY_VAR = "RLMD_TEST_VF_UPSTREAM_KEY"
CONTEXT = "\n".join(f"line {i}: {'apple' if i % 7 == 0 else 'pear'}" for i in range(60))
ANSWER = CONTEXT.count("apple")  # 9

REPLIES = [
    repl("n = context.count('apple')\nprint(n)"),
    repl("FINAL(str(n))"),
]


def policy(request: dict[str, Any]) -> Any:
    """The scripted policy: count with code, then hand the count over with FINAL."""
    turn = turn_of(request["body"]["messages"])
    return openai_reply(REPLIES[min(turn, len(REPLIES) - 1)], model=request["body"]["model"])


def env_for(tasks: Path, store: Path, **harness: Any) -> Any:
    """The environment as vf-eval / prime-rl build it from their config (taskset id)."""
    knobs = {"id": ENV_ID, "store": str(store), "max_iterations": 4, **harness}
    config = resolve_env_config(
        {"taskset": {"id": ENV_ID, "tasks": str(tasks)}, "agent": {"harness": knobs}}
    )
    return load_environment(config)


async def play_one(env: Any, port: int) -> Any:
    """One rollout of the first task, the way vf-eval's in-process runner does it."""
    ctx = vf.ModelContext(
        model="policy-m",
        client=vf.EvalClientConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key_var=KEY_VAR),
    )
    task = next(iter(env.taskset))
    async with env.serving():
        (slot,) = env.slots(task, 1)
        return await env.run_slot(slot, ctx)


def text(content: Any) -> str:
    return content if isinstance(content, str) else vf.types.content_text(content)


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    task = {
        "id": "apples",
        "question": "How many lines mention apple?",
        "context": CONTEXT,
        "answer": ANSWER,
        "scorer": "numeric",
    }
    path.write_text(json.dumps(task) + "\n")
    return path


async def test_one_rollout_through_verifiers_is_an_rlmd_run_scored_by_its_reward(
    tasks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "upstream-key")
    server = FakeServer(policy)
    try:
        env = env_for(tasks_file, tmp_path / "store.db")
        # verifiers found the plugin by its id: rlmd's taskset, played by rlmd's harness
        assert isinstance(env.taskset, RlmdTaskset)
        assert isinstance(env._harnesses["agent"], RlmdHarness)
        episode = await play_one(env, server.port)
    finally:
        server.close()

    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.ok, trace.errors
    # the reward is rlmd.train.rewards' (numeric scorer: exact count scores 1)
    assert trace.rewards["rlmd_reward"].score == 1.0
    assert trace.metrics["iterations"] == 2.0 and trace.metrics["subcalls"] == 0.0
    assert trace.metrics["correctness"] == 1.0 and trace.metrics["cell_errors"] == 0.0
    info = trace.info["rlmd"]
    assert info["facts"]["answer"] == str(ANSWER) and info["facts"]["status"] == "completed"
    assert info["reward"] == {"reward": 1.0, "correctness": 1.0, "gated": None}

    # the upstream server saw exactly the two root turns, through verifiers' interception
    # (its key, not the rollout's secret; the trainer's model name)
    assert len(server.requests) == 2
    assert {r["headers"]["authorization"] for r in server.requests} == {"Bearer upstream-key"}
    assert {r["body"]["model"] for r in server.requests} == {"policy-m"}
    # verifiers recorded each turn as the model saw it: the request rlmd sent is a prefix of
    # a recorded branch, followed by the reply the model gave
    assert len(trace.calls) == 2
    branches = [[(m.role, text(m.content)) for m in b.messages] for b in trace.branches]
    for request, reply in zip(server.requests, REPLIES, strict=True):
        sent = [(m["role"], m["content"]) for m in request["body"]["messages"]]
        assert sent[0][0] == "system" and "context" in sent[1][1]
        assert any(b[: len(sent) + 1] == [*sent, ("assistant", reply)] for b in branches), sent

    # and rlmd recorded the same run in its store
    with Store(tmp_path / "store.db") as store:
        run = store.get_run(info["run_id"])
    assert run is not None and run["question"] == "How many lines mention apple?"
    assert run["answer"] == str(ANSWER)


async def test_a_wrong_answer_scores_what_the_scorer_gives(
    tasks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "upstream-key")
    server = FakeServer(
        lambda request: openai_reply(repl(f"FINAL('{ANSWER + 1}')"), model="policy-m")
    )
    try:
        episode = await play_one(env_for(tasks_file, tmp_path / "store.db"), server.port)
    finally:
        server.close()
    (trace,) = episode.traces
    # numeric partial credit 0.75^|Δ| (rlmd.train.scoring)
    assert trace.rewards["rlmd_reward"].score == pytest.approx(0.75)
    # the verifier questions a guess no output showed, so the run took more than one turn:
    # every root turn is one recorded call
    assert trace.metrics["iterations"] == len(trace.calls) == len(server.requests) > 1


SUB_REPLIES = [
    repl("r = llm_query('SUBQ: how many lines mention apple? ' + context)\nprint(r)"),
    repl("FINAL(r.strip())"),
]


def policy_with_subcall(request: dict[str, Any]) -> Any:
    """Root turns ask a sub-model once; the sub-call (its prompt starts "SUBQ") answers."""
    messages = request["body"]["messages"]
    if last_user(messages).startswith("SUBQ"):
        return openai_reply(str(ANSWER), model=request["body"]["model"])
    turn = turn_of(messages)
    return openai_reply(SUB_REPLIES[min(turn, 1)], model=request["body"]["model"])


async def test_sub_calls_go_to_the_policy_directly_and_are_not_training_turns(
    tasks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "upstream-key")
    server = FakeServer(policy_with_subcall)
    try:
        episode = await play_one(env_for(tasks_file, tmp_path / "store.db"), server.port)
    finally:
        server.close()
    (trace,) = episode.traces
    assert trace.rewards["rlmd_reward"].score == 1.0
    assert trace.metrics["subcalls"] == 1.0 and trace.metrics["iterations"] == 2.0
    # the server answered three requests (two root turns, one sub-call, all with its own
    # key and the policy's name); verifiers recorded only the two root turns
    assert len(server.requests) == 3 and len(trace.calls) == 2
    assert {r["headers"]["authorization"] for r in server.requests} == {"Bearer upstream-key"}
    assert {r["body"]["model"] for r in server.requests} == {"policy-m"}
    recorded = [text(m.content) for b in trace.branches for m in b.messages]
    assert not any(t.startswith("SUBQ") for t in recorded)
    assert any("SUBQ" in last_user(r["body"]["messages"])[:4] for r in server.requests)


def test_a_bad_task_file_is_refused_when_the_taskset_loads(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": 1, "scorer": "numeric"}\n')  # no context
    env = env_for(bad, tmp_path / "store.db")
    with pytest.raises(TaskFileError, match="bad.jsonl"):
        list(env.taskset)
    assert bad.read_text().startswith('{"question"')  # the file is left as it was
    assert not os.path.exists(tmp_path / "store.db")  # nothing ran


async def test_an_unknown_sub_model_fails_the_rollout_before_any_call(
    tasks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "upstream-key")
    server = FakeServer(policy)
    try:
        env = env_for(tasks_file, tmp_path / "store.db", sub_model="no-such-model")
        episode = await play_one(env, server.port)
    finally:
        server.close()
    (trace,) = episode.traces
    # an error on the trace naming the model, not a reward of 0; no call, no run recorded
    assert not trace.ok and "no-such-model" in " ".join(e.message for e in trace.errors)
    assert "rlmd_reward" not in trace.rewards or trace.rewards["rlmd_reward"] is None
    assert server.requests == [] and not (tmp_path / "store.db").exists()


@pytest.mark.parametrize(
    ("harness", "said"),
    [
        ({"sandbox": "nope"}, "unknown rlmd sandbox backend 'nope'; choose one of: subprocess"),
        ({"max_depth": 0}, "max_depth"),
        ({"max_seconds": float("inf")}, "max_seconds must be a number of seconds > 0, got inf"),
    ],  # fmt: skip
)
def test_a_harness_setting_every_rollout_would_fail_on_is_refused_when_the_config_loads(
    tasks_file: Path, tmp_path: Path, harness: dict[str, Any], said: str
) -> None:
    # These used to pass the config and fail each rollout in turn (a whole eval of errors).
    with pytest.raises(ValidationError, match=said):
        env_for(tasks_file, tmp_path / "store.db", **harness)
    assert not (tmp_path / "store.db").exists()  # nothing ran


async def test_a_store_that_cannot_be_opened_fails_the_rollout_naming_the_setting(
    tasks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review20: a store path under a file failed with a bare ``FileExistsError``."""
    monkeypatch.setenv(KEY_VAR, "upstream-key")
    blocker = tmp_path / "a-file"
    blocker.write_text("kept")
    server = FakeServer(policy)
    try:
        episode = await play_one(env_for(tasks_file, blocker / "store.db"), server.port)
    finally:
        server.close()
    (trace,) = episode.traces
    said = " ".join(e.message for e in trace.errors)
    assert not trace.ok and "--env.agent.harness.store" in said and str(blocker) in said
    assert server.requests == [] and blocker.read_text() == "kept"

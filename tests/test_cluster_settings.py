"""The ``[cluster]`` table and the local side of the cluster code (no Ray needed)."""

from __future__ import annotations

import asyncio

import pytest

from rlmd import config
from rlmd.cluster import ClusterSettings, settings_of_user
from rlmd.cluster.ledger import NodeLedger, Spend, needs_admission
from rlmd.engine import Budget, BudgetExhausted


def test_the_user_config_cluster_table_is_read(rlmd_home):
    (rlmd_home / "config.toml").write_text(
        '[cluster]\nengine = "ray"\naddress = "ray://head:10001"\nenv = ["OPENAI_API_KEY"]\n'
    )
    assert settings_of_user() == ClusterSettings("ray", "ray://head:10001", ("OPENAI_API_KEY",))


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"engine": "dask"}, "engine must be one of ray"),
        ({"adress": "auto"}, "unknown key(s) ['adress']"),
        ({"address": ""}, "address must be a non-empty string"),
        ({"env": "OPENAI_API_KEY"}, "env must be a list"),
    ],
)
def test_a_bad_cluster_table_is_refused_with_its_key(table, says):
    with pytest.raises(ValueError, match="\\[cluster\\]") as caught:
        ClusterSettings.from_table(table)
    assert says in str(caught.value)


def test_a_project_config_may_not_send_runs_to_a_cluster(tmp_path):
    (tmp_path / ".rlmd.toml").write_text('[cluster]\naddress = "ray://evil:10001"\n')
    with pytest.raises(ValueError, match="may not set \\[cluster\\]"):
        config.load(tmp_path)


def test_a_node_ledger_adds_the_rest_of_the_trees_spend_to_its_own():
    ledger = NodeLedger(Budget(max_tokens=100, max_subcalls=5), 0.0, elapsed_s=0.0)
    ledger.spend(30, 0.0)
    ledger.subcalls += 1
    assert (ledger.tokens, ledger.subcalls) == (30, 1)
    ledger.update(2, Spend(tokens=60, subcalls=3), None)
    ledger.update(1, Spend(tokens=0), None)  # an older push arriving late changes nothing
    assert (ledger.tokens, ledger.subcalls, ledger.own) == (90, 4, Spend(30, 0.0, 1))
    ledger.check()
    ledger.spend(10, 0.0)
    with pytest.raises(BudgetExhausted) as caught:
        ledger.check()
    assert caught.value.status == "max_tokens"


def test_the_roots_exhaustion_stops_a_node_at_its_next_check():
    ledger = NodeLedger(Budget(max_usd=1.0), 0.0, elapsed_s=0.0)
    ledger.update(1, Spend(usd=0.5), ("max_usd", "spend budget used up"))
    with pytest.raises(BudgetExhausted) as caught:
        ledger.check()
    assert caught.value.status == "max_usd"


def test_a_node_ledger_counts_the_wall_clock_from_the_roots_start():
    ledger = NodeLedger(Budget(max_seconds=10), 0.0, elapsed_s=9.5)
    assert ledger.remaining_seconds() is not None and ledger.remaining_seconds() <= 0.5


async def test_a_node_call_under_a_token_limit_runs_only_once_the_root_admits_it():
    ledger = NodeLedger(Budget(max_tokens=100), 0.0, elapsed_s=0.0)
    call = asyncio.ensure_future(ledger.admit("c1", "root"))
    await asyncio.sleep(0)
    assert not call.done() and set(ledger.waiting) == {"c1"}
    ledger.answer("unknown", None)  # a word for a call nobody waits for is dropped
    assert not call.done()
    ledger.answer("c1", None)
    await call
    assert ledger.waiting == {} and ledger.exhausted is None


async def test_a_node_call_the_root_refuses_ends_the_nodes_runs_with_the_trees_limit():
    ledger = NodeLedger(Budget(max_tokens=100), 0.0, elapsed_s=0.0)
    call = asyncio.ensure_future(ledger.admit("c1", "sub"))
    await asyncio.sleep(0)
    ledger.answer("c1", ("max_tokens", "token budget used up (120 of 100 tokens)"))
    with pytest.raises(BudgetExhausted) as caught:
        await call
    assert caught.value.status == "max_tokens"
    with pytest.raises(BudgetExhausted):  # every later check on this node stops too
        ledger.check()
    with pytest.raises(BudgetExhausted):  # and no later call waits for a word
        await ledger.admit("c2", "root")
    assert ledger.waiting == {}


async def test_the_roots_exhaustion_push_ends_the_calls_waiting_for_admission():
    ledger = NodeLedger(Budget(max_usd=1.0), 0.0, elapsed_s=0.0)
    calls = [asyncio.ensure_future(ledger.admit(f"c{i}", "root")) for i in range(3)]
    await asyncio.sleep(0)
    ledger.update(5, Spend(usd=1.2), ("max_usd", "spend budget used up"))
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [getattr(r, "status", None) for r in results] == ["max_usd"] * 3
    assert ledger.waiting == {}


@pytest.mark.parametrize(
    ("budget", "role", "waits"),
    [
        (Budget(), "root", False),  # no shared limit: nothing to hold
        (Budget(max_seconds=60), "sub", False),  # the wall clock is the node's own
        (Budget(max_subcalls=5), "root", False),
        (Budget(max_subcalls=5), "sub", True),
        (Budget(max_tokens=100), "extraction", False),  # the fallback is never checked
        (Budget(max_tokens=100), "compaction", True),
    ],
)
async def test_which_node_calls_wait_for_the_root(budget, role, waits):
    assert needs_admission(budget, role) is waits
    ledger = NodeLedger(budget, 0.0, elapsed_s=0.0)
    call = asyncio.ensure_future(ledger.admit("c", role))
    await asyncio.sleep(0)
    assert call.done() is not waits
    ledger.answer("c", None)
    await call

"""The ``[cluster]`` table and the local side of the cluster code (no Ray needed)."""

from __future__ import annotations

import pytest

from rlmd import config
from rlmd.cluster import ClusterSettings, settings_of_user
from rlmd.cluster.ledger import NodeLedger, Spend
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

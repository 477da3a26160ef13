"""The VS Code extension's budget settings accept what the engine's :class:`Budget` accepts.

The extension sends ``rlmd.budgets.*`` to the daemon as they are; a bound looser than
Budget's lets a user save a value every question then fails on (review18: ``maxDepth`` 0,
``maxSeconds`` / ``maxTokens`` / ``maxUsd`` 0 were allowed by the settings schema).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlmd.engine.budget import Budget, BudgetError

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "vscode" / "package.json"


def _budget_settings() -> dict[str, dict]:
    props = json.loads(PACKAGE.read_text())["contributes"]["configuration"]["properties"]
    prefix = "rlmd.budgets."
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}


def _field(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def test_every_budget_setting_is_a_budget_field() -> None:
    settings = _budget_settings()
    assert len(settings) >= 6
    for name in settings:
        assert hasattr(Budget(), _field(name)), name


@pytest.mark.parametrize("name", sorted(_budget_settings()))
def test_budget_setting_bounds_match_the_engine(name: str) -> None:
    spec, field = _budget_settings()[name], _field(name)
    integer = "integer" in spec["type"]
    if "exclusiveMinimum" in spec:
        low = spec["exclusiveMinimum"]
        with pytest.raises(BudgetError):  # the bound itself is outside the schema and Budget
            Budget(**{field: low})
        Budget(**{field: low + (1 if integer else 0.5)})
    else:
        low = spec["minimum"]
        Budget(**{field: low})  # the least the schema allows runs
        with pytest.raises(BudgetError):
            Budget(**{field: low - 1})

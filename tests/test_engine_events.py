"""The typed engine events: consumers match on classes, never on kind strings, and the stored
or wire dict of every event reads back as the same event."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from rlmd.engine.events import (
    EVENT_TYPES,
    CellFinished,
    Event,
    ModelCallFinished,
    RunStarted,
    from_dict,
    never_ran,
    type_of,
)
from rlmd.engine.usage import LiveUsage
from rlmd.sandbox.base import VarInfo

ROOT = Path(__file__).resolve().parents[1]
DOTTED_KINDS = {t.kind for t in EVENT_TYPES if "." in t.kind}


def kind_literals(path: Path) -> list[str]:
    """``file:line: 'kind'`` for every string constant in ``path`` that is an event kind."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in DOTTED_KINDS
    ]


def test_nothing_outside_the_engine_names_an_event_kind():
    """Consumers match on event classes. (``"compaction"`` is also the store's node kind, so
    only the dotted kinds can be told apart by a scan.)"""
    files = [
        p
        for folder in ("rlmd", "tui", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if (ROOT / "rlmd" / "engine") not in p.parents
    ]
    assert len(files) > 50
    found = [hit for p in files for hit in kind_literals(p)]
    assert found == []


def test_the_scan_finds_a_kind_literal(tmp_path):
    bad = ROOT / "tests" / "test_engine_events.py"  # this file names none outside strings
    assert kind_literals(bad) == []
    probe = ROOT / "rlmd" / "engine" / "events.py"
    assert kind_literals(probe)  # the engine itself declares them


def example(cls: type[Event]) -> Event:
    """An event of ``cls`` with a non-default value in every field it has."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name in ("run_id", "depth", "node_id", "parent_id", "ts", "reached_engine"):
            continue
        if f.name == "variables":
            values[f.name] = [VarInfo(name="x", type="int", size=3, preview="1")]
        elif f.name in ("messages",):
            values[f.name] = [{"role": "user", "content": "hi"}]
        elif f.name in ("context", "budget", "usage", "models"):
            values[f.name] = {"k": 1}
        elif f.name == "sandbox":
            values[f.name] = {"kind": "subprocess", "isolation": None}
        elif f.type in ("int", "int | None"):
            values[f.name] = 7
        elif f.type in ("float", "float | None"):
            values[f.name] = 0.5
        elif f.type == "bool":
            values[f.name] = True
        elif f.name == "error" and cls is ModelCallFinished:
            values[f.name] = None  # a finished call; the failure shape is tested below
        else:
            values[f.name] = f"{f.name}-value"
    return cls(run_id="r1", depth=1, node_id="n1", parent_id="p1", ts=12.5, **values)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.kind)
def test_every_event_reads_back_from_its_json(cls):
    event = example(cls)
    wire = json.loads(json.dumps(event.to_dict()))
    assert list(wire) == ["kind", "run_id", "depth", "node_id", "parent_id", "data", "ts"]
    assert wire["kind"] == cls.kind and type_of(cls.kind) is cls
    again = from_dict(wire)
    assert again == event
    assert json.dumps(again.to_dict()) == json.dumps(event.to_dict())


def test_a_failed_model_call_and_a_run_that_never_ran_keep_their_short_shapes():
    failed = ModelCallFinished(run_id="r", depth=0, role="sub", model="m", error="boom")
    assert failed.data == {"role": "sub", "model": "m", "error": "boom"}
    started, finished = never_ran(
        "r9",
        question="q",
        sandbox="subprocess",
        budget={},
        workspace="/w",
        status="cancelled",
        error="why",
    )
    assert list(started.data) == [
        "question",
        "workspace",
        "pid",
        "budget",
        "sandbox",
        "models",
        "root_run_id",
    ]
    assert from_dict(started.to_dict()) == started and isinstance(started, RunStarted)
    assert finished.data["usage"] is None and finished.data["status"] == "cancelled"
    assert from_dict({"kind": "no.such", "run_id": "r"}) is None


def test_cell_finished_carries_the_cell_result():
    from rlmd.sandbox.base import CellResult

    result = CellResult(stdout="out", error=None, variables=[VarInfo("a", "int")], duration_s=1.0)
    ev = CellFinished.of(result, index=2, code="a = 1", run_id="r", depth=0)
    assert (ev.stdout, ev.index, ev.variables[0].name) == ("out", 2, "a")
    assert ev.data["variables"] == [{"name": "a", "type": "int", "size": None, "preview": ""}]


def test_live_usage_counts_calls_failed_ones_too_and_child_runs():
    live = LiveUsage()
    live.observe(
        ModelCallFinished(run_id="r", depth=0, input_tokens=5, output_tokens=2, cost_usd=0.1)
    )
    live.observe(ModelCallFinished(run_id="r", depth=0, error="boom"))
    live.observe(RunStarted(run_id="c", depth=1, parent_run_id="r"))
    live.observe(RunStarted(run_id="r", depth=0))
    assert live.to_dict() == {
        "input_tokens": 5,
        "output_tokens": 2,
        "cost_usd": 0.1,
        "model_calls": 2,
        "runs": 2,
    }

"""A synthetic engine for store tests: typed events of a three-depth run, recorded into any
sink, without running models or sandboxes (shared by tests/test_store.py and test_cli_render.py)."""

from __future__ import annotations

from typing import Any

from rlmd.engine.events import (
    CellFinished,
    CellStarted,
    Compaction,
    Event,
    IterationStarted,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunStarted,
    new_id,
)
from rlmd.sandbox.base import VarInfo
from rlmd.store import Store

# -- a synthetic engine ----------------------------------------------------------------------


class Emitter:
    """Emits the events of one run the way the engine does."""

    def __init__(self, sink: Any, run_id: str | None = None, depth: int = 0) -> None:
        self.sink = sink
        self.run_id = run_id or new_id()
        self.depth = depth
        self.t = 1_700_000_000.0 + depth * 100
        self.iterations = 0

    def emit(
        self,
        event_type: type[Event],
        node_id: str | None = None,
        parent_id: str | None = None,
        **data: Any,
    ) -> None:
        self.t += 1.0
        self.sink(
            event_type(
                run_id=self.run_id,
                depth=self.depth,
                node_id=node_id,
                parent_id=parent_id,
                ts=self.t,
                **data,
            )
        )

    def start(
        self, question: str, *, parent: Emitter | None = None, cell: str | None = None, **extra: Any
    ) -> None:
        data = {
            "question": question,
            "context": {"type": "str", "chars": 1000},
            "models": {
                "root": {"name": "root-m", "provider": "scripted"},
                "sub": {"name": "sub-m"},
            },
            "sandbox": {"kind": "inprocess", "isolation": None},
            "budget": {"max_iterations": 10},
            "parent_run_id": parent.run_id if parent else None,
            "parent_node_id": cell,
            "root_run_id": None,
        }
        self.emit(RunStarted, **{**data, **extra})

    def iteration(self, index: int) -> str:
        self.iterations += 1
        node = new_id()
        self.emit(IterationStarted, node, None, index=index)
        return node

    def call(
        self, parent: str, role: str, messages: list[dict], response: str, tin: int, tout: int
    ) -> str:
        node = new_id()
        base = {
            "role": role,
            "model": "root-m" if role == "root" else "sub-m",
            "messages": messages,
        }
        self.emit(ModelCallStarted, node, parent, **base)
        self.emit(
            ModelCallFinished,
            node,
            parent,
            role=role,
            model=base["model"],
            response=response,
            input_tokens=tin,
            output_tokens=tout,
            latency_s=0.5,
            cost_usd=tin * 1e-6 + tout * 2e-6,
            finish_reason="stop",
            error=None,
        )
        return node

    def cell_start(self, it: str, index: int, code: str) -> str:
        node = new_id()
        self.emit(CellStarted, node, it, index=index, code=code)
        return node

    def cell_finish(
        self,
        node: str,
        it: str,
        index: int,
        code: str,
        stdout: str = "",
        error: str | None = None,
        timed_out: bool = False,
    ) -> None:
        self.emit(
            CellFinished,
            node,
            it,
            index=index,
            code=code,
            stdout=stdout,
            stderr="",
            error=error,
            final=None,
            variables=[VarInfo(name="x", type="int", size=None, preview="1")],
            restored=[],
            duration_s=0.25,
            timed_out=timed_out,
            kernel_restarted=timed_out,
            lost_variables=[],
        )

    def finish(
        self,
        status: str = "completed",
        answer: str | None = None,
        usage: dict | None = None,
        error: str | None = None,
    ) -> None:
        self.emit(
            RunFinished,
            status=status,
            answer=answer,
            answer_source="final" if answer else None,
            usage=usage,
            iterations=self.iterations,
            error=error,
        )


USAGE = {
    "total": {"input_tokens": 430, "output_tokens": 86, "calls": 6, "cost_usd": 0.000602},
    "by_model": {
        "root-m": {"input_tokens": 380, "output_tokens": 76, "calls": 5, "cost_usd": 0.000532},
        "sub-m": {"input_tokens": 50, "output_tokens": 10, "calls": 1, "cost_usd": 0.00007},
    },
    "by_depth": {
        "0": {"input_tokens": 250, "output_tokens": 50, "calls": 3, "cost_usd": 0.00035},
        "1": {"input_tokens": 100, "output_tokens": 20, "calls": 2, "cost_usd": 0.00014},
        "2": {"input_tokens": 80, "output_tokens": 16, "calls": 1, "cost_usd": 0.000112},
    },
    "wall_time_s": 12.5,
}


def record_three_depths(store: Store) -> dict[str, str]:
    """A root run with 2 iterations; iteration 2's cell starts a child run whose cell starts a
    grandchild. Returns the ids by name."""
    ids: dict[str, str] = {}
    root = Emitter(store.record)
    ids["root"] = root.run_id
    root.start("How many zebras are in the context?", workspace="/proj")
    sys_msgs = [
        {"role": "system", "content": "You are an RLM."},
        {"role": "user", "content": "question"},
    ]
    # iteration 1: root call, a cell with a sub-call, a cell with an error
    it1 = ids["it1"] = root.iteration(0)
    ids["call1"] = root.call(it1, "root", sys_msgs, "```repl\nprint(llm_query('x'))\n```", 100, 20)
    c1 = ids["cell1"] = root.cell_start(it1, 0, "print(llm_query('count the zebras'))")
    ids["sub1"] = root.call(
        c1, "sub", [{"role": "user", "content": "count the zebras"}], "three", 50, 10
    )
    root.cell_finish(
        c1, it1, 0, "print(llm_query('count the zebras'))", stdout="the answer is three zebras\n"
    )
    c2 = ids["cell2"] = root.cell_start(it1, 1, "print(undefined_name)")
    root.cell_finish(
        c2,
        it1,
        1,
        "print(undefined_name)",
        error="Traceback (most recent call last):\nNameError: name 'undefined_name' is not defined",
    )
    # iteration 2: root call, a cell that calls rlm_query -> child run (depth 1)
    it2 = ids["it2"] = root.iteration(1)
    ids["call2"] = root.call(
        it2,
        "root",
        [{"role": "user", "content": "output: ..."}],
        "```repl\nrlm_query('q')\n```",
        150,
        30,
    )
    c3 = ids["cell3"] = root.cell_start(it2, 0, "print(rlm_query('sub question'))")

    child = Emitter(store.record, depth=1)
    ids["child"] = child.run_id
    child.start("sub question", parent=root, cell=c3, root_run_id=root.run_id)
    cit = ids["child_it"] = child.iteration(0)
    child.call(cit, "root", sys_msgs, "```repl\nrlm_query('deeper')\n```", 100, 20)
    cc = ids["child_cell"] = child.cell_start(cit, 0, "print(rlm_query('deeper'))")

    grand = Emitter(store.record, depth=2)
    ids["grand"] = grand.run_id
    grand.start("deeper question", parent=child, cell=cc, root_run_id=root.run_id)
    git = grand.iteration(0)
    grand.call(git, "root", sys_msgs, "```repl\nFINAL('42')\n```", 80, 16)
    gc = grand.cell_start(git, 0, "FINAL('42')")
    grand.cell_finish(gc, git, 0, "FINAL('42')")
    grand.finish(answer="42")

    child.cell_finish(cc, cit, 0, "print(rlm_query('deeper'))", stdout="42\n")
    child.finish(answer="42 from child")

    root.cell_finish(c3, it2, 0, "print(rlm_query('sub question'))", stdout="42 from child\n")
    ids["compaction"] = new_id()
    root.emit(Compaction, ids["compaction"], it2, summarised_messages=4, summary="short summary")
    root.finish(answer="42", usage=USAGE)
    return ids

"""What runs on every node of a cluster: :class:`NodeRunner`, one Ray actor per node and
executor, runs the child runs sent to that node, each in its own sandbox made there (the
run's backend; the node's isolation is recorded in its ``sandbox.started`` event), and
streams their events back to the root as they happen.

A run here is an ordinary :class:`~rlmd.engine.loop.RLMRun` with a
:class:`~rlmd.cluster.ledger.NodeLedger` and the local executor: its own child runs stay on
this node. API keys reach this process only through the job's runtime environment; the
sandbox's kernel gets a clean environment (:mod:`rlmd.sandbox.process.launch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

from rlmd.cluster.ledger import NodeLedger, Spend
from rlmd.context import Context
from rlmd.engine.config import RunConfig
from rlmd.engine.events import Event, EventBus, RunStarted, SandboxStarted
from rlmd.engine.executor import LocalExecutor
from rlmd.engine.loop import RLMRun
from rlmd.engine.metered import Runtime
from rlmd.engine.usage import Usage
from rlmd.models.base import Model


class _Tree:
    """One tree's state on this node: its ledger, config and models, while a run of it is
    here."""

    def __init__(self, ledger: NodeLedger, config: RunConfig, get_model: Callable[[str], Model]):
        self.ledger = ledger
        self.config = config
        self.get_model = get_model
        self.runs = 0


class NodeRunner:
    """Runs child runs on this node (a Ray actor's class; see the module docstring)."""

    def __init__(self) -> None:
        import ray

        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.host = socket.gethostname()
        self.trees: dict[str, _Tree] = {}

    async def info(self, backend: str = "subprocess") -> dict[str, Any]:
        """This node: ``node_id``, ``host``, ``pid``, ``rlmd`` (version), ``python``, and
        ``sandbox``: a real round trip of ``backend`` here (``ok``, ``detail``,
        ``isolation``)."""
        import sys

        import rlmd
        from rlmd.server.doctor import sandbox_roundtrip

        try:
            detail, record = await asyncio.wait_for(sandbox_roundtrip(backend, {}), 30)
            sandbox = {"backend": backend, "ok": True, "detail": detail, "isolation": record}
        except Exception as exc:  # reported by the doctor, not raised
            sandbox = {"backend": backend, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}
        return {
            "node_id": self.node_id,
            "host": self.host,
            "pid": os.getpid(),
            "rlmd": rlmd.__version__,
            "python": sys.version.split()[0],
            "sandbox": sandbox,
        }

    async def tree_update(
        self, tree: str, seq: int, others: Spend, exhausted: tuple[str, str] | None
    ) -> None:
        """The root's push: what the rest of ``tree`` spent, and its exhaustion if any.
        (``async``: it runs on the actor's event loop, where the runs wait.)"""
        state = self.trees.get(tree)
        if state is not None:
            state.ledger.update(seq, others, exhausted)

    async def admit(self, tree: str, call_id: str, refused: tuple[str, str] | None) -> None:
        """The root's word on model call ``call_id`` of ``tree`` (see
        :meth:`~rlmd.cluster.ledger.NodeLedger.admit`)."""
        state = self.trees.get(tree)
        if state is not None:
            state.ledger.answer(call_id, refused)

    async def run_child(
        self,
        job: dict[str, Any],
        shared: dict[str, Any],
        context: Context,
    ) -> AsyncIterator[dict[str, Any]]:
        """Run one child run here; yields ``{"events": [event dicts]}`` as they happen, then
        ``{"result": RunResult fields}``. Cancelled (``ray.cancel``): the run is cancelled,
        its sandbox closed, before this returns.

        ``job``: ``tree``, ``run_id``, ``question``, ``depth``, ``parent_run_id``,
        ``parent_node_id``, ``root_run_id``, ``tools``, ``model`` (a name or ``None``) and
        ``ledger`` (``seq``, ``others`` :class:`Spend`, ``elapsed_s``, ``reserve_s``,
        ``exhausted``). ``shared``: the tree's ``config`` and ``models`` (its model lookup)
        as object refs, fetched only by the tree's first run on this node.
        """
        loaded = None
        if job["tree"] not in self.trees:
            loaded = (await shared["config"], await shared["models"])
        state = self._join(job, loaded)
        pending: list[dict[str, Any]] = []
        wake = asyncio.Event()
        where = {"id": self.node_id, "host": self.host, "pid": os.getpid()}

        def sink(event: Event) -> None:
            if isinstance(event, RunStarted | SandboxStarted):  # record where it ran
                sandbox: Any = {**(event.sandbox or {}), "node": where}
                event = dataclasses.replace(event, sandbox=sandbox)
            pending.append(event.to_dict())
            wake.set()

        cfg = state.config
        from rlmd.sandbox import create_sandbox

        rt = Runtime(
            cfg,
            state.get_model,
            lambda: create_sandbox(cfg.sandbox, **cfg.sandbox_options),
            EventBus(sink),
            state.ledger,
            LocalExecutor(),
        )
        run = RLMRun(
            rt,
            job["question"],
            context,
            depth=job["depth"],
            parent_run_id=job["parent_run_id"],
            parent_node_id=job["parent_node_id"],
            root_run_id=job["root_run_id"],
            usage=Usage(),
            tools=job["tools"],
            model=state.get_model(job["model"]) if job["model"] else None,
            run_id=job["run_id"],
        )
        task = asyncio.ensure_future(run.run())
        try:
            while True:
                if not pending and not task.done():
                    wake.clear()
                    waiter = asyncio.ensure_future(wake.wait())
                    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                if pending:
                    batch, pending[:] = list(pending), []
                    yield {"events": batch}
                elif task.done():
                    break
            yield {"result": dataclasses.asdict(task.result())}
        finally:
            if not task.done():  # cancelled from the root: end the run, close its sandbox
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            state.runs -= 1
            if state.runs == 0:
                self.trees.pop(job["tree"], None)

    def _join(
        self, job: dict[str, Any], loaded: tuple[RunConfig, Callable[[str], Model]] | None
    ) -> _Tree:
        """The tree's state here, made (from ``loaded``: config, model lookup) for its first
        run on this node."""
        led = job["ledger"]
        state = self.trees.get(job["tree"])
        if state is None:
            assert loaded is not None, "a tree's first run here brings its config"
            config, get_model = loaded
            ledger = NodeLedger(config.budget, led["reserve_s"], led["elapsed_s"])
            state = self.trees[job["tree"]] = _Tree(ledger, config, get_model)
        state.ledger.update(led["seq"], led["others"], led["exhausted"])
        state.runs += 1
        return state

"""The Ray executor: a tree's child runs on the nodes of a Ray cluster (the ``ray`` extra).

One :class:`~rlmd.cluster.node.NodeRunner` actor per alive node (pinned to it, no CPU
reserved: a child run waits on models and its sandbox, not on Ray's CPU slots) takes the
child runs the executor places on it, the least busy node first. For each child run:

- the tree's config and models go to the object store once per tree, a large context
  (``CONTEXT_INLINE_CHARS`` or more) once per distinct value: every child that gets the same
  context shares one object;
- the child's events stream back (a Ray streaming generator) and are emitted on the root's
  event bus, so the store records one tree and the TUI and VS Code follow it live; each
  remote model call is spent from the root's ledger and added to the parent's usage;
- after every change of the tree's spend the root pushes it to the nodes running the tree;
  under a token, USD or sub-call limit it also admits each remote model call before it runs
  (:mod:`rlmd.cluster.ledger` states the overshoot bound);
- cancelling the parent cancels the Ray task; the node cancels the run, which closes its
  sandbox (the kernel is interrupted and killed);
- a node lost under a child run (its actor died) ends the run, and every run started under
  it on that node, with status ``interrupted`` and an error naming the node; their kernels
  exit with the node's processes (a kernel exits when its host goes away). Not retried:
  a model call may have been paid for.

Sub-call batches (``llm_query_batched``) run where the run that asked for them runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import logging
import os
import pickle
import socket
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rlmd.cluster.ledger import Spend, needs_admission
from rlmd.cluster.node import NodeRunner
from rlmd.cluster.settings import ClusterSettings
from rlmd.context import Context
from rlmd.engine.budget import BudgetExhausted, Ledger
from rlmd.engine.config import RunResult
from rlmd.engine.events import (
    Event,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunStarted,
    from_dict,
    new_id,
)
from rlmd.engine.executor import gather_bounded
from rlmd.engine.host import ChildRequest
from rlmd.engine.metered import Runtime
from rlmd.engine.usage import Usage

CONTEXT_INLINE_CHARS = 64_000
"""A context of fewer characters travels with its task; a larger one goes to the object
store once (per distinct value) and every child that gets it shares it."""

_Node = ray.remote(num_cpus=0, max_restarts=0)(NodeRunner)
"""The node actor (async: up to 1,000 child runs at once)."""


def connect(address: str = "auto", env: Sequence[str] = ()) -> None:
    """Join the Ray cluster at ``address`` as a driver (once per process), passing the
    variables named in ``env`` (API keys) to the workers' runtime environment.

    Raises:
        ValueError: a variable named in ``env`` is not set here.
        ConnectionError: no cluster answers at ``address`` (Ray's message).
    """
    if ray.is_initialized():
        return
    missing = [name for name in env if name not in os.environ]
    if missing:
        raise ValueError(
            f"[cluster] env names {', '.join(missing)}, not set in this environment: set "
            "them here, they are passed to the workers"
        )
    _reachable(address)
    _cluster_news_to_stderr()
    runtime_env = {"env_vars": {name: os.environ[name] for name in env}} if env else None
    ray.init(
        address=address,
        namespace="rlmd",
        runtime_env=runtime_env,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


def _cluster_news_to_stderr() -> None:
    """Ray's driver prints the cluster's error messages ("node ... marked dead") to stdout;
    rlmd's stdout is the answer (``rlmd run --json``), so they go to stderr."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    if worker is None or original is None or getattr(original, "rlmd_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.rlmd_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when a ``HOST:PORT`` address does not accept connections (``ray.init``
    would retry for minutes).

    Raises:
        ConnectionError: nothing listens there.
    """
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address}: {exc}") from None


@dataclass
class ExecutorStats:
    """What the executor measured (for benchmarks and ``rlmd doctor``).

    Attributes:
        dispatched: child runs sent to nodes.
        by_node: child runs sent, by node id.
        context_puts: contexts put in the object store.
        event_latency_s: per remote event, seconds from its emission on the node to its
            emission on the root's bus.
        dispatch_s: per child run, seconds from :meth:`RayExecutor.start_child` to its
            ``run.started`` event arriving at the root.
    """

    dispatched: int = 0
    by_node: dict[str, int] = field(default_factory=dict)
    context_puts: int = 0
    event_latency_s: list[float] = field(default_factory=list)
    dispatch_s: list[float] = field(default_factory=list)


@dataclass
class _Tree:
    """What the executor keeps for one tree: its refs, and the spend seen from each node."""

    key: str
    ledger: Ledger
    config_ref: Any
    models_ref: Any
    by_node: dict[str, Spend] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    pushed: dict[str, tuple[Spend, tuple[str, str] | None]] = field(default_factory=dict)
    seq: int = 0


class RayExecutor:
    """Child runs on a Ray cluster (see the module docstring); sub-call batches local.

    Args:
        address: the cluster (see :class:`~rlmd.cluster.settings.ClusterSettings`).
        env: environment variables passed to the workers (API keys).
        nodes: only these node ids take child runs (default: every alive node).
    """

    kind = "ray"

    def __init__(
        self, address: str = "auto", *, env: Sequence[str] = (), nodes: Sequence[str] | None = None
    ) -> None:
        self.address = address
        self.env = tuple(env)
        self.only = set(nodes) if nodes else None
        self.stats = ExecutorStats()
        self._actors: dict[str, Any] = {}
        self._load: dict[str, int] = {}
        self._trees: dict[int, _Tree] = {}
        self._contexts: OrderedDict[str, Any] = OrderedDict()
        self._turn = itertools.count()
        self._starting: asyncio.Lock | None = None

    @classmethod
    def from_settings(cls, settings: ClusterSettings, address: str | None = None) -> RayExecutor:
        """The executor of a ``[cluster]`` table (``address`` overrides its address)."""
        return cls(address or settings.address, env=settings.env)

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> list[str]:
        """Join the cluster and start one node actor per alive node (idempotent); returns
        the node ids that take child runs.

        Raises:
            ConnectionError / ValueError: see :func:`connect`.
            RuntimeError: no alive node may take child runs.
        """
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not ray.is_initialized():
                # On this thread (once, ~1 s): Ray sets its signal handling up on the main one.
                connect(self.address, self.env)
            if not self._actors:
                await self._add_nodes()
            if not self._actors:
                raise RuntimeError(f"no alive Ray node may take child runs at {self.address}")
            return sorted(self._actors)

    async def _add_nodes(self) -> None:
        for node in ray.nodes():
            node_id = node["NodeID"]
            if not node["Alive"] or node_id in self._actors:
                continue
            if self.only is not None and node_id not in self.only:
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            self._actors[node_id] = _Node.options(scheduling_strategy=strategy).remote()
            self._load[node_id] = 0
        # One cheap call each: the actors are up before the first child run is timed, and a
        # node that died before the cluster noticed (its actor dies at once) is left out.
        nodes = list(self._actors)
        answers = await asyncio.gather(
            *(self._actors[n].tree_update.remote("", 0, Spend(), None) for n in nodes),
            return_exceptions=True,
        )
        for node_id, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, RayError):
                self._actors.pop(node_id, None)
            elif isinstance(answer, BaseException):
                raise answer

    def close(self) -> None:
        """Stop the node actors (a running child run on them ends as lost)."""
        for actor in self._actors.values():
            ray.kill(actor)
        self._actors.clear()

    async def nodes_info(self) -> list[dict[str, Any]]:
        """Every node actor's :meth:`~rlmd.cluster.node.NodeRunner.info` (after :meth:`start`)."""
        return list(await asyncio.gather(*(a.info.remote() for a in self._actors.values())))

    # -- the executor seam ------------------------------------------------------------------
    async def run_batch(self, calls: list[Awaitable[str]], limit: int) -> list[str]:
        return await gather_bounded(calls, limit)

    async def start_child(self, rt: Runtime, request: ChildRequest) -> RunResult:
        began = time.time()
        run_id = new_id()
        try:
            await self.start()
            tree = self._tree(rt, request)
            context = self._context_arg(request.context)
        except Exception as exc:  # cannot reach the cluster or ship the run: the child fails
            return _ended(
                run_id,
                request,
                "failed",
                f"cannot send the child run to the cluster: {type(exc).__name__}: {exc}",
            )
        node_id = self._pick()
        actor = self._actors[node_id]
        job = {
            "tree": tree.key,
            "run_id": run_id,
            "question": request.question,
            "depth": request.depth,
            "parent_run_id": request.parent_run_id,
            "parent_node_id": request.parent_node_id,
            "root_run_id": request.root_run_id,
            "tools": request.tools,
            "model": request.model.name if request.model is not None else None,
            "ledger": self._ledger_share(tree, node_id),
        }
        self.stats.dispatched += 1
        self.stats.by_node[node_id] = self.stats.by_node.get(node_id, 0) + 1
        self._load[node_id] += 1
        tree.live[node_id] = tree.live.get(node_id, 0) + 1
        stream = actor.run_child.options(num_returns="streaming").remote(
            job, {"config": tree.config_ref, "models": tree.models_ref}, context
        )
        seen = _Seen(run_id, began)
        try:
            async for ref in stream:
                item = await ref
                for data in item.get("events", ()):
                    self._absorb(rt, tree, node_id, request, seen, data)
                if "result" in item:
                    return RunResult(**item["result"])
            return self._lost(rt, seen, request, node_id, "the node sent no result")
        except asyncio.CancelledError:
            ray.cancel(stream)  # the node cancels the run; its sandbox closes there
            self._close_open(rt, seen, "cancelled", "the run was cancelled")
            raise
        except TaskCancelledError:
            self._close_open(rt, seen, "cancelled", "the run was cancelled")
            return _ended(run_id, request, "cancelled", "the run was cancelled")
        except RayTaskError as exc:  # the node's code raised: this run failed, the node is fine
            self._close_open(rt, seen, "failed", f"the node failed the run: {exc}")
            return _ended(run_id, request, "failed", f"the node failed the run: {exc}")
        except (RayActorError, RayError) as exc:
            return self._lost(rt, seen, request, node_id, f"{type(exc).__name__}: {exc}")
        finally:
            self._load[node_id] = self._load.get(node_id, 1) - 1
            tree.live[node_id] -= 1

    # -- placement and shipping -------------------------------------------------------------
    def _pick(self) -> str:
        """The least busy node (ties in turn)."""
        least = min(self._load[n] for n in self._actors)
        idle = sorted(n for n in self._actors if self._load[n] == least)
        return idle[next(self._turn) % len(idle)]

    def _tree(self, rt: Runtime, request: ChildRequest) -> _Tree:
        tree = self._trees.get(id(rt))
        if tree is None:
            tree = _Tree(request.root_run_id, rt.ledger, ray.put(rt.config), ray.put(rt.get_model))
            self._trees[id(rt)] = tree
            weakref.finalize(rt, self._trees.pop, id(rt), None)
            rt.bus.subscribe(lambda event: self._on_tree_event(tree, event))
        return tree

    def _context_arg(self, context: Context) -> Any:
        """``context`` itself, or for a large one its object in the store (put once per
        distinct value; the node gets the value, fetched once per node)."""
        if context.chars() < CONTEXT_INLINE_CHARS:
            return context
        digest = hashlib.sha256(pickle.dumps((context.kind, context.value), protocol=5)).hexdigest()
        ref = self._contexts.get(digest)
        if ref is None:
            ref = self._contexts[digest] = ray.put(context)
            self.stats.context_puts += 1
            while len(self._contexts) > 32:
                self._contexts.popitem(last=False)
        self._contexts.move_to_end(digest)
        return ref

    # -- the tree's budget across nodes -----------------------------------------------------
    def _ledger_share(self, tree: _Tree, node_id: str) -> dict[str, Any]:
        others = _spent(tree.ledger) - tree.by_node.get(node_id, Spend())
        tree.seq += 1
        return {
            "seq": tree.seq,
            "others": others,
            "elapsed_s": tree.ledger.elapsed(),
            "reserve_s": tree.ledger.reserve_s,
            "exhausted": _exhaustion(tree.ledger),
        }

    def _on_tree_event(self, tree: _Tree, event: Event) -> None:
        """After a change of the tree's spend: push it to the nodes running the tree."""
        if not isinstance(event, ModelCallFinished | RunStarted):
            return
        total, exhausted = _spent(tree.ledger), _exhaustion(tree.ledger)
        for node_id, live in tree.live.items():
            actor = self._actors.get(node_id)
            if live <= 0 or actor is None:
                continue
            push = (total - tree.by_node.get(node_id, Spend()), exhausted)
            if tree.pushed.get(node_id) == push:
                continue
            tree.seq += 1
            tree.pushed[node_id] = push
            actor.tree_update.remote(tree.key, tree.seq, *push)

    # -- events from the node ---------------------------------------------------------------
    def _absorb(
        self, rt: Runtime, tree: _Tree, node_id: str, request: ChildRequest, seen: _Seen, data: dict
    ) -> None:
        """Count one remote event in the root's ledger and the parent's usage, then emit it
        on the root's bus."""
        event = from_dict(data)
        if event is None:
            return
        self.stats.event_latency_s.append(max(0.0, time.time() - event.ts))
        if isinstance(event, RunStarted):
            # The store's "recording process" is this one (its sandbox.node says where the
            # run ran): a root that dies leaves its remote runs to be marked interrupted.
            event = dataclasses.replace(event, pid=os.getpid())
            seen.open[event.run_id] = event.depth
            if event.run_id == seen.run_id:
                self.stats.dispatch_s.append(time.time() - seen.began)
            else:  # a grandchild started on the node: a sub-call of the tree
                rt.ledger.subcalls += 1
                _add(tree, node_id, Spend(subcalls=1))
        elif isinstance(event, RunFinished):
            seen.open.pop(event.run_id, None)
        elif isinstance(event, ModelCallStarted) and event.node_id:
            seen.call_depth[event.node_id] = event.call_depth
            if needs_admission(rt.ledger.budget, event.role):
                self._admit(rt, tree, node_id, event.node_id, event.role)
        elif isinstance(event, ModelCallFinished) and event.error is None:
            tokens = int(event.input_tokens) + int(event.output_tokens)
            subcall = 1 if event.role == "sub" else 0
            rt.ledger.spend(tokens, float(event.cost_usd))
            rt.ledger.subcalls += subcall
            _add(tree, node_id, Spend(tokens, float(event.cost_usd), subcall))
            depth = seen.call_depth.pop(event.node_id or "", event.depth)
            request.parent_usage.record(
                event.model,
                depth,
                int(event.input_tokens),
                int(event.output_tokens),
                float(event.cost_usd),
            )
            try:  # notice a limit the remote call crossed, so it is pushed to every node
                rt.ledger.check()
            except BudgetExhausted:
                pass
        rt.bus.emit(event)

    def _admit(self, rt: Runtime, tree: _Tree, node_id: str, call_id: str, role: str) -> None:
        """Answer a node's model call waiting for admission: refused once the tree's ledger
        (every finished call of the calling run already in it) is at a limit."""
        refused = None
        try:
            rt.ledger.check(subcall=role == "sub")
        except BudgetExhausted as exc:
            refused = (exc.status, str(exc))
        actor = self._actors.get(node_id)
        if actor is not None:
            actor.admit.remote(tree.key, call_id, refused)

    def _close_open(self, rt: Runtime, seen: _Seen, status: str, error: str) -> None:
        """Record the end of every run the node started and never reported ended."""
        for run_id, depth in sorted(seen.open.items(), key=lambda kv: -kv[1]):
            rt.bus.emit(
                RunFinished(
                    run_id=run_id,
                    depth=depth,
                    status=status,
                    answer=None,
                    answer_source=None,
                    usage=None,
                    iterations=0,
                    error=error,
                )
            )
        seen.open.clear()

    def _lost(
        self, rt: Runtime, seen: _Seen, request: ChildRequest, node_id: str, why: str
    ) -> RunResult:
        """The node went away under the run: forget it, end its runs as ``interrupted``."""
        self._actors.pop(node_id, None)
        error = f"the cluster node {node_id[:12]} running this child run was lost ({why})"
        self._close_open(rt, seen, "interrupted", error)
        return _ended(seen.run_id, request, "interrupted", error)


@dataclass
class _Seen:
    """What one child run's stream has shown: runs not yet ended, model calls' depths."""

    run_id: str
    began: float
    open: dict[str, int] = field(default_factory=dict)
    call_depth: dict[str, int] = field(default_factory=dict)


def _spent(ledger: Ledger) -> Spend:
    return Spend(ledger.tokens, ledger.usd, ledger.subcalls)


def _exhaustion(ledger: Ledger) -> tuple[str, str] | None:
    return None if ledger.exhausted is None else (ledger.exhausted.status, str(ledger.exhausted))


def _add(tree: _Tree, node_id: str, spend: Spend) -> None:
    tree.by_node[node_id] = tree.by_node.get(node_id, Spend()) + spend


def _ended(run_id: str, request: ChildRequest, status: str, error: str) -> RunResult:
    return RunResult(run_id, status, None, None, Usage().to_dict(), 0, request.depth, error)

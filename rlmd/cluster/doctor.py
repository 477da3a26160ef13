"""``rlmd doctor``'s cluster checks: the cluster answers, which nodes are alive, and on each
node the rlmd version and a real sandbox round trip (with the isolation it got)."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmd import isolation
from rlmd.server.doctor import Check

FIX_START = "start one (ray start --head) or set [cluster] address in your user config"


def check_cluster(address: str | None = None) -> list[Check]:
    """The cluster checks (``address`` overrides the user config's ``[cluster] address``)."""
    import rlmd
    from rlmd.cluster import executor_for

    try:
        executor = executor_for(address)
    except ValueError as exc:
        fix = "pip install 'rlmd[ray]'" if "Ray" in str(exc) else "fix the [cluster] table"
        return [Check("cluster", "fail", str(exc), fix)]
    import ray

    joined_here = not ray.is_initialized()
    try:
        nodes = asyncio.run(asyncio.wait_for(_probe(executor), 120))
    except Exception as exc:  # unreachable, no node, a node that does not answer
        return [
            Check("cluster", "fail", f"{executor.address}: {type(exc).__name__}: {exc}", FIX_START)
        ]
    finally:
        executor.close()
        if joined_here and ray.is_initialized():
            ray.shutdown()
    checks = [
        Check("cluster", "ok", f"{len(nodes)} node(s) at {executor.address}, Ray {ray.__version__}")
    ]
    for node in nodes:
        name = f"cluster node {node['host']} {node['node_id'][:8]}"
        box = node["sandbox"]
        if node["rlmd"] != rlmd.__version__:
            checks.append(
                Check(
                    name,
                    "fail",
                    f"rlmd {node['rlmd']} there, {rlmd.__version__} here",
                    "install the same rlmd on every node (or ship it with a runtime_env)",
                )
            )
        elif not box["ok"]:
            checks.append(
                Check(name, "fail", f"sandbox {box['backend']}: {box['detail']}", isolation.FIX)
            )
        elif gap := isolation.missing(box["isolation"]):
            checks.append(Check(name, "warn", f"{box['detail']}; {gap}", isolation.FIX))
        else:
            checks.append(
                Check(name, "ok", f"rlmd {node['rlmd']}, Python {node['python']}, {box['detail']}")
            )
    return checks


async def _probe(executor: Any) -> list[dict[str, Any]]:
    await executor.start()
    return list(await executor.nodes_info())

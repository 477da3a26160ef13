"""Running one RLM tree across a cluster: child runs on other machines, one trajectory, one
budget, one cancel (``docs/cluster.md``).

``settings.py`` reads the ``[cluster]`` table (no cluster engine imported); ``ledger.py`` is
a node's share of the tree's budget; ``node.py`` what runs on each node (child runs in their
own sandbox there, events streamed back); ``ray_executor.py`` the
:class:`~rlmd.engine.executor.Executor` on Ray (the ``ray`` extra); ``doctor.py`` the
cluster's setup checks. Only ``node.py``, ``ray_executor.py`` and ``doctor.py`` import Ray.
"""

from __future__ import annotations

from rlmd.cluster.settings import ClusterSettings

__all__ = ["ClusterSettings"]

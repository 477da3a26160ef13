"""Running one RLM tree across a cluster: child runs on other machines, one trajectory, one
budget, one cancel (``docs/cluster.md``).

``settings.py`` reads the ``[cluster]`` table (no cluster engine imported); ``ledger.py`` is
a node's share of the tree's budget; ``node.py`` what runs on each node (child runs in their
own sandbox there, events streamed back); ``ray_executor.py`` the
:class:`~rlmd.engine.executor.Executor` on Ray (the ``ray`` extra); ``doctor.py`` the
cluster's setup checks. Only ``node.py``, ``ray_executor.py`` and ``doctor.py`` import Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlmd.cluster.settings import ClusterSettings

if TYPE_CHECKING:
    from rlmd.cluster.ray_executor import RayExecutor

__all__ = ["ClusterSettings", "executor_for", "settings_of_user"]


def settings_of_user() -> ClusterSettings | None:
    """The user config's ``[cluster]`` table, or ``None`` when it has none.

    Raises:
        ValueError: the table is invalid (the message names the file and the key).
    """
    from rlmd import config, paths

    table = config.load(None).sections.get("cluster")
    if table is None:
        return None
    return ClusterSettings.from_table(table, f"{paths.user_config_path()}: [cluster]")


def executor_for(address: str | None = None) -> RayExecutor:
    """The executor ``rlmd run --cluster`` / ``rlmd serve --cluster`` use: the user's
    ``[cluster]`` table (defaults without one), ``address`` overriding its address. Not
    connected yet (:meth:`~rlmd.cluster.ray_executor.RayExecutor.start` connects).

    Raises:
        ValueError: an invalid ``[cluster]`` table, or Ray is not installed (the fix: the
            ``ray`` extra).
    """
    settings = settings_of_user() or ClusterSettings()
    try:
        from rlmd.cluster.ray_executor import RayExecutor
    except ImportError as exc:
        raise ValueError(
            f"running on a cluster needs Ray ({exc}): pip install 'rlmd[ray]'"
        ) from None
    return RayExecutor.from_settings(settings, address or None)

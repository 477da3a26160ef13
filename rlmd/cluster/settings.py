"""The ``[cluster]`` table of the user config: which cluster engine runs a tree's child runs
and where it is.

::

    [cluster]
    engine = "ray"                    # the only engine so far (the ``ray`` extra)
    address = "auto"                  # "auto" (this machine's cluster) | "HOST:PORT" | "ray://HOST:PORT"
    env = ["OPENAI_API_KEY"]          # variables passed to the workers' runtime environment

A project's config may not set it (it would send the project's runs to another machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENGINES = ("ray",)


@dataclass(frozen=True)
class ClusterSettings:
    """Where child runs go.

    Attributes:
        engine: ``"ray"``.
        address: the cluster's address: ``"auto"`` (a cluster started on this machine with
            ``ray start``), ``"HOST:PORT"`` (its GCS), or ``"ray://HOST:PORT"`` (Ray Client).
        env: names of environment variables (API keys: ``OPENAI_API_KEY``...) whose values
            this process passes to the workers through the job's runtime environment; they
            reach the worker processes, never a sandbox.
    """

    engine: str = "ray"
    address: str = "auto"
    env: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_table(cls, table: Any, where: str = "[cluster]") -> ClusterSettings:
        """Parse a ``[cluster]`` table.

        Raises:
            ValueError: not a table, an unknown key, an unknown engine, or a value of the
                wrong type (the message names ``where`` and the key).
        """
        if not isinstance(table, dict):
            raise ValueError(f"{where} must be a table")
        unknown = set(table) - {"engine", "address", "env"}
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {sorted(unknown)}; allowed: address, engine, env"
            )
        engine = table.get("engine", "ray")
        if engine not in ENGINES:
            raise ValueError(f"{where}: engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        address = table.get("address", "auto")
        if not isinstance(address, str) or not address:
            raise ValueError(f"{where}: address must be a non-empty string")
        env = table.get("env", [])
        if not isinstance(env, list) or not all(isinstance(n, str) and n for n in env):
            raise ValueError(f"{where}: env must be a list of environment variable names")
        return cls(engine, address, tuple(env))

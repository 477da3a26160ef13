"""rlmd: Recursive Language Models as a local developer tool.

``from rlmd import RLM`` is a drop-in for the ``rlms`` reference's ``RLM`` (see
:mod:`rlmd.compat`); :func:`rlmd.engine.run_task` is the async engine entry point.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["RLM", "__version__"]


def __getattr__(name: str):
    # Lazy, so `import rlmd` (and the CLI's start-up) does not import every provider SDK.
    if name == "RLM":
        from rlmd.compat import RLM

        return RLM
    raise AttributeError(f"module 'rlmd' has no attribute {name!r}")

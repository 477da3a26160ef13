"""``sqlite_utils``, imported without pandas and numpy.

``sqlite_utils.db`` imports pandas and numpy when they are installed, only to map their
scalar types to column types on insert. The store never inserts those types, and the
import costs ~1.2 s (pandas + pyarrow) in every rlmd process where the training or data
extras are installed: more than the rest of rlmd's start-up together. So the first import
hides both (``sys.modules[name] = None`` makes ``import name`` raise ``ImportError``) unless
something already imported them, and then takes the markers away again, so later imports
of pandas or numpy by anyone else work as usual.
"""

from __future__ import annotations

import sys


def _import_without_pandas() -> None:
    hidden = [name for name in ("pandas", "numpy") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import sqlite_utils  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


if "sqlite_utils" not in sys.modules:
    _import_without_pandas()

import sqlite_utils  # noqa: E402 - imported above

__all__ = ["sqlite_utils"]

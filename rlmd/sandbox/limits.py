"""One structure of resource limits for every sandbox backend.

Each backend enforces what it can from *outside* the model's code (rlimits and namespaces for
the subprocess kernel, cgroup limits for containers, the provider's quota for cloud VMs) and
reports what it really enforced in its ``isolation`` record. When a cell exceeds a limit, the
cell ends with a model-readable message naming it
(:func:`rlmd.sandbox.messages.limit_message`), never a hang.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

MiB = 1024 * 1024


WHOLE = frozenset(
    {"memory_bytes", "processes", "open_files", "file_size_bytes", "disk_bytes", "output_bytes"}
)
"""Limits counted in whole units (bytes, processes, descriptors)."""

MINIMUM = {"memory_bytes": 64 * MiB, "processes": 8, "open_files": 64, "disk_bytes": 16 * MiB}
"""Floors with headroom for the kernel to start and report back: the hostile fresh-user
test saw it fail at start-up with ``memory_bytes=1_000_000`` (exit 137) and ``processes=1``
("can't start new thread")."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandbox. ``None`` means "no limit from rlmd".

    Attributes:
        wall_s: wall-clock seconds per cell; past it the kernel is interrupted, then killed
            and restarted.
        cpu_s: CPU seconds per kernel process (``RLIMIT_CPU``; the kernel is restarted when it
            runs out, so this is a budget per kernel lifetime, not per cell).
        memory_bytes: address space / memory of the kernel (bytes).
        processes: processes and threads the sandbox may run at once.
        open_files: open file descriptors per process.
        file_size_bytes: the largest file model code may write (bytes).
        disk_bytes: what the working folder may hold in all (bytes): a ``tmpfs`` of that
            size where the host may mount one (root), else watched by the host during each
            cell, which is stopped past it (see :mod:`rlmd.sandbox.workdirs`).
        output_bytes: stdout + stderr kept per stream per cell (bytes; the rest is dropped
            with a marker saying how much).
        network: ``False`` cuts the sandbox off every network (loopback only).
    """

    wall_s: float | None = 300.0
    cpu_s: float | None = None
    memory_bytes: int | None = 2048 * MiB
    processes: int | None = 256
    open_files: int | None = 1024
    file_size_bytes: int | None = 1024 * MiB
    disk_bytes: int | None = 2048 * MiB
    output_bytes: int | None = 32 * MiB
    network: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "network":
                if not isinstance(value, bool):
                    raise ValueError(f"limit network must be true or false, not {value!r}")
                continue
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"limit {f.name} must be a positive number or None, not {value!r}")
            if f.name in WHOLE and value != int(value):
                raise ValueError(f"limit {f.name} must be a whole number, not {value!r}")
            floor = MINIMUM.get(f.name)
            if floor is not None and value < floor:
                raise ValueError(
                    f"limit {f.name} = {value!r} is below {floor}, too little for the kernel "
                    "itself to start"
                )

    def to_dict(self) -> dict[str, Any]:
        """The limits as a JSON-able dict (recorded with every run)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Limits:
        """Limits from a dict (e.g. a TOML table); unknown keys raise ``ValueError``."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown sandbox limit(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**data)

"""The code paths ab.py compares: toggle(True) = this branch's (B), toggle(False) = main's (A)."""
import os
from rlmd.sandbox.process import transport as T

_new_cpu_s = T.ProcessKernel.cpu_s

def _old_cpu_s(self):
    pid = self.kernel_pid()
    if pid is None:
        return None
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rpartition(b")")[2].split()
    return sum(int(f) for f in fields[11:15]) / T._CLOCK_TICKS

def stat_fd(on):
    """cpu_s: a kept /proc/<pid>/stat descriptor read with pread (B) or open per read (A)."""
    T.ProcessKernel.cpu_s = _new_cpu_s if on else _old_cpu_s

from rlmd.store import db as _db

def flush_250ms(on):
    """FLUSH_DELAY_S 0.25 s (B) or 0.05 s (A): how much of the store's CPU is per flush."""
    _db.FLUSH_DELAY_S = 0.25 if on else 0.05

import harness as _h
_engine_config = _h.engine_config

def sub_vs_inproc(on):
    """The subprocess sandbox (B) or the in-process one (A), same run otherwise."""
    _h.engine_config = (lambda n, sandbox: _engine_config(n, "subprocess")) if on else (
        lambda n, sandbox: _engine_config(n, "inprocess"))

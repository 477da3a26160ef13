"""The subprocess transport: the kernel in a hardened child process (the default backend).

``transport.py`` talks to one kernel process, ``launch.py`` starts them (and keeps a spare),
``isolate.py`` builds the namespaces, rlimits, cgroups and seccomp filter around them.
"""

from rlmd.sandbox.process.launch import KERNEL_MAIN, OWN_EDITABLE_PTH, close_spare_kernels
from rlmd.sandbox.process.transport import ProcessTransport

__all__ = ["KERNEL_MAIN", "OWN_EDITABLE_PTH", "ProcessTransport", "close_spare_kernels"]

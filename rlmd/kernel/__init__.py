"""The REPL kernel that runs inside a sandbox (standard library only).

``core`` holds the namespace and the helpers, ``codebase`` the codebase helpers, ``protocol``
the wire format, ``serve`` the subprocess kernel's start-up and request loop, and ``main`` its
entry point (``python -I rlmd/kernel/main.py``). Nothing here may import from the host package: the
subprocess kernel loads these modules as a private package (``_rlmd_kernel``).

The host's transports take the kernel's location from here (they start ``main.py``, bind or
upload this folder) rather than working it out themselves.
"""

import os

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
"""This folder: the kernel's files, as the host starts, binds or uploads them."""

KERNEL_MAIN = os.path.join(KERNEL_DIR, "main.py")
"""The kernel's entry point (``python -I KERNEL_MAIN ...``)."""

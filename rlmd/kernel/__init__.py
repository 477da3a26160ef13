"""The REPL kernel that runs inside a sandbox (standard library only).

``core`` holds the namespace and the helpers, ``codebase`` the codebase helpers, ``protocol``
the wire format, and ``main`` the subprocess entry point
(``python -I rlmd/kernel/main.py``). Nothing here may import from the host package: the
subprocess kernel loads these modules as a private package (``_rlmd_kernel``).
"""

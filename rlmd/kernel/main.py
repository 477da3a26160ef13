"""Entry point of the subprocess kernel:
``python -I -S /path/to/rlmd/kernel/main.py [--site-packages DIR]... [--skip-pth PREFIX]...
[--prefix DIR] [--exec-prefix DIR] [--framing length|lines]`` (or ``python -I main.py``,
letting ``site`` run). What the flags do: ``serve.py``.

Runs as a plain script (``-I`` leaves the script's folder off ``sys.path``): this folder is
loaded as a private package named ``_rlmd_kernel``, so its modules never shadow or collide
with what model code imports, and ``serve.main`` runs the kernel. This file stays this small
because a script is compiled from source at every start (~10 ms for the kernel's ~560
lines on the dev machine), while imported modules come from their bytecode cache.
"""

import sys

PRIVATE_PACKAGE = "_rlmd_kernel"


def _load_serve():  # no annotations: no typing import at every start
    if PRIVATE_PACKAGE not in sys.modules:
        # importlib.util's two functions, from the frozen modules the interpreter already
        # loaded: importing importlib (and warnings), let alone importlib.util, costs
        # milliseconds at every kernel start.
        import _frozen_importlib as _bootstrap
        import _frozen_importlib_external as _bootstrap_external
        import os

        here = os.path.dirname(os.path.abspath(__file__))
        spec = _bootstrap_external.spec_from_file_location(
            PRIVATE_PACKAGE,
            os.path.join(here, "__init__.py"),
            submodule_search_locations=[here],
        )
        assert spec is not None and spec.loader is not None
        pkg = _bootstrap.module_from_spec(spec)
        sys.modules[PRIVATE_PACKAGE] = pkg
        spec.loader.exec_module(pkg)
    __import__(PRIVATE_PACKAGE + ".serve")
    return sys.modules[PRIVATE_PACKAGE + ".serve"]


if __name__ == "__main__":
    _load_serve().main()

"""The sandbox's layout: one lifecycle (``session.py``), transports behind it, and a
contract suite that runs every backend."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import rlmd
import rlmd.sandbox
from rlmd.sandbox import BACKENDS, backend_class
from rlmd.sandbox.base import Sandbox
from rlmd.sandbox.session import SandboxSession
from rlmd.sandbox.transport import Transport

SANDBOX_DIR = Path(rlmd.sandbox.__file__).parent
LIFECYCLES = {"rlmd.sandbox.session", "rlmd.sandbox.inprocess"}
"""The only modules that may define a :class:`Sandbox`: a new backend is a transport."""


def _all_subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_all_subclasses(sub)}
    return out


def test_only_the_session_and_inprocess_subclass_sandbox():
    for info in pkgutil.walk_packages(rlmd.__path__, "rlmd."):
        if (
            info.name.endswith("__main__")
            or info.name.startswith("rlmd.sandbox.cloud.")
            or info.name == "rlmd.train.verifiers_env"  # needs .venv-verifiers
        ):
            continue  # optional extras; the source check below covers them
        importlib.import_module(info.name)  # every module, so its classes exist
    owners = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _all_subclasses(Sandbox)
        if cls.__module__.startswith("rlmd.")
    }
    assert owners == {
        "rlmd.sandbox.session.SandboxSession",
        "rlmd.sandbox.inprocess.InProcessSandbox",
    }


def test_no_sandbox_subclass_in_the_source_outside_the_lifecycles():
    # The same rule on the source, for modules an optional extra keeps from importing.
    lifecycle_names = {"Sandbox", "SandboxSession", "InProcessSandbox"}
    for path in SANDBOX_DIR.parent.rglob("*.py"):
        module = ".".join(path.relative_to(SANDBOX_DIR.parent.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
            if bases & lifecycle_names:
                assert module in LIFECYCLES | {"rlmd.sandbox.base"}, f"{module}.{node.name}"


def test_every_backend_is_a_transport_under_the_session_or_inprocess():
    from rlmd.sandbox import _backend

    for name in BACKENDS:
        cls = _backend(name)
        if name == "inprocess":
            assert backend_class(name) is cls and issubclass(cls, Sandbox)
        else:
            assert issubclass(cls, Transport) and cls.kind == name
            assert backend_class(name) is SandboxSession

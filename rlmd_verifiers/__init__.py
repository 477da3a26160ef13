"""The `verifiers` plugin id ``rlmd-verifiers``: rlmd's environment
(:mod:`rlmd.train.verifiers_env`) under the top-level name verifiers 0.4.0 can import.

verifiers imports a taskset or harness id as one top-level module
(``verifiers/v1/utils/loaders.py``, ``_import_plugin``, lines 70-78: the id's ``-`` become
``_``, and a dotted id such as ``rlmd.train.verifiers_env`` fails in ``find_spec``), and takes
the classes the module exports in ``__all__``.
"""

from rlmd.train.verifiers_env import RlmdEnv, RlmdHarness, RlmdTaskset

__all__ = ["RlmdTaskset", "RlmdHarness", "RlmdEnv"]

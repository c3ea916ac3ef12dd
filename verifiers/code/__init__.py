r"""Run untrusted Python programs against tests in a sandbox that cannot be fooled or escaped.

>>> from rlvr.verifiers.code import run_tests, CallTests
>>> run_tests("def add(a, b):\n    return a + b", CallTests("add", [((1, 2), 3)])).passed
True

See :mod:`rlvr.verifiers.code.harness` for why results cannot be forged,
:mod:`rlvr.verifiers.code.protocol`
for the plain-data codec, :mod:`rlvr.verifiers.code.sandbox` for the isolation, and
``docs/sandbox.md``
for the threat model.
"""

from rlvr.verifiers.code.pool import SandboxPool, default_pool, run_tests
from rlvr.verifiers.code.sandbox import SandboxConfig
from rlvr.verifiers.code.specs import AssertTests, CallTests, StdioTests, TestSpec, values_equal

__all__ = [
    "AssertTests",
    "CallTests",
    "SandboxConfig",
    "SandboxPool",
    "StdioTests",
    "TestSpec",
    "default_pool",
    "run_tests",
    "values_equal",
]

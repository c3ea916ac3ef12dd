"""Pure scoring: math answers, code against tests in a sandbox, tool-call parsing.

This package imports nothing else of the project.
"""

from rlvr.verifiers.verdict import Verdict

__all__ = ["Verdict"]

if __name__ != "rlvr.verifiers":  # this folder installs and imports as rlvr.verifiers only
    raise ImportError(
        f"rlvr's verifiers package imports as `rlvr.verifiers`, not as `{__name__}`: write "
        f"`from rlvr.verifiers import ...` (a second copy of its modules would split their state)")

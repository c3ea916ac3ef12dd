"""Pure scoring: math answers, code against tests in a sandbox, tool-call parsing.

This package imports nothing else of the project.
"""

from verifiers.verdict import Verdict

__all__ = ["Verdict"]

"""The outcome of :func:`rlvr.envs.check_env`: one row per check, printable as a table."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlvr.envs.errors import EnvCheckError

__all__ = ["FAIL", "NOT_RUN", "PASS", "SKIP", "CheckReport", "CheckResult"]

PASS = "pass"
FAIL = "FAIL"
SKIP = "skip"
NOT_RUN = "not run"
"""A check that could not run (its episodes never got that far): never counted as a pass."""


@dataclass(frozen=True)
class CheckResult:
    """One check of one env.

    Attributes:
        topic: the group: "contract", "determinism", "limits", "probes" or "tools".
        name: what was checked, e.g. "hedge: several boxed answers".
        status: :data:`PASS`, :data:`FAIL`, :data:`SKIP` or :data:`NOT_RUN`.
        detail: what was seen (for a failure: the offending response, reward, message).
        fix: what to change in the env when it failed (or how to run a skipped check).
    """

    topic: str
    name: str
    status: str
    detail: str = ""
    fix: str = ""

    @property
    def failed(self) -> bool:
        """Whether this check failed."""
        return self.status == FAIL


@dataclass
class CheckReport:
    """All checks of one env, in the order they ran.

    Attributes:
        env_name: the env id or class name the report is about.
        results: one :class:`CheckResult` per check.
    """

    env_name: str
    results: list[CheckResult] = field(default_factory=list)

    def add(self, results: Iterable[CheckResult]) -> None:
        """Append results."""
        self.results.extend(results)

    @property
    def passed(self) -> bool:
        """Whether no check failed (skipped checks do not fail)."""
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        """The failed checks."""
        return [r for r in self.results if r.failed]

    def table(self, width: int = 100) -> str:
        """A plain-text table: topic, check, status, and for failures what was seen and the fix."""
        name_width = max([len("check"), *(len(r.name) for r in self.results)])
        topic_width = max([len("topic"), *(len(r.topic) for r in self.results)])
        lines = [
            f"check-env {self.env_name}",
            f"{'topic':<{topic_width}}  {'check':<{name_width}}  status",
            f"{'-' * topic_width}  {'-' * name_width}  ------",
        ]
        indent = " " * (topic_width + 2)
        for result in self.results:
            lines.append(f"{result.topic:<{topic_width}}  {result.name:<{name_width}}  "
                         f"{result.status}")
            if result.status != PASS:
                for label, text in (("seen", result.detail), ("fix", result.fix)):
                    if text:
                        lines += textwrap.wrap(text, width, initial_indent=f"{indent}{label}: ",
                                               subsequent_indent=indent + "     ")
        counts = {s: sum(r.status == s for r in self.results)
                  for s in (PASS, FAIL, SKIP, NOT_RUN)}
        line = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
        if counts[NOT_RUN]:
            line += f", {counts[NOT_RUN]} not run"
        lines.append(line)
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        """Raise :class:`~rlvr.envs.errors.EnvCheckError` listing every failed check.

        Raises:
            EnvCheckError: when any check failed.
        """
        if self.failures:
            lines = [f"{self.env_name}: {len(self.failures)} check(s) failed:"]
            for r in self.failures:
                lines.append(f"- [{r.topic}] {r.name}: {r.detail}" + (f" Fix: {r.fix}" if r.fix
                                                                        else ""))
            raise EnvCheckError("\n".join(lines))

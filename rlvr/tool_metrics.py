"""Tool-use metrics: one definition, logged by training and reported by evaluation alike.

Each episode's tool use is read from its typed outcome (``ToolUse.of``: ``outcome.tool_calls``,
calls made, malformed ones included; ``outcome.tool_errors``, malformed calls and calls whose
tool failed, None when the env does not check calls; ``Trajectory.passed``). ``tool_counts``
sums episodes into additive counts (training sums them over ranks), and ``tool_rates`` turns
counts into the metrics, under the same keys everywhere: ``tool/calls_per_episode``,
``tool/errors_per_episode``, ``tool/episodes_with_call``, ``tool/valid_call_rate``,
``tool/accuracy_with_call`` and ``tool/accuracy_without_call``. Training logs them per step
(``tool_metrics``); ``rlvr.eval.metrics.summarize`` reports them per env (an episodes.jsonl
record gives the same ``ToolUse`` through ``ToolUse.of_record``), so the held-out run logs
``eval/<env>/tool/valid_call_rate`` beside training's ``tool/valid_call_rate``.

Turns per episode and accuracy are in ``rlvr.metrics.rollout_metrics`` (``response/turns_mean``,
``reward/accuracy``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.distributed import all_reduce_sums
from rlvr.trajectory import Trajectory

__all__ = ["TOOL_METRICS", "ToolUse", "tool_counts", "tool_metrics", "tool_rates"]

#: The metrics ``tool_rates`` returns, in order.
TOOL_METRICS = (
    "tool/calls_per_episode",
    "tool/errors_per_episode",
    "tool/episodes_with_call",
    "tool/valid_call_rate",
    "tool/accuracy_with_call",
    "tool/accuracy_without_call",
)


@dataclass(frozen=True)
class ToolUse:
    """One episode's tool use.

    Attributes:
        calls: tool calls made (malformed ones included).
        errors: malformed calls and calls whose tool failed; None when the env does not check
            its tool calls.
        passed: the episode passed (``Trajectory.passed``).
    """

    calls: int
    errors: int | None
    passed: bool

    @classmethod
    def of(cls, traj: Trajectory) -> ToolUse:
        """The tool use of a played episode, from its outcome."""
        return cls(traj.outcome.tool_calls, traj.outcome.tool_errors, traj.passed)

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> ToolUse:
        """The same, from its episodes.jsonl record (``tool_calls``, ``tool_call_errors``)."""
        errors = record.get("tool_call_errors")
        return cls(int(record.get("tool_calls") or 0), None if errors is None else int(errors),
                   bool(record["passed"]))


def tool_counts(uses: Iterable[ToolUse]) -> list[float]:
    """Additive counts of ``uses`` (sum them over ranks or shards, then ``tool_rates``).

    Returns:
        ``[episodes, calls, calls in checked episodes, errors, episodes with a call, checked
        episodes, passed episodes with a call, passed episodes without one]``.
    """
    counts = [0.0] * 8
    for use in uses:
        checked = use.errors is not None
        counts[0] += 1
        counts[1] += use.calls
        counts[2] += use.calls if checked else 0
        counts[3] += use.errors or 0
        counts[4] += use.calls > 0
        counts[5] += checked
        counts[6] += use.passed and use.calls > 0
        counts[7] += use.passed and use.calls == 0
    return counts


def tool_rates(counts: Sequence[float]) -> dict[str, float]:
    """The ``TOOL_METRICS`` of summed ``tool_counts``.

    Returns:
        ``tool/calls_per_episode`` and ``tool/errors_per_episode`` (means over episodes),
        ``tool/episodes_with_call`` (share of episodes with at least one call),
        ``tool/valid_call_rate`` (calls without an error / all calls, over the episodes whose
        env checks calls), ``tool/accuracy_with_call`` and ``tool/accuracy_without_call`` (the
        passed share of the episodes that did / did not call a tool); a rate is NaN when it has
        nothing to count. Empty when no env checked calls and none was made (no tool env).
    """
    n, calls, checked_calls, errors, with_call, checked, ok_with, ok_without = counts
    if not checked and not calls:
        return {}
    episodes = max(n, 1.0)
    return {
        "tool/calls_per_episode": calls / episodes,
        "tool/errors_per_episode": errors / episodes,
        "tool/episodes_with_call": with_call / episodes,
        "tool/valid_call_rate": _rate(checked_calls - errors, checked_calls),
        "tool/accuracy_with_call": _rate(ok_with, with_call),
        "tool/accuracy_without_call": _rate(ok_without, n - with_call),
    }


def tool_metrics(trajs: Sequence[Trajectory], device: torch.device) -> dict[str, float]:
    """The ``TOOL_METRICS`` of one training step's episodes, summed over all ranks.

    A NaN rate is logged as null; empty when the env counts no tool calls at all.
    """
    return tool_rates(all_reduce_sums(tool_counts(ToolUse.of(t) for t in trajs), device))


def _rate(part: float, whole: float) -> float:
    """``part / whole``; NaN when ``whole`` is 0."""
    return part / whole if whole else math.nan

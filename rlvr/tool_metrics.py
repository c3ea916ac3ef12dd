"""Per-step metrics of tool use in the training episodes (summed over all ranks).

Read from each trajectory's outcome as the episode runner fills it: ``tool_calls`` (calls made,
malformed ones included) and ``tool_errors`` (malformed calls and calls whose tool failed; None
when the env does not count them). Turns per episode and accuracy are in
``rlvr.metrics.rollout_metrics`` (``response/turns_mean``, ``reward/accuracy``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rlvr.distributed import all_reduce_sums
from rlvr.trajectory import Trajectory


def tool_metrics(trajs: Sequence[Trajectory], device: torch.device) -> dict[str, float]:
    """Tool calls, valid-call rate and tool errors of one step's episodes.

    Returns:
        ``tool/calls_per_episode``, ``tool/errors_per_episode``, ``tool/episodes_with_call``
        (share of episodes with at least one call), ``tool/valid_call_rate`` (calls without
        an error / all calls), ``tool/accuracy_with_call`` and ``tool/accuracy_without_call``
        (the passed share of the episodes that did / did not call a tool); each rate is NaN,
        logged as null, when it has no episodes to count. Empty when the env counts no tool
        calls at all (not a tool env).
    """
    counted = any(t.outcome.tool_errors is not None for t in trajs)
    calls = [t.outcome.tool_calls for t in trajs]
    errors = [t.outcome.tool_errors or 0 for t in trajs]
    passed_with = sum(t.passed for t, c in zip(trajs, calls, strict=True) if c > 0)
    passed_without = sum(t.passed for t, c in zip(trajs, calls, strict=True) if c == 0)
    n, total_calls, total_errors, with_call, counted_ranks, ok_with, ok_without = all_reduce_sums(
        [len(trajs), sum(calls), sum(errors), sum(c > 0 for c in calls), counted, passed_with,
         passed_without], device)
    if not counted_ranks and not total_calls:
        return {}
    without_call = n - with_call
    n = max(n, 1.0)
    return {
        "tool/calls_per_episode": total_calls / n,
        "tool/errors_per_episode": total_errors / n,
        "tool/episodes_with_call": with_call / n,
        "tool/valid_call_rate": _rate(total_calls - total_errors, total_calls),
        "tool/accuracy_with_call": _rate(ok_with, with_call),
        "tool/accuracy_without_call": _rate(ok_without, without_call),
    }


def _rate(part: float, whole: float) -> float:
    """``part / whole``; NaN when ``whole`` is 0."""
    return part / whole if whole else math.nan

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

from rlvr.data import Trajectory
from rlvr.distributed import all_reduce_sums


def tool_metrics(trajs: Sequence[Trajectory], device: torch.device) -> dict[str, float]:
    """Tool calls, valid-call rate and tool errors of one step's episodes.

    Returns:
        ``tool/calls_per_episode``, ``tool/errors_per_episode``, ``tool/episodes_with_call``
        (share of episodes with at least one call) and ``tool/valid_call_rate`` (calls without
        an error / all calls; NaN, logged as null, when no episode called a tool). Empty
        when the env counts no tool calls at all (not a tool env).
    """
    counted = any(t.outcome.tool_errors is not None for t in trajs)
    calls = [t.outcome.tool_calls for t in trajs]
    errors = [t.outcome.tool_errors or 0 for t in trajs]
    n, total_calls, total_errors, with_call, counted_ranks = all_reduce_sums(
        [len(trajs), sum(calls), sum(errors), sum(c > 0 for c in calls), counted], device)
    if not counted_ranks and not total_calls:
        return {}
    n = max(n, 1.0)
    valid = (total_calls - total_errors) / total_calls if total_calls else math.nan
    return {
        "tool/calls_per_episode": total_calls / n,
        "tool/errors_per_episode": total_errors / n,
        "tool/episodes_with_call": with_call / n,
        "tool/valid_call_rate": valid,
    }

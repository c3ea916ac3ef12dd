"""SyncGuard: thresholds per dtype, the error names the step, the numbers and the causes."""

import math

import pytest
import torch

from rlvr.errors import WeightSyncError
from rlvr.training.sync_guard import DEFAULT_MAX_LOGPROB_DIFF, SyncGuard


def test_defaults_per_dtype_and_override():
    assert SyncGuard(None, torch.float32, "x").limit == DEFAULT_MAX_LOGPROB_DIFF[torch.float32]
    assert SyncGuard(None, torch.bfloat16, "x").limit > SyncGuard(None, torch.float32, "x").limit
    assert SyncGuard(0.5, torch.float32, "x").limit == 0.5


def test_guard_passes_small_gaps_and_missing_metrics():
    guard = SyncGuard(None, torch.float32, "sglang")
    guard.check(1, {"rollout/logprob_diff": 2e-7})
    guard.check(2, {"reward/mean": 1.0})
    SyncGuard(math.inf, torch.float32, "sglang").check(3, {"rollout/logprob_diff": 5.0})


def test_guard_stops_with_the_step_and_likely_causes():
    guard = SyncGuard(None, torch.float32, "sglang")
    with pytest.raises(WeightSyncError, match=r"step 7: the sglang engine's logprobs differ .* "
                                              r"by 0\.25 .*rollout/kl 0\.03.*did not land"):
        guard.check(7, {"rollout/logprob_diff": 0.25, "rollout/kl": 0.03})

"""Two gloo ranks: loading reads the weights on rank 0 only; gradients stay sharded."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_two_ranks_load_from_rank0_and_keep_gradients_sharded(two_rank_runs):
    run_dir = two_rank_runs / "memory"
    nbytes = int((run_dir / "nbytes").read_text())
    r0, r1 = (json.loads((run_dir / f"rank{r}.json").read_text()) for r in (0, 1))

    # Rank 1 had no weights file, yet holds rank 0's weights (and rotary buffers), and never
    # grew by a full copy while loading: its shard (half) plus one tensor in flight at a time.
    assert r0["weights_equal"] and r0["rope_equal"] and r1["rope_equal"]
    assert r1["model_bytes"] == r0["model_bytes"] == nbytes
    growth = (r0["load_peak_growth_bytes"] / nbytes, r1["load_peak_growth_bytes"] / nbytes)
    assert growth[1] < 0.75, growth

    # Reduce-scatter every micro-batch: <= ~55% of the gradient elements per rank (the shard,
    # plus padding of uneven shards). The opt-in keeps the unsharded gradient (~100%).
    for r in (r0, r1):
        assert len(r["grad_fraction_default"]) == 3
        assert max(r["grad_fraction_default"]) <= 0.55, r["grad_fraction_default"]
        assert min(r["grad_fraction_unsharded"]) >= 0.95, r["grad_fraction_unsharded"]

    # Dr. GRPO's constant: ranks at padded widths 10 and 17 both give the known global loss.
    assert r0["norm"]["widths"] == [10, 17]
    for r in (r0, r1):
        assert r["norm"]["got"] == pytest.approx(r["norm"]["known"], rel=1e-5, abs=1e-7)

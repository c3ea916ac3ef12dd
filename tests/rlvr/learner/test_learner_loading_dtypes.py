from __future__ import annotations

import json

import pytest
import torch

from rlvr.learner.loading import empty_causal_lm
from rlvr.learner.modules import load_causal_lm


def test_meta_built_model_keeps_the_buffers_of_the_loaded_one(tiny_model_path):
    # Rank >= 1 builds on the meta device what rank 0 loads: every buffer must come out in
    # the same dtype, or the broadcast of buffers mixes dtypes across ranks.
    loaded = load_causal_lm(tiny_model_path, torch.device("cpu"), torch.bfloat16)
    empty = empty_causal_lm(tiny_model_path, torch.bfloat16)
    full = {n: b.dtype for n, b in loaded.named_buffers()}
    meta = {n: b.dtype for n, b in empty.named_buffers()}
    assert full and meta == full
    assert {p.dtype for p in empty.parameters()} == {torch.bfloat16}


@pytest.mark.slow
def test_two_gloo_ranks_build_bf16_actor_and_reference_alike(two_rank_runs):
    run_dir = two_rank_runs / "bf16"
    r0, r1 = (json.loads((run_dir / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["actor"] == r1["actor"] and r0["reference"] == r1["reference"]
    assert "torch.float32" in r0["reference"].values()  # rotary inv_freq stays fp32 in bf16
    assert r0["ref_logp_sum"] == pytest.approx(r1["ref_logp_sum"], rel=1e-6)

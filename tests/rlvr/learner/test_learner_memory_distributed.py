"""Two gloo ranks: loading reads the weights on rank 0 only; gradients stay sharded."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch


def medium_model_dirs(tmp_path: Path) -> tuple[Path, Path, int]:
    """A ~30M-parameter Qwen2 (random weights, fp32 ~120 MB) and a copy with config.json only."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=2, vocab_size=8192,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    full, config_only = tmp_path / "full", tmp_path / "config_only"
    model.save_pretrained(full, safe_serialization=True)
    config_only.mkdir()
    shutil.copy(full / "config.json", config_only / "config.json")
    torch.save(model.model.rotary_emb.inv_freq, tmp_path / "inv_freq.pt")
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return full, config_only, nbytes


@pytest.mark.slow
def test_two_ranks_load_from_rank0_and_keep_gradients_sharded(tiny_model_path, tmp_path,
                                                               run_process_group):
    full, config_only, nbytes = medium_model_dirs(tmp_path)
    worker = Path(__file__).parent / "two_rank_memory_worker.py"
    proc = run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(worker), str(tmp_path), str(full), str(config_only), str(tiny_model_path)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))

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

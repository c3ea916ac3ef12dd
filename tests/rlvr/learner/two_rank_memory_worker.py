"""The ``memory`` job of ``two_rank_worker.py`` (not a test): test_learner_memory_distributed.py.

It runs first in that launch, so its peak-RSS measurement sees a fresh process.

1. Loading: rank 1 is given a model directory with ``config.json`` only (no weights), loads the
   actor, and reports its peak host-memory growth while loading; both ranks report whether the
   gathered weights equal the weights file.
2. Gradients: after each micro-batch's backward of a 4-micro-batch update, the gradient
   elements this rank holds (sharded grads and any unsharded accumulator), by default and with
   ``accumulate_unsharded_grads``.
3. ``seq-mean-token-sum-norm`` with each rank's rows collated at its own padded width.
Each rank writes ``rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

import torch  # noqa: E402
from learner_helpers import make_batch, params, with_advantages  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from rlvr.learner import Actor, ActorConfig, OptimConfig  # noqa: E402
from rlvr.learner.loading import empty_causal_lm  # noqa: E402


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def grad_elements(module) -> int:
    """Gradient elements held by this rank: sharded grads plus unsharded (accumulated) ones."""
    held = 0
    for m in module.modules():
        if not isinstance(m, FSDPModule):
            continue
        group = m._get_fsdp_state()._fsdp_param_group
        for fp in group.fsdp_params if group is not None else []:
            g = fp.sharded_param.grad
            if g is not None:
                held += g._local_tensor.numel() if isinstance(g, DTensor) else g.numel()
            acc = getattr(fp, "unsharded_accumulated_grad", None)
            if acc is not None:
                held += acc.numel()
            up = getattr(fp, "_unsharded_param", None)
            if up is not None and up.grad is not None:
                held += up.grad.numel()
    return held


def grad_fractions(actor, batch) -> list[float]:
    total = sum(p.numel() for p in actor.module.parameters())
    seen: list[float] = []

    def loss(mb):
        seen.append(grad_elements(actor.module) / total)  # what the previous backwards left
        return actor._loss(mb, 1.0)

    batch.set("old_logprobs", actor.compute_logprobs(batch))
    actor.run_update(batch, loss, prefix="actor")
    return seen[1:]  # before micro-batch 0 nothing is held yet


def medium_model_dirs(out_dir: Path) -> tuple[Path, Path, int]:
    """A ~30M-parameter Qwen2 (random weights, fp32 ~120 MB) and a copy with config.json only.

    Written into ``out_dir`` (``full/``, ``config_only/``, ``inv_freq.pt``) before the launch;
    returns the two folders and the model's bytes.
    """
    import shutil

    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=2, vocab_size=8192,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    full, config_only = out_dir / "full", out_dir / "config_only"
    model.save_pretrained(full, safe_serialization=True)
    config_only.mkdir()
    shutil.copy(full / "config.json", config_only / "config.json")
    torch.save(model.model.rotary_emb.inv_freq, out_dir / "inv_freq.pt")
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return full, config_only, nbytes


def memory_job(out_dir: Path, tiny: Path, info) -> None:
    """Run the three measurements on this rank (``out_dir`` as ``medium_model_dirs`` left it)."""
    full_dir, config_dir = out_dir / "full", out_dir / "config_only"
    result: dict = {}

    # 1. loading
    path = full_dir if info.rank == 0 else config_dir
    empty_causal_lm(config_dir)  # imports the model code first: not part of what is measured
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM)
    before = _status_kib("VmRSS")
    actor = Actor.from_pretrained(path, ActorConfig(), info)
    result["load_peak_growth_bytes"] = (_status_kib("VmHWM") - before) * 1024
    full = params(actor.module)
    if info.rank == 0:
        saved = load_file(str(full_dir / "model.safetensors"))
        result["weights_equal"] = all(torch.equal(full[k], saved[k]) for k in saved)
    result["model_bytes"] = sum(t.numel() * t.element_size() for t in full.values())
    result["rope_equal"] = bool(torch.equal(
        actor.module.model.rotary_emb.inv_freq,
        torch.load(out_dir / "inv_freq.pt") if (out_dir / "inv_freq.pt").exists()
        else actor.module.model.rotary_emb.inv_freq))
    del actor, full

    # 2. gradients after each micro-batch
    batch = with_advantages(make_batch(16, seed=31), seed=31)
    local = batch.select(list(range(info.rank * 8, (info.rank + 1) * 8)))
    for name, flag in (("default", False), ("unsharded", True)):
        cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=2,
                            accumulate_unsharded_grads=flag)
        result[f"grad_fraction_{name}"] = grad_fractions(Actor.from_pretrained(tiny, cfg, info),
                                                         local)

    # 3. the constant normaliser, each rank at its own padded width
    cfg = ActorConfig(micro_batch_size=3, loss_agg="seq-mean-token-sum-norm",
                        loss_scale_factor=16.0)
    actor = Actor.from_pretrained(tiny, cfg, info)
    rows = [make_batch(5, seed=40 + r, max_response_len=10 + 7 * r) for r in range(2)]
    for r, b in enumerate(rows):
        g = torch.Generator().manual_seed(r)
        b.set("advantages", torch.randn(len(b), 1, generator=g) * b.response_mask)
    n = [b.response_mask.sum(dim=-1) for b in rows]
    known = -sum(float((b.advantages * b.response_mask).sum()) for b in rows) / (
        sum(int((x > 0).sum()) for x in n) * 16.0)
    result["norm"] = {"widths": [b.response_len for b in rows], "known": known,
                      "got": actor.update(rows[info.rank])["actor/pg_loss"]}
    (out_dir / f"rank{info.rank}.json").write_text(json.dumps(result))

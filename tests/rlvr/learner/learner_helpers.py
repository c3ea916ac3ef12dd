"""Shared helpers of the learner tests (also imported by the torchrun worker script)."""

from __future__ import annotations

import random

import torch

from rlvr.batch import RolloutBatch
from rlvr.trajectory import Trajectory

PAD = 0


def make_batch(rows: int, seed: int = 0, vocab: int = 300, env_tokens: bool = True,
               max_response_len: int | None = None) -> RolloutBatch:
    """Random rows with ragged prompts/responses, some env tokens (mask 0) inside responses.

    ``max_response_len`` pads the responses to that width (default: the longest response)."""
    rng = random.Random(seed)
    trajs = []
    for i in range(rows):
        p = rng.randint(2, 7)
        r = rng.randint(1, 8)
        mask = [1] * r
        if env_tokens and r >= 4 and rng.random() < 0.5:
            mask[1] = mask[2] = 0
        trajs.append(
            Trajectory(
                prompt_ids=[rng.randint(1, vocab - 1) for _ in range(p)],
                response_ids=[rng.randint(1, vocab - 1) for _ in range(r)],
                response_mask=mask,
                rollout_logprobs=[-rng.random() * 3 for _ in range(r)],
                token_level_scores=[0.0] * (r - 1) + [float(rng.random() < 0.5)],
                group_id=i // 4,
            )
        )
    return RolloutBatch.from_trajectories(trajs, pad_token_id=PAD,
                                          max_response_len=max_response_len)


def make_group_batch(groups: int = 3, size: int = 4, seed: int = 0,
                     vocab: int = 300) -> RolloutBatch:
    """GRPO-shaped rows: ``size`` ragged responses (some with env tokens) per shared prompt."""
    rng = random.Random(seed)
    trajs = []
    for g in range(groups):
        prompt = [rng.randint(1, vocab - 1) for _ in range(rng.randint(2, 7))]
        for _ in range(size):
            r = rng.randint(1, 8)
            mask = [1] * r
            if r >= 4 and rng.random() < 0.5:
                mask[1] = mask[2] = 0
            trajs.append(Trajectory(
                prompt_ids=list(prompt), response_ids=[rng.randint(1, vocab - 1) for _ in range(r)],
                response_mask=mask, rollout_logprobs=[-rng.random() * 3 for _ in range(r)],
                token_level_scores=[0.0] * (r - 1) + [float(rng.random() < 0.5)], group_id=g))
    return RolloutBatch.from_trajectories(trajs, pad_token_id=PAD)


def with_advantages(batch: RolloutBatch, seed: int = 0) -> RolloutBatch:
    """Set fixed random advantages and returns (0 where masked)."""
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(batch.response_mask.shape, generator=g) * batch.response_mask
    batch.set("advantages", adv)
    batch.set("returns", adv.clone() * 0.5 + 0.1 * batch.response_mask)
    return batch


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full (gathered) parameter copies by name."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = t.detach().clone()
    return out


def max_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max() / (b[k].abs().max() + 1e-12)) for k in a)


def global_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                    origin: dict[str, torch.Tensor]) -> float:
    """``||a - b|| / ||b - origin||`` over all parameters: the gap relative to the distance
    that training moved the weights (Adam makes single near-zero-gradient entries noisy, so
    per-element ratios are not meaningful)."""
    with torch.no_grad():
        gap = sum(float((a[k] - b[k]).norm() ** 2) for k in b) ** 0.5
        moved = sum(float((b[k] - origin[k]).norm() ** 2) for k in b) ** 0.5
    return gap / moved


#: The configuration of the 1-rank vs 2-rank comparison (one global mini-batch of 8 rows).
def two_rank_config(lora=None):
    from rlvr.learner import ActorConfig, OptimConfig

    return ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=2, mini_batch_size=8,
                         epochs=2, entropy_coef=0.01, lora=lora)


def two_rank_lora():
    """The LoRA adapter of the 2-rank LoRA test (its worker and the 1-rank side agree)."""
    from rlvr.learner import LoraConfig

    return LoraConfig(rank=4, alpha=8.0)


def global_batch() -> RolloutBatch:
    return with_advantages(make_batch(8, seed=11), seed=11)


def run_steps(actor, batch: RolloutBatch, steps: int) -> list[dict[str, float]]:
    """``steps`` training steps on the same rows, old logprobs recomputed before each."""
    out = []
    for _ in range(steps):
        batch.set("old_logprobs", actor.compute_logprobs(batch))
        out.append(actor.update(batch))
    return out

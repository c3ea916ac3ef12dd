"""Episodes that ended in an env/sandbox error: kept as rows, never trained on, out of the groups.

The known answer of the issue: a group of 3 solved + 1 errored episode must give advantages
[0, 0, 0] over the three valid rows (equal scores) and 0 on the errored one, not the
[0.5, 0.5, 0.5, -1.5] of treating the error as a wrong answer.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.advantages import AdvantageInputs, compute_advantages, compute_gae
from rlvr.algorithms.kl import FixedKLController, apply_kl_in_reward
from rlvr.batch import RolloutBatch
from rlvr.errors import BatchError
from rlvr.trajectory import Trajectory

GROUP_ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline")


def episode(score: float, *, error: bool = False, group: str = "g", n: int = 3) -> Trajectory:
    """A one-turn episode of ``n`` model tokens with its reward on the last one."""
    return Trajectory(
        prompt_ids=[5, 6], response_ids=[7] * n, response_mask=[1] * n,
        rollout_logprobs=[-0.5] * n, token_level_scores=[0.0] * (n - 1) + [score],
        group_id=group, finish_reason="error" if error else "stop",
    )


def advantages_of(batch: RolloutBatch, name: str, **kw) -> list[float]:
    """One scalar advantage per row (the value on the row's last token)."""
    adv, _ = compute_advantages(name, AdvantageInputs(
        batch.token_level_scores, batch.response_mask, group_ids=batch.group_ids,
        valid=batch.valid, **kw))
    return adv[:, -1].tolist()


def test_collation_marks_error_rows_invalid_with_mask_zero():
    batch = RolloutBatch.from_trajectories([episode(1.0), episode(0.0, error=True)], 0)
    assert batch.valid.tolist() == [True, False]
    assert batch.response_mask.tolist() == [[1.0] * 3, [0.0] * 3]
    # the row keeps its tokens (same layout on every rank), only its mask is gone
    assert batch.responses[1].tolist() == [7, 7, 7]
    assert batch.attention_mask[1].sum() == 5


def test_valid_travels_through_select_concat_and_to():
    a = RolloutBatch.from_trajectories([episode(1.0), episode(0.0, error=True)], 0)
    b = RolloutBatch.from_trajectories([episode(0.0, error=True, n=5), episode(1.0)], 0)
    both = RolloutBatch.concat([a, b])
    assert both.valid.tolist() == [True, False, False, True]
    assert both.select([3, 1]).valid.tolist() == [True, False]
    assert both.to("meta").valid.device.type == "meta"
    assert list(both.minibatches(4, seed=0))[0].valid.sum() == 2


def test_constructor_refuses_an_error_row_with_mask_one():
    batch = RolloutBatch.from_trajectories([episode(1.0), episode(1.0)], 0)
    fields = {**batch.tensor_fields(), "group_ids": ["g", "g"], "env_ids": ["", ""],
              "task_ids": ["", ""], "metadata": [{}, {}], "pad_token_id": 0}
    with pytest.raises(BatchError, match=r"rows \[1\] are not valid .* response_mask 1"):
        RolloutBatch(**fields, finish_reasons=["stop", "error"])
    derived = RolloutBatch(**fields, finish_reasons=["stop", "length"])
    assert derived.valid.tolist() == [True, True]


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_three_solved_and_one_error_give_zero_advantages(name):
    batch = RolloutBatch.from_trajectories(
        [episode(1.0), episode(1.0), episode(1.0), episode(0.0, error=True)], 0)
    assert advantages_of(batch, name) == [0.0, 0.0, 0.0, 0.0]


def test_without_valid_the_error_counts_as_a_wrong_answer():
    """What the trainer did before: the errored row enters the group as a score of 0."""
    batch = RolloutBatch.from_trajectories(
        [episode(1.0), episode(1.0), episode(1.0), episode(0.0)], 0)
    assert advantages_of(batch, "drgrpo") == pytest.approx([0.25, 0.25, 0.25, -0.75])
    assert advantages_of(batch, "rloo") == pytest.approx([1 / 3, 1 / 3, 1 / 3, -1.0])
    assert advantages_of(batch, "grpo") == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)


# Scores [1, 0, 1, error] over the valid rows: mean 2/3, unbiased std sqrt(1/3).
MIXED = {
    "grpo": [3**-0.5, -2 * 3**-0.5, 3**-0.5, 0.0],          # (s - 2/3) / sqrt(1/3)
    "drgrpo": [1 / 3, -2 / 3, 1 / 3, 0.0],                  # s - 2/3
    "rloo": [0.5, -1.0, 0.5, 0.0],                          # 3/2 * (s - 2/3)
    # s - 2/3 on each of the 9 valid tokens, whitened over them: unbiased var 2/8, std 1/2
    "reinforce_pp_baseline": [2 / 3, -4 / 3, 2 / 3, 0.0],
}


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_mixed_group_with_an_error_known_answer(name):
    batch = RolloutBatch.from_trajectories(
        [episode(1.0), episode(0.0), episode(1.0), episode(1.0, error=True)], 0)
    got = advantages_of(batch, name)
    assert got == pytest.approx(MIXED[name], abs=1e-5)
    assert got[3] == 0.0


@pytest.mark.parametrize("name", GROUP_ESTIMATORS + ("gae", "reinforce_pp"))
def test_error_rows_never_change_the_valid_rows(name):
    """Whatever an error row holds, the other rows get what they get without it."""
    gen = torch.Generator().manual_seed(0)
    trajs = [episode(float(torch.rand(1, generator=gen)), group=f"g{i % 2}") for i in range(6)]
    broken = [episode(1e3, error=True, group="g0"), episode(-1e3, error=True, group="g1")]
    full = RolloutBatch.from_trajectories(trajs + broken, 0)
    clean = RolloutBatch.from_trajectories(trajs, 0)
    values = torch.randn(8, 3, generator=gen)
    values[6:] = 1e4
    kw = {"values": values} if name == "gae" else {}
    got, got_ret = compute_advantages(name, AdvantageInputs(
        full.token_level_scores, full.response_mask, group_ids=full.group_ids, valid=full.valid,
        lam=0.9, **kw))
    kw = {"values": values[:6]} if name == "gae" else {}
    want, want_ret = compute_advantages(name, AdvantageInputs(
        clean.token_level_scores, clean.response_mask, group_ids=clean.group_ids, lam=0.9, **kw))
    torch.testing.assert_close(got[:6], want, atol=1e-6, rtol=0)
    torch.testing.assert_close(got_ret[:6], want_ret, atol=1e-6, rtol=0)
    if name != "gae":  # GAE leaves masked positions unzeroed; every loss masks them
        assert got[6:].abs().max() == 0


def test_gae_whitening_does_not_see_error_rows():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 50.0]])
    values = torch.tensor([[0.5, 0.2], [0.1, 0.3], [9.0, 9.0]])
    mask = torch.ones(3, 2)
    valid = torch.tensor([True, True, False])
    got, _ = compute_advantages(
        "gae", AdvantageInputs(rewards, mask, values=values, valid=valid, lam=0.95))
    want, _ = compute_gae(AdvantageInputs(rewards[:2], mask[:2], values=values[:2], lam=0.95))
    torch.testing.assert_close(got[:2], want)
    # the two valid rows are whitened among themselves: mean 0, unbiased std 1
    assert float(got[:2].mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(got[:2].std()) == pytest.approx(1.0, abs=1e-4)


def test_group_of_only_errors_gives_zero():
    batch = RolloutBatch.from_trajectories(
        [episode(1.0, error=True), episode(0.0, error=True, group="h"), episode(1.0, group="h")],
        0)
    # "h" has one valid row: a group of one (mean 0, std 1, so 1 / (1 + eps))
    assert advantages_of(batch, "grpo") == pytest.approx([0.0, 0.0, 1.0], abs=1e-5)


def test_in_reward_kl_mean_leaves_error_rows_out():
    """The controller's current KL is the mean over rows that have tokens, not over all rows."""
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    logp = torch.tensor([[-1.0, -1.0], [0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.5], [-9.0, -9.0]])
    _, metrics = apply_kl_in_reward(torch.zeros(2, 2), logp, ref, mask, FixedKLController(0.1))
    assert metrics["reward_kl_penalty"] == pytest.approx(0.5)

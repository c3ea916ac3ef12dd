from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.batch import OPTIONAL_FIELDS, RolloutBatch, position_ids_from_attention_mask
from rlvr.errors import BatchError, ShapeError, UnknownNameError
from rlvr.trajectory import Trajectory

PAD = 0


def traj(prompt, response, mask=None, scores=None, group="g", **kw) -> Trajectory:
    n = len(response)
    return Trajectory(
        prompt_ids=list(prompt),
        response_ids=list(response),
        response_mask=list(mask) if mask is not None else [1] * n,
        rollout_logprobs=[-0.5] * n,
        token_level_scores=list(scores) if scores is not None else [0.0] * n,
        group_id=group,
        **kw,
    )


@st.composite
def trajectories(draw, min_rows=1, max_rows=5):
    rows = draw(st.integers(min_rows, max_rows))
    out = []
    for _ in range(rows):
        p = draw(st.lists(st.integers(1, 50), min_size=1, max_size=6))
        r = draw(st.integers(0, 7))
        resp = draw(st.lists(st.integers(1, 50), min_size=r, max_size=r))
        mask = draw(st.lists(st.sampled_from([0, 1]), min_size=r, max_size=r))
        lp = draw(st.lists(st.floats(-5, 0, width=32), min_size=r, max_size=r))
        sc = draw(st.lists(st.floats(-1, 1, width=32), min_size=r, max_size=r))
        out.append(
            Trajectory(
                p, resp, mask, lp, sc, group_id=draw(st.integers(0, 2)), task_id=str(len(out))
            )
        )
    return out


def test_collate_known_layout():
    batch = RolloutBatch.from_trajectories(
        [traj([5, 6, 7], [8, 9], mask=[1, 0], scores=[0.0, 1.0]), traj([3], [4, 4, 4])],
        pad_token_id=PAD,
    )
    assert batch.prompt_len == 3 and batch.response_len == 3 and len(batch) == 2
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 3, 4, 4, 4]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert batch.responses.tolist() == [[8, 9, 0], [4, 4, 4]]
    assert batch.response_mask.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert batch.response_mask.dtype == torch.float32
    assert batch.token_level_scores.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    assert batch.rollout_logprobs.tolist() == [[-0.5, -0.5, 0.0], [-0.5, -0.5, -0.5]]
    assert batch.response_lengths().tolist() == [2, 3]
    assert batch.prompt_lengths().tolist() == [3, 1]
    assert batch.group_ids == ["g", "g"] and batch.finish_reasons == ["stop", "stop"]
    assert all(getattr(batch, n) is None for n in OPTIONAL_FIELDS)


def test_max_response_len_fixes_width_and_rejects_longer():
    batch = RolloutBatch.from_trajectories([traj([1], [2])], pad_token_id=PAD, max_response_len=4)
    assert batch.responses.shape == (1, 4)
    with pytest.raises(
        BatchError, match=r"row 1: response_ids has 3 tokens, more than max_response_len=2"
    ):
        RolloutBatch.from_trajectories([traj([1], [2]), traj([1], [2, 3, 4])], PAD, 2)


def test_empty_responses_get_one_padded_column():
    batch = RolloutBatch.from_trajectories([traj([1, 2], [])], pad_token_id=PAD)
    assert batch.responses.shape == (1, 1) and batch.response_mask.sum() == 0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (traj([], [1]), r"row 1: prompt_ids is empty"),
        (traj([1], [1, 2], mask=[1]), r"row 1: response_mask has 1 entries but response_ids has 2"),
        (
            traj([1], [1], scores=[0.0, 1.0]),
            r"row 1: token_level_scores has 2 entries but response_ids has 1",
        ),
        (
            traj([1], [1, 2], mask=[1, 2]),
            r"row 1: response_mask\[1\] = 2; allowed values are 0 and 1",
        ),
        (traj([1], [-3]), r"row 1: response_ids\[0\] = -3; token ids must be non-negative ints"),
        (
            traj([1], [1], scores=[float("nan")]),
            r"row 1: token_level_scores\[0\] = nan; values must be finite",
        ),
    ],
)
def test_invalid_trajectory_names_field_and_row(bad, message):
    with pytest.raises(BatchError, match=message):
        RolloutBatch.from_trajectories([traj([1], [1]), bad], pad_token_id=PAD)


def test_rollout_logprobs_length_checked():
    bad = traj([1], [1, 2])
    bad.rollout_logprobs = [0.0]
    with pytest.raises(BatchError, match=r"row 0: rollout_logprobs has 1 entries"):
        RolloutBatch.from_trajectories([bad], pad_token_id=PAD)


def test_empty_list_rejected():
    with pytest.raises(BatchError, match="trajectories is empty"):
        RolloutBatch.from_trajectories([], pad_token_id=PAD)


def test_set_validates_name_shape_device_and_detaches():
    batch = RolloutBatch.from_trajectories([traj([1], [2, 3]), traj([1], [2])], pad_token_id=PAD)
    values = torch.ones(2, 2, requires_grad=True)
    batch.set("values", values * 2)
    assert batch.values is not None and not batch.values.requires_grad
    assert batch.require("values").tolist() == [[2.0, 2.0], [2.0, 2.0]]
    with pytest.raises(ShapeError, match=r"advantages has shape \(2, 3\); expected \(2, 2\)"):
        batch.set("advantages", torch.zeros(2, 3))
    with pytest.raises(
        UnknownNameError,
        match=r"unknown RolloutBatch field for set\(\) 'advantage'.*Did you mean 'advantages'",
    ):
        batch.set("advantage", torch.zeros(2, 2))
    with pytest.raises(BatchError, match=r"returns is not set on this batch"):
        batch.require("returns")
    if torch.device("meta") != batch.response_mask.device:
        with pytest.raises(BatchError, match=r"old_logprobs is on meta but the batch is on cpu"):
            batch.set("old_logprobs", torch.zeros(2, 2, device="meta"))


def test_constructor_checks_shapes():
    batch = RolloutBatch.from_trajectories([traj([1], [2, 3])], pad_token_id=PAD)
    with pytest.raises(BatchError, match=r"env_ids has 2 entries; expected one per row \(1\)"):
        RolloutBatch(
            **{
                **batch.tensor_fields(),
                "group_ids": [0],
                "env_ids": ["a", "b"],
                "task_ids": [""],
                "finish_reasons": ["stop"],
                "metadata": [{}],
            },
            pad_token_id=0,
        )


def test_select_out_of_range():
    batch = RolloutBatch.from_trajectories([traj([1], [2])], pad_token_id=PAD)
    with pytest.raises(BatchError, match=r"indices must lie in \[0, 1\); got \[1\]"):
        batch.select([1])


def test_concat_rejects_partially_set_field():
    a = RolloutBatch.from_trajectories([traj([1], [2])], pad_token_id=PAD)
    b = RolloutBatch.from_trajectories([traj([1], [2])], pad_token_id=PAD)
    a.set("advantages", torch.ones(1, 1))
    with pytest.raises(BatchError, match=r"advantages is set in batches \[0\] but not in \[1\]"):
        RolloutBatch.concat([a, b])


def test_to_moves_tensors():
    batch = RolloutBatch.from_trajectories([traj([1], [2])], pad_token_id=PAD)
    batch.set("values", torch.ones(1, 1))
    moved = batch.to("meta")
    assert all(t.device.type == "meta" for t in moved.tensor_fields().values())
    assert batch.values is not None and batch.values.device.type == "cpu"


@settings(max_examples=40, deadline=None)
@given(trajectories())
def test_collation_pads_and_aligns(trajs):
    batch = RolloutBatch.from_trajectories(trajs, pad_token_id=PAD)
    p = batch.prompt_len
    assert torch.equal(batch.responses, batch.input_ids[:, p:])
    assert torch.equal(batch.position_ids, position_ids_from_attention_mask(batch.attention_mask))
    for row, t in enumerate(trajs):
        n_p, n_r = len(t.prompt_ids), len(t.response_ids)
        assert batch.input_ids[row, p - n_p : p].tolist() == t.prompt_ids
        assert batch.input_ids[row, : p - n_p].eq(PAD).all()
        assert batch.responses[row, :n_r].tolist() == t.response_ids
        assert batch.responses[row, n_r:].eq(PAD).all()
        assert batch.attention_mask[row].tolist() == [0] * (p - n_p) + [1] * (n_p + n_r) + [0] * (
            batch.response_len - n_r
        )
        assert batch.response_mask[row, :n_r].tolist() == [float(m) for m in t.response_mask]
        assert batch.response_mask[row, n_r:].eq(0).all()
        assert batch.token_level_scores[row, :n_r].tolist() == t.token_level_scores
        assert batch.rollout_logprobs[row, :n_r].tolist() == t.rollout_logprobs
        # positions of real tokens count 0, 1, 2, ... from the first prompt token
        real = batch.attention_mask[row].bool()
        assert batch.position_ids[row, real].tolist() == list(range(n_p + n_r))


def _rows(batch: RolloutBatch, row: int):
    """Row content without padding, for comparing across layouts."""
    real = batch.attention_mask[row].bool()
    n_r = int(batch.response_lengths()[row])
    per_token = {
        n: t[row, :n_r].tolist()
        for n, t in batch.tensor_fields().items()
        if t.shape[1] == batch.response_len
    }
    return batch.input_ids[row, real].tolist(), per_token, batch.task_ids[row], batch.group_ids[row]


@settings(max_examples=40, deadline=None)
@given(trajectories(), trajectories(), st.randoms(use_true_random=False))
def test_concat_select_round_trip(ta, tb, rnd):
    a = RolloutBatch.from_trajectories(ta, pad_token_id=PAD)
    b = RolloutBatch.from_trajectories(tb, pad_token_id=PAD)
    a.set("advantages", torch.randn(len(a), a.response_len))
    b.set("advantages", torch.randn(len(b), b.response_len))
    both = RolloutBatch.concat([a, b])
    assert len(both) == len(a) + len(b)
    assert both.prompt_len == max(a.prompt_len, b.prompt_len)
    assert both.response_len == max(a.response_len, b.response_len)
    assert torch.equal(both.responses, both.input_ids[:, both.prompt_len :])
    # every row keeps its content
    for i in range(len(a)):
        assert _rows(both, i) == _rows(a, i)
    for i in range(len(b)):
        assert _rows(both, len(a) + i) == _rows(b, i)
    # select of a permutation, then concat of the two halves back, gives the same batch
    perm = list(range(len(both)))
    rnd.shuffle(perm)
    cut = rnd.randint(1, len(perm)) if len(perm) > 1 else 1
    parts = (
        [both.select(perm[:cut]), both.select(perm[cut:])]
        if cut < len(perm)
        else [both.select(perm)]
    )
    again = RolloutBatch.concat(parts)
    inverse = sorted(range(len(perm)), key=lambda i: perm[i])
    restored = again.select(inverse)
    for name, tensor in both.tensor_fields().items():
        assert torch.equal(getattr(restored, name), tensor), name
    assert restored.task_ids == both.task_ids and restored.group_ids == both.group_ids


def test_minibatches_reproducible_whole_rows():
    trajs = [traj([1], [10 + i] * (i % 3 + 1), group=i) for i in range(10)]
    batch = RolloutBatch.from_trajectories(trajs, pad_token_id=PAD)
    first = [mb.group_ids for mb in batch.minibatches(4, seed=7)]
    again = [mb.group_ids for mb in batch.minibatches(4, seed=7)]
    other = [mb.group_ids for mb in batch.minibatches(4, seed=8)]
    assert first == again and first != other
    assert [len(g) for g in first] == [4, 4, 2]
    assert sorted(g for gs in first for g in gs) == list(range(10))
    for mb in batch.minibatches(3, seed=1):
        for row, g in enumerate(mb.group_ids):
            assert mb.responses[row, : g % 3 + 1].tolist() == [10 + g] * (g % 3 + 1)
    plain = [mb.group_ids for mb in batch.minibatches(4, seed=0, shuffle=False, drop_last=True)]
    assert plain == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(BatchError, match="size must be >= 1; got 0"):
        next(batch.minibatches(0, seed=0))

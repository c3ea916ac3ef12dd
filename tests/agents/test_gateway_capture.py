"""EpisodeCapture's rows from a call tree (property-style checks on hand-made trees)."""

from __future__ import annotations

from rlvr.agents.gateway.capture import CallChoice, CallNode, EpisodeCapture


def _choice(ids):
    return CallChoice(list(ids), [-0.5] * len(ids), "stop")


def test_a_chain_is_one_row_with_env_tokens_between_calls():
    cap = EpisodeCapture("k")
    cap.add_call(CallNode([1, 2], None, choices=[_choice([3, 4])]))
    cap.add_call(CallNode([1, 2, 3, 4, 9, 9], (0, 0), choices=[_choice([5])]))
    [row] = cap.rows(1.0)
    r = row.record
    assert r.prompt_ids == [1, 2] and r.response_ids == [3, 4, 9, 9, 5]
    assert r.response_mask == [1, 1, 0, 0, 1]
    assert r.rollout_logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5]
    assert r.token_level_scores == [0, 0, 0, 0, 1.0]
    assert cap.prefix_breaks == 0


def test_branches_train_shared_tokens_once_and_breaks_start_rows():
    cap = EpisodeCapture("k")
    cap.add_call(CallNode([1], None, choices=[_choice([2]), _choice([3])]))   # n = 2
    cap.add_call(CallNode([1, 2, 7], (0, 0), choices=[_choice([4])]))         # continues choice 0
    cap.add_call(CallNode([8, 8], None, choices=[_choice([5])]))              # a prefix break
    cap.add_call(CallNode([1, 2, 7, 4, 6], (1, 0), choices=[]))               # failed: no choices
    rows = cap.rows(0.5)
    assert cap.prefix_breaks == 1
    assert [r.leaf for r in rows] == [(2, 0), (0, 1), (1, 0)]
    trained = [t for r in rows for t, m in zip(r.record.response_ids, r.record.response_mask) if m]
    assert sorted(trained) == [2, 3, 4, 5]  # every generated token trained exactly once
    assert [sum(r.record.token_level_scores) for r in rows] == [0.5, 0.5, 0.5]

"""The probe that proves each weight version an asynchronous engine claims (version_probe)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from probe_reduce_worker import reduce_worker
from transformers import AutoModelForCausalLM

from rlvr.agents.hf.engine import TransformersEngine
from rlvr.batch import RolloutBatch
from rlvr.errors import WeightSyncError
from rlvr.learner.logprobs import policy_forward
from rlvr.training.sync_guard import PROBE_METRIC, SyncGuard
from rlvr.training.version_probe import VersionProbe
from rlvr.trajectory import Trajectory


def _row(prompt, response, mask, finish="stop"):
    n = len(response)
    return Trajectory(prompt, response, mask, [0.0] * n, [0.0] * n, finish_reason=finish)


PLAYED = _row([5, 17, 40, 9], [33, 44, 55, 66, 77, 88], [1, 1, 0, 0, 1, 1])


@pytest.fixture()
def learner(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


@pytest.fixture()
def engine(tiny_model_path):
    with TransformersEngine(tiny_model_path) as eng:
        yield eng


def _score_rows(model):
    return lambda batch: policy_forward(model, batch)[0]


def test_the_probe_is_the_first_valid_row_with_a_model_token():
    probe = VersionProbe(pad_id=0)
    probe.choose([_row([1, 2], [3, 4], [1, 1], finish="error"),
                  _row([1, 2], [3, 4], [0, 0]), PLAYED])
    assert probe.row is not None and probe.row.response_ids == PLAYED.response_ids
    probe.choose([_row([9, 9], [9, 9], [1, 1])])  # chosen once
    assert probe.row.prompt_ids == PLAYED.prompt_ids


def test_the_same_weights_pass_and_other_weights_fail(learner, engine):
    probe = VersionProbe(pad_id=0)
    probe.check_engine(engine, 1)  # no probe yet: nothing
    probe.choose([PLAYED])
    probe.check_engine(engine, 1)  # the learner has not scored version 1: nothing
    assert probe.metrics() == {"sync/probe_checks": 0.0}
    probe.record_learner(1, _score_rows(learner))
    probe.check_engine(engine, 1)
    m = probe.metrics()
    assert m[PROBE_METRIC] < 1e-5 and m["sync/probe_version"] == 1.0
    assert m["sync/probe_checks"] == 1.0
    SyncGuard(None, torch.float32, "transformers").check(3, m)
    probe.check_engine(engine, 1)  # proven once
    assert PROBE_METRIC not in probe.metrics()

    with torch.no_grad():  # the learner moves on; the engine claims version 2, keeps version 1
        for p in learner.parameters():
            p.add_(0.05 * torch.randn_like(p))
    probe.record_learner(2, _score_rows(learner))
    probe.check_engine(engine, 2)
    m = probe.metrics()
    assert m[PROBE_METRIC] > 1e-2 and m["sync/probe_version"] == 2.0
    with pytest.raises(WeightSyncError, match="version 2"):
        SyncGuard(None, torch.float32, "transformers").check(4, m)
    engine.update_weights(learner.state_dict().items())  # now it lands
    probe.record_learner(3, _score_rows(learner))
    probe.check_engine(engine, 3)
    assert probe.metrics()[PROBE_METRIC] < 1e-5


class _Servers:
    """Two replicas' scores: one holds the learner's numbers, one is off by 0.5 on a model
    token; env-token positions (mask 0) carry garbage the probe must not read."""

    def __init__(self, truth):
        self.truth = truth

    def generate(self, *a):  # the Engine protocol's other members, unused here
        raise NotImplementedError

    update_weights = release_memory = resume_memory = close = generate

    def score(self, token_ids, start):
        good = [v if m else 99.0 for v, m in zip(self.truth, PLAYED.response_mask)]
        bad = list(good)
        bad[0] -= 0.5
        return {"http://a": good, "http://b": bad}


def test_the_worst_server_is_reported_and_env_tokens_are_not_compared(learner):
    probe = VersionProbe(pad_id=0)
    probe.choose([PLAYED])
    probe.record_learner(1, _score_rows(learner))
    truth = policy_forward(learner, RolloutBatch.from_trajectories([PLAYED], 0))[0][0].tolist()
    probe.check_engine(_Servers(truth), 1)
    m = probe.metrics()
    assert m[PROBE_METRIC] == pytest.approx(0.5 / 4, abs=1e-6)  # 4 model tokens
    assert m["sync/probe_max_token_diff"] == pytest.approx(0.5, abs=1e-6)
    assert probe.last_worst is not None and probe.last_worst.replica == "http://b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_see_the_same_worst_gap_and_pair_their_forwards():
    """Rank 1 proved version 3 with a large gap, rank 0 proved nothing this step: both ranks'
    guards must see rank 1's numbers (else one stops and the other hangs). Then only rank 0
    has a probe: both ranks still run the learner's (collective) forward once."""
    inputs = [{"loss": 1.0, "sync/probe_checks": 2.0},
              {"loss": 1.0, "sync/probe_checks": 3.0, PROBE_METRIC: 0.3,
               "sync/probe_version": 3.0, "sync/probe_max_token_diff": 0.9}]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(reduce_worker, args=(_free_port(), inputs, out), nprocs=2, join=True)
        results = [out[0][0], out[1][0]]
        forwards = [out[0][1:], out[1][1:]]
    # a rank without a probe yet (rank 1) still runs the learner's forward, on a stand-in row
    assert forwards == [([2], [1]), ([1], [])]
    assert results[0] == results[1] == {"loss": 1.0, "sync/probe_checks": 3.0, PROBE_METRIC: 0.3,
                                        "sync/probe_version": 3.0,
                                        "sync/probe_max_token_diff": 0.9}

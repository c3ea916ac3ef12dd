"""``learner.fsdp``: one fp32 rank trains the plain module, with the numbers FSDP2 gives it."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy

from rlvr.errors import ConfigError
from rlvr.learner import Actor, ActorConfig, OptimConfig
from rlvr.learner.parallel import uses_fsdp
from tests.rlvr.learner.learner_helpers import global_batch, params, run_steps


def test_uses_fsdp_shards_only_where_it_does_something():
    fp32 = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=None)
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    assert not uses_fsdp("auto", 1, fp32)
    assert uses_fsdp("auto", 2, fp32)
    assert uses_fsdp("auto", 1, bf16)  # FSDP2's policy does the bf16 casting
    assert uses_fsdp("always", 1, fp32)


def test_one_rank_plain_module_trains_exactly_as_fsdp2_does(tiny_model_path, dist_info):
    """Two updates (2 epochs x 4 micro-batches, entropy bonus) from the same weights: the plain
    module and the FSDP2-wrapped one end with identical weights and metrics."""
    def trained(mode: str):
        config = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=2, mini_batch_size=8,
                             epochs=2, entropy_coef=0.01, fsdp=mode)
        actor = Actor.from_pretrained(tiny_model_path, config, dist_info)
        metrics = run_steps(actor, global_batch(), 2)
        return actor, params(actor.module), metrics

    plain, plain_params, plain_metrics = trained("auto")
    sharded, sharded_params, sharded_metrics = trained("always")
    assert not isinstance(plain.module, FSDPModule)
    assert isinstance(sharded.module, FSDPModule)
    assert plain_params.keys() == sharded_params.keys()
    for name, value in plain_params.items():
        torch.testing.assert_close(value, sharded_params[name], rtol=1e-6, atol=1e-7,
                                   msg=lambda m, n=name: f"{n}: {m}")
    for a, b in zip(plain_metrics, sharded_metrics):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


def test_an_unknown_fsdp_mode_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"fsdp: unknown value 'never'; allowed: always, auto"):
        ActorConfig(fsdp="never")

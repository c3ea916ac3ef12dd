"""LoRA through peft: adapter-only training, the adapter-off reference, syncs, export, the guard."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from learner_helpers import (  # noqa: E402
    global_batch,
    make_group_batch,
    run_steps,
    two_rank_config,
    two_rank_lora,
    with_advantages,
)
from two_rank_worker import LORA_STEPS  # noqa: E402

from rlvr.agents.engine import SamplingParams  # noqa: E402
from rlvr.agents.engine_registry import EngineRequest, build_engine  # noqa: E402
from rlvr.batch import RolloutBatch  # noqa: E402
from rlvr.errors import ConfigError, WeightSyncError  # noqa: E402
from rlvr.learner import Actor, ActorConfig, LoraConfig, OptimConfig, reference_for  # noqa: E402
from rlvr.learner.lora import is_adapter_name, load_merged, merged_tensors  # noqa: E402
from rlvr.learner.modules import load_causal_lm  # noqa: E402
from rlvr.learner.reference import AdapterOffReference  # noqa: E402
from rlvr.learner.sharded import ShardedModel  # noqa: E402
from rlvr.training.sync_guard import METRIC, SyncGuard  # noqa: E402
from rlvr.trajectory import Trajectory

LORA = LoraConfig(rank=4, alpha=8.0)


def lora_config(**kw) -> ActorConfig:
    base = dict(optim=OptimConfig(lr=5e-2), micro_batch_size=8, lora=LORA, dual_clip=None)
    return ActorConfig(**(base | kw))


@pytest.fixture
def trained(tiny_model_path, dist_info):
    """A LoRA actor after two updates (its adapter is no longer zero)."""
    torch.manual_seed(0)
    actor = Actor.from_pretrained(tiny_model_path, lora_config(), dist_info)
    for seed in (0, 1):
        batch = with_advantages(make_group_batch(seed=seed), seed=seed)
        batch.set("old_logprobs", actor.compute_logprobs(batch))
        actor.update(batch)
    return actor


def test_only_the_adapter_trains_and_the_optimizer_holds_only_it(tiny_model_path, dist_info):
    actor = Actor.from_pretrained(tiny_model_path, lora_config(), dist_info)
    trainable = {n for n, p in actor.module.named_parameters() if p.requires_grad}
    assert trainable and all(is_adapter_name(n) for n in trainable)
    assert any(".q_proj.lora_A." in n for n in trainable)
    held = {id(p) for group in actor.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in actor.module.parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in actor.module.named_parameters()
              if not p.requires_grad}
    batch = with_advantages(make_group_batch(seed=3), seed=3)
    batch.set("old_logprobs", actor.compute_logprobs(batch))
    actor.update(batch)
    for name, param in actor.module.named_parameters():
        if name in frozen:
            assert torch.equal(param.detach(), frozen[name]), name


def test_the_reference_is_the_base_model_with_no_second_copy(trained, tiny_model_path, dist_info):
    reference = reference_for(trained, tiny_model_path, trained.config, dist_info)
    assert isinstance(reference, AdapterOffReference) and reference.actor is trained
    batch = make_group_batch(seed=5)
    base = load_causal_lm(tiny_model_path, torch.device("cpu"))
    ref_logp = reference.compute_logprobs(batch)
    torch.testing.assert_close(ref_logp, _logprobs(base, batch, trained), rtol=0, atol=1e-6)
    policy = trained.compute_logprobs(batch)
    assert (policy - ref_logp).abs().max() > 1e-3  # the adapter is on again afterwards


def test_merged_weights_and_the_peft_export_reproduce_the_policy(trained, tiny_model_path,
                                                                 tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    batch = make_group_batch(seed=7)
    policy = trained.compute_logprobs(batch)
    plain = load_causal_lm(tiny_model_path, torch.device("cpu"))
    loaded = plain.load_state_dict(dict(merged_tensors(trained.named_full_tensors(), LORA)),
                                   strict=False)
    assert not loaded.unexpected_keys and set(loaded.missing_keys) <= {"lm_head.weight"}  # tied
    torch.testing.assert_close(_logprobs(plain, batch, trained), policy, rtol=0, atol=1e-5)

    from rlvr.learner import export_adapter

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    out = export_adapter(trained.module, tmp_path / "export", LORA, tiny_model_path, tokenizer,
                         merged_dir=tmp_path / "export_merged")
    assert (out / "adapter_config.json").is_file()
    adapter_bytes = (out / "adapter_model.safetensors").stat().st_size
    merged_bytes = (tmp_path / "export_merged" / "model.safetensors").stat().st_size
    assert adapter_bytes < merged_bytes / 4  # the adapter alone
    import peft

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with_adapter = peft.PeftModel.from_pretrained(base, str(out))
    for model in (with_adapter, load_merged(out),
                  AutoModelForCausalLM.from_pretrained(tmp_path / "export_merged")):
        torch.testing.assert_close(_logprobs(model, batch, trained), policy, rtol=0, atol=1e-5)


def _logprobs(model: torch.nn.Module, batch: RolloutBatch, like: Actor) -> torch.Tensor:
    """``model``'s token logprobs of ``batch``, computed as the learner does."""
    return ShardedModel(model, ActorConfig(micro_batch_size=8), like.dist)._policy_logprobs(
        batch, 1.0)


def _episode_batch(engine, prompts: list[list[int]]) -> RolloutBatch:
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)

    async def run():
        return await asyncio.gather(*(engine.generate(p, params) for p in prompts))

    trajs = []
    for i, (prompt, done) in enumerate(zip(prompts, asyncio.run(run()))):
        n = len(done.token_ids)
        trajs.append(Trajectory(prompt_ids=prompt, response_ids=list(done.token_ids),
                                response_mask=[1] * n, rollout_logprobs=list(done.logprobs),
                                token_level_scores=[0.0] * n, group_id=i))
    return RolloutBatch.from_trajectories(trajs, pad_token_id=0)


def _logprob_diff(actor: Actor, batch: RolloutBatch) -> float:
    learner = actor.compute_logprobs(batch)
    mask = batch.response_mask
    return float(((learner - batch.rollout_logprobs).abs() * mask).sum() / mask.sum())


def test_an_engine_of_its_own_receives_the_adapter_alone_and_the_guard_proves_it(
        trained, tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    built = build_engine(EngineRequest(engine="transformers", model_path=tiny_model_path,
                                       tokenizer=tokenizer, lora=LORA.peft_kwargs()))
    engine = built.engine
    try:
        assert built.serves_adapter and not built.shares_weights
        assert not engine.lean  # the lean forward would read the base weights only
        sent = list(trained.named_sync_tensors(adapter_only=built.serves_adapter))
        assert sent and all(is_adapter_name(name) for name, _ in sent)
        engine.update_weights(sent)
        prompts = [[5, 9, 13, 2], [7, 7, 21], [30, 4, 4, 4, 11]]
        guard = SyncGuard(None, torch.float32, "transformers")
        guard.check(1, {METRIC: _logprob_diff(trained, _episode_batch(engine, prompts))})
        # A server that silently serves the base (adapter not applied): the run stops.
        for module in engine.model.modules():
            if hasattr(module, "lora_A"):
                module.enable_adapters(False)
        with pytest.raises(WeightSyncError, match="did not land"):
            guard.check(2, {METRIC: _logprob_diff(trained, _episode_batch(engine, prompts))})
    finally:
        engine.close()


@pytest.mark.slow
def test_two_gloo_ranks_train_the_adapter_as_one_rank_does(tiny_model_path, dist_info,
                                                           two_rank_runs):
    """Rank 0 initialises the adapter and scatters it with the base (else ranks hold garbage)."""
    import json

    import peft
    from transformers import AutoModelForCausalLM

    run_dir = two_rank_runs / "lora"
    two = json.loads((run_dir / "metrics.json").read_text())
    torch.manual_seed(0)
    actor = Actor.from_pretrained(tiny_model_path, two_rank_config(two_rank_lora()), dist_info)
    one = run_steps(actor, global_batch(), LORA_STEPS)
    assert len(one) == len(two) == LORA_STEPS
    for a, b in zip(one, two):
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert math.isfinite(b[key]) and b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6)
    exported = peft.PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_path), str(run_dir / "export"))
    batch = make_group_batch(seed=9)
    torch.testing.assert_close(_logprobs(exported, batch, actor), actor.compute_logprobs(batch),
                               rtol=0, atol=1e-5)


def test_target_modules_that_match_nothing_are_named(tiny_model_path, dist_info):
    with pytest.raises(ConfigError, match=r"target_modules \['qkv'\] match no linear layer.*"
                                          r"q_proj"):
        Actor.from_pretrained(tiny_model_path, lora_config(lora=LoraConfig(
            target_modules=["qkv"])), dist_info)


def _sglang_lora_engine(fake, tiny_model_path, tmp_path):
    from rlvr.agents.sglang import SGLangOptions

    return build_engine(EngineRequest(
        engine="sglang", model_path=tiny_model_path, work_dir=tmp_path, lora=LORA.peft_kwargs(),
        options=SGLangOptions(url=fake.url)))


def test_an_sglang_server_serves_the_adapter_by_name_and_the_guard_proves_it(
        trained, tiny_model_path, tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[2] / "agents"))
    from sglang_standin import FakeSGLang, json_body

    fake = FakeSGLang(tiny_model_path, lora=True, max_lora_rank=8)
    built = _sglang_lora_engine(fake, tiny_model_path, tmp_path)
    engine = built.engine
    try:
        assert built.serves_adapter
        prompts = [[5, 9, 13, 2], [7, 7, 21], [30, 4, 4, 4, 11]]
        guard = SyncGuard(None, torch.float32, "sglang")
        for version in (1, 2):  # each sync: a new adapter name, the previous one unloaded
            sent = list(trained.named_sync_tensors(adapter_only=True))
            assert sent and all(is_adapter_name(name) for name, _ in sent)
            engine.update_weights(iter(sent))
            name = engine.lora_name
            assert name is not None and name.endswith(f"-v{version}")
            assert set(fake.adapters) == {name}
            loaded = json_body(fake, "/load_lora_adapter")[-1]
            assert loaded["lora_name"] == name
            assert (Path(loaded["lora_path"]) / "adapter_model.safetensors").is_file()
            guard.check(version, {METRIC: _logprob_diff(trained, _episode_batch(engine, prompts))})
            assert json_body(fake, "/generate")[-1]["lora_path"] == name
        assert [b["lora_name"] for b in json_body(fake, "/unload_lora_adapter")] == [
            name.replace("-v2", "-v1")]
        assert not (tmp_path / "weights_sync" / "lora" / name.replace("-v2", "-v1")).exists()
        # A server that silently serves the base under the adapter's name: the run stops.
        fake.adapters[name] = fake.engine
        with pytest.raises(WeightSyncError, match="did not land"):
            guard.check(3, {METRIC: _logprob_diff(trained, _episode_batch(engine, prompts))})
    finally:
        engine.close()
        fake.close()


@pytest.mark.parametrize("server", [{"lora": False}, {"lora": True, "max_lora_rank": 2}])
def test_an_sglang_server_that_cannot_serve_the_adapter_gets_merged_weights(
        server, tiny_model_path, tmp_path, caplog):
    sys.path.insert(0, str(Path(__file__).parents[2] / "agents"))
    from sglang_standin import FakeSGLang

    fake = FakeSGLang(tiny_model_path, **server)
    try:
        with caplog.at_level("WARNING", logger="rlvr.agents.sglang.engine_builder"):
            built = _sglang_lora_engine(fake, tiny_model_path, tmp_path)
        built.engine.close()
        assert not built.serves_adapter
        assert len([r for r in caplog.records if "merged weights" in r.getMessage()]) == 1
    finally:
        fake.close()

"""The transformers engine's versions and in-flight weight updates (``VersionedEngine``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from agent_helpers import continued_logprobs

from rlvr.agents.engine import SamplingParams, VersionedEngine
from rlvr.agents.errors import RequestError
from rlvr.agents.hf.engine import TransformersEngine

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23], [40, 41, 42]]
SAMPLING = [SamplingParams(temperature=1.0, max_new_tokens=24, seed=i) for i in range(4)]


@pytest.fixture(scope="module")
def new_model(tiny_model_path):
    """The tiny model with every weight moved: version 1's weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


def _generate_with_update(engine, new_model, mode, after_steps=4):
    """Generate ``PROMPTS`` and push ``new_model``'s weights as version 1 mid-generation."""
    slow = engine.model.get_input_embeddings().register_forward_pre_hook(
        lambda mod, args: time.sleep(0.01))  # room for the update to land mid-generation
    results: list = []
    engine.set_weight_version(0)

    async def play():
        return await asyncio.gather(*(engine.generate(p, s) for p, s in zip(PROMPTS, SAMPLING)))

    thread = threading.Thread(target=lambda: results.append(asyncio.run(play())))
    try:
        start = engine.steps
        thread.start()
        while engine.steps < start + after_steps:
            time.sleep(0.001)
        engine.update_weights_in_flight(new_model.state_dict().items(), 1, mode)
        thread.join(60)
    finally:
        slow.remove()
    assert results, "generation never returned"
    return results[0]


def _full_logprobs(model, prompt, tokens):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def test_versions_are_recorded_and_an_idle_update_just_loads(tiny_model_path, new_model):
    engine = TransformersEngine(tiny_model_path)
    try:
        assert isinstance(engine, VersionedEngine) and engine.weight_version == 0
        out = asyncio.run(engine.generate(PROMPTS[0], SAMPLING[0]))
        assert out.versions is None and out.regenerated == 0  # no version declared yet
        engine.set_weight_version(0)
        out = asyncio.run(engine.generate(PROMPTS[0], SAMPLING[0]))
        assert out.versions == [0] * len(out.token_ids)
        engine.update_weights_in_flight(new_model.state_dict().items(), 3, "continue")
        out = asyncio.run(engine.generate(PROMPTS[0], SAMPLING[0]))
        assert engine.weight_version == 3 and out.versions == [3] * len(out.token_ids)
        gap = (_full_logprobs(new_model, PROMPTS[0], out.token_ids)
               - torch.tensor(out.logprobs)).abs().max()
        assert gap < 1e-4
        engine.set_weight_version(4)
        assert asyncio.run(engine.generate(PROMPTS[1], SAMPLING[1])).versions[0] == 4
        with pytest.raises(RequestError, match="mode must be one of continue, abort; got 'x'"):
            engine.update_weights_in_flight([], 5, "x")  # type: ignore[arg-type]
    finally:
        engine.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "module"])
def test_continue_swaps_between_decode_steps_and_keeps_the_cache(tiny_model_path, tiny_model,
                                                                 new_model, lean):
    """Tokens before the swap carry version 0 and the old weights' logprobs; the tokens after
    it carry version 1 and the logprobs of the NEW weights reading the KV cache the OLD weights
    wrote (the cache is kept): the same numbers as an HF forward that does exactly that."""
    engine = TransformersEngine(tiny_model_path, lean=lean)
    try:
        outs = _generate_with_update(engine, new_model, "continue")
    finally:
        engine.close()
    mixed = 0
    for prompt, out in zip(PROMPTS, outs):
        assert out.regenerated == 0 and len(out.versions) == len(out.token_ids)
        k = out.versions.count(0)
        assert out.versions == [0] * k + [1] * (len(out.token_ids) - k)
        got = torch.tensor(out.logprobs)
        if k:  # before the swap: the old weights
            assert (_full_logprobs(tiny_model, prompt, out.token_ids)[:k] - got[:k]).abs().max() \
                < 1e-4
        if 0 < k < len(out.token_ids):
            mixed += 1
            after = continued_logprobs(tiny_model, new_model, prompt, out.token_ids, k)
            assert (after - got[k:]).abs().max() < 1e-4
            # not the old weights' numbers: the swap landed
            assert (_full_logprobs(tiny_model, prompt, out.token_ids)[k:] - got[k:]).abs().max() \
                > 1e-2
    assert mixed >= 1, [o.versions for o in outs]


def test_abort_regenerates_under_the_new_weights(tiny_model_path, new_model):
    """Rows running at the swap are dropped and generated again from their prompts: every
    token carries version 1 and the new weights' logprobs, and the regeneration is counted."""
    engine = TransformersEngine(tiny_model_path)
    try:
        outs = _generate_with_update(engine, new_model, "abort")
        assert engine.regenerated == sum(o.regenerated for o in outs) >= 1
    finally:
        engine.close()
    for prompt, out in zip(PROMPTS, outs):
        if out.regenerated:
            assert out.versions == [1] * len(out.token_ids)
            gap = (_full_logprobs(new_model, prompt, out.token_ids) - torch.tensor(out.logprobs))
            assert gap.abs().max() < 1e-4
        else:  # finished before the swap
            assert out.versions == [0] * len(out.token_ids)


def test_an_episode_record_carries_the_versions_of_its_tokens():
    from rlvr.agents.episode import EpisodeRecord

    record = EpisodeRecord([1, 2])
    assert record.to_trajectory().policy_versions is None
    record.add_env_tokens([3])  # before any model token: the oldest version
    record.add_model_turn([1, 2, 3], [4, 5, 6], [-0.1] * 3, [2, 2, 3])
    record.add_env_tokens([7, 8])  # the turn's last version
    record.add_model_turn([1, 2, 3, 4, 5, 6, 7, 8], [9], [-0.2])  # an unversioned turn: oldest
    record.check()
    assert record.to_trajectory().policy_versions == [2, 2, 2, 3, 3, 3, 2]

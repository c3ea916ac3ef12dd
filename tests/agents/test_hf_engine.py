from __future__ import annotations

import asyncio

import pytest
import torch

from rlvr.agents.engine import Completion, Engine, SamplingParams, ScoringEngine
from rlvr.agents.errors import (
    EngineClosedError,
    RequestError,
    SamplingParamsError,
    WeightUpdateError,
)
from rlvr.agents.hf.engine import TransformersEngine
from rlvr.agents.hf.scheduler import HOLD_STEPS

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23], [30] * 9, [40, 41, 42]]


def _gather(engine, prompts, params):
    async def go():
        return await asyncio.gather(*[engine.generate(p, s) for p, s in zip(prompts, params)])

    return asyncio.run(go())


def _forward_logprobs(model, prompt, completion, temperature=1.0):
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, Engine)


def test_batched_logprobs_match_a_plain_forward(engine, tiny_model):
    params = [SamplingParams(temperature=0.8, max_new_tokens=n, seed=i)
              for i, n in enumerate([9, 3, 6, 1, 12])]
    outs = _gather(engine, PROMPTS, params)
    for prompt, sp, out in zip(PROMPTS, params, outs):
        assert len(out.token_ids) == len(out.logprobs) <= sp.max_new_tokens
        mine = _forward_logprobs(tiny_model, prompt, out, 0.8)
        assert (mine - torch.tensor(out.logprobs)).abs().max().item() < 1e-4


def test_score_gives_the_sampled_tokens_logprobs(engine, tiny_model):
    """Teacher-forced scoring (the async sync guard's probe) equals the logprobs reported while
    sampling at temperature 1, and a plain forward; bad requests are refused."""
    params = [SamplingParams(temperature=1.0, max_new_tokens=10, seed=i) for i in range(3)]
    for prompt, out in zip(PROMPTS, _gather(engine, PROMPTS[:3], params)):
        scored = engine.score(prompt + out.token_ids, len(prompt))
        assert list(scored) == ["transformers"]
        got = torch.tensor(scored["transformers"])
        assert (got - torch.tensor(out.logprobs)).abs().max().item() < 1e-5
        assert (got - _forward_logprobs(tiny_model, prompt, out)).abs().max().item() < 1e-5
    assert isinstance(engine, ScoringEngine)
    for ids, start in (([], 1), ([1, 2], 0), ([1, 2], 2), ([1, -2], 1), ([1, 10**9], 1)):
        with pytest.raises(RequestError):
            engine.score(ids, start)


def test_seeded_sampling_is_batch_invariant(engine):
    target = SamplingParams(temperature=1.0, max_new_tokens=10, seed=123)
    alone = _gather(engine, [PROMPTS[0]], [target])[0]
    others = [SamplingParams(temperature=1.0, max_new_tokens=n, seed=None) for n in (4, 15, 2, 7)]
    mixed = _gather(engine, PROMPTS, [target, *others])[0]
    assert mixed.token_ids == alone.token_ids
    assert mixed.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    # requests admitted mid-flight into a running batch give the same tokens too
    async def staggered():
        async def late(i, delay):
            await asyncio.sleep(delay)
            sp = target if i == 0 else others[i - 1]
            return await engine.generate(PROMPTS[i], sp)

        return await asyncio.gather(late(1, 0), late(2, 0), late(0, 0.005), late(3, 0.01))

    assert asyncio.run(staggered())[2].token_ids == alone.token_ids
    other_seed = _gather(engine, [PROMPTS[0]], [target.replace(seed=124)])[0]
    assert other_seed.token_ids != alone.token_ids


def test_concurrent_requests_share_decode_steps_and_finished_rows_leave(tiny_model, tiny_tokenizer):
    eng = TransformersEngine(tiny_model, tiny_tokenizer, max_batch_size=8)
    sizes: list[int] = []
    hook = tiny_model.get_input_embeddings().register_forward_pre_hook(
        lambda mod, args: sizes.append(args[0].shape)
    )
    try:
        lengths = [2, 5, 9]
        params = [SamplingParams(temperature=1.0, max_new_tokens=n, seed=n) for n in lengths]
        outs = _gather(eng, PROMPTS[:3], params)
    finally:
        hook.remove()
        eng.close()
    assert [len(o.token_ids) for o in outs if o.finish_reason == "length"] == [
        n for n, o in zip(lengths, outs) if o.finish_reason == "length"
    ]
    prefill, decode = sizes[0], sizes[1:]
    assert prefill[0] == 3  # the three requests were prefilled together
    assert all(s[1] == 1 for s in decode)  # then one token per row per step
    rows = [s[0] for s in decode]
    assert rows == sorted(rows, reverse=True) and rows[-1] == 1  # finished rows left the batch
    longest = max(len(o.token_ids) for o in outs)
    assert len(decode) == longest - 1  # no padding steps for finished rows


def test_a_prompt_sent_by_several_requests_is_prefilled_once(tiny_model, tiny_tokenizer):
    eng = TransformersEngine(tiny_model, tiny_tokenizer, max_batch_size=8)
    params = [SamplingParams(temperature=1.0, max_new_tokens=6, seed=s) for s in range(5)]
    alone = [_gather(eng, [PROMPTS[0]], [sp])[0] for sp in params[:4]]
    sizes: list[int] = []
    hook = tiny_model.get_input_embeddings().register_forward_pre_hook(
        lambda mod, args: sizes.append(args[0].shape[0])
    )
    try:
        outs = _gather(eng, [PROMPTS[0]] * 4 + [PROMPTS[1]], params)
    finally:
        hook.remove()
        eng.close()
    assert sizes[0] == 2  # two distinct prompts in the prefill, five rows decoded after it
    assert sizes[1] == sum(len(o.token_ids) > 1 for o in outs) > 2
    for got, want in zip(outs, alone):
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    for prompt, out in zip([PROMPTS[0]] * 4 + [PROMPTS[1]], outs):
        mine = _forward_logprobs(tiny_model, prompt, out)
        assert (mine - torch.tensor(out.logprobs)).abs().max().item() < 1e-4


def test_requests_of_later_loop_iterations_are_released_too(engine):
    params = SamplingParams(temperature=1.0, max_new_tokens=3, seed=1)

    async def late(prompt, hops):
        for _ in range(hops):
            await asyncio.sleep(0)
        return await engine.generate(prompt, params)

    async def go():
        return await asyncio.gather(*(late(p, hops) for hops, p in enumerate(PROMPTS)))

    outs = asyncio.run(go())  # one release per loop iteration: none is left staged
    assert [o.token_ids for o in outs] == [_gather(engine, [p], [params])[0].token_ids
                                           for p in PROMPTS]
    assert not engine._bridge.staged and not engine._bridge.releasing


@pytest.mark.parametrize("longest", [HOLD_STEPS, HOLD_STEPS + 20])
def test_completions_are_held_only_in_a_batchs_last_steps(engine, longest):
    async def go():
        short = asyncio.ensure_future(engine.generate(PROMPTS[0], SamplingParams(
            temperature=0, max_new_tokens=1)))
        long = asyncio.ensure_future(engine.generate(PROMPTS[1], SamplingParams(
            temperature=0, max_new_tokens=longest)))
        await short
        return long.done(), len((await long).token_ids)

    held, n = asyncio.run(go())
    assert n == longest  # the random tiny model never says eos here (greedy)
    assert held == (longest <= HOLD_STEPS)  # in the tail: handed back with the rest


def test_greedy_top_k_and_stop_conditions(engine, tiny_model, tiny_tokenizer):
    greedy = _gather(engine, [PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=8)])[0]
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        ref = tiny_model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                                  pad_token_id=tiny_tokenizer.pad_token_id)
    assert greedy.token_ids == ref[0, len(PROMPTS[0]):].tolist()
    top1 = _gather(engine, [PROMPTS[0]],
                   [SamplingParams(temperature=1.5, top_k=1, max_new_tokens=8, seed=3)])[0]
    assert top1.token_ids == greedy.token_ids
    nucleus = _gather(engine, [PROMPTS[0]],
                      [SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=8, seed=3)])[0]
    assert nucleus.token_ids == greedy.token_ids
    # a stop id ends generation and is included
    stop_id = greedy.token_ids[3]
    first = greedy.token_ids.index(stop_id)
    stopped = _gather(engine, [PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=8,
                                                            stop_token_ids=(stop_id,))])[0]
    assert stopped.finish_reason == "stop" and stopped.token_ids == greedy.token_ids[: first + 1]
    # a stop string ends generation at the token that completes it
    text = tiny_tokenizer.decode(greedy.token_ids[:5])
    needle = text[-2:]
    by_str = _gather(engine, [PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=8,
                                                           stop=(needle,))])[0]
    assert by_str.finish_reason == "stop"
    assert needle in tiny_tokenizer.decode(by_str.token_ids)
    assert needle not in tiny_tokenizer.decode(by_str.token_ids[:-1])


@pytest.mark.parametrize("lean", [True, False])
def test_shared_module_in_train_mode_is_restored(tiny_model_path, tiny_tokenizer, lean):
    """Dropout never reaches a completion, and the caller's train mode is back when idle.

    The module's own forward switches the module to eval mode for the batch; the lean forward
    has no dropout and leaves the mode alone (no ``eval()``/``train()`` walk per batch).
    """
    from transformers import AutoModelForCausalLM

    actor = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    actor.config.attention_dropout = 0.5  # would change outputs if eval mode were not used
    actor.train()
    modes: list[bool] = []
    switch = actor.train
    actor.train = lambda mode=True: (modes.append(mode), switch(mode))[1]  # type: ignore[method-assign]
    eng = TransformersEngine(actor, tiny_tokenizer, lean=lean)
    try:
        out = _gather(eng, [PROMPTS[1]], [SamplingParams(max_new_tokens=5, seed=1)])[0]
        assert actor.training
        assert modes == ([] if lean else [False, True])  # eval() calls train(False)
        actor.train = switch  # type: ignore[method-assign]
        actor.eval()
        mine = _forward_logprobs(actor, PROMPTS[1], out)
        assert (mine - torch.tensor(out.logprobs)).abs().max().item() < 1e-4
        assert all(p.grad is None for p in actor.parameters())
    finally:
        eng.close()


def test_update_weights_from_tensors_and_directory(tiny_model_path, tiny_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    eng = TransformersEngine(tiny_model_path)
    other = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.2, alpha=1.0)
    sp = [SamplingParams(temperature=0, max_new_tokens=6)]
    try:
        before = _gather(eng, [PROMPTS[0]], sp)[0]
        eng.update_weights(other.named_parameters())
        after = _gather(eng, [PROMPTS[0]], sp)[0]
        mine = _forward_logprobs(other, PROMPTS[0], after)
        assert (mine - torch.tensor(after.logprobs)).abs().max().item() < 1e-4
        assert after.logprobs != before.logprobs
        original = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        original.save_pretrained(tmp_path / "ckpt")
        eng.update_weights(str(tmp_path / "ckpt"))
        assert _gather(eng, [PROMPTS[0]], sp)[0].logprobs == pytest.approx(before.logprobs,
                                                                           abs=1e-6)
        with pytest.raises(WeightUpdateError, match="unknown parameter 'model.embed_tokenz"):
            eng.update_weights([("model.embed_tokenz.weight", torch.zeros(1))])
        with pytest.raises(WeightUpdateError, match="has shape \\(2,\\); the model expects"):
            eng.update_weights([("model.norm.weight", torch.zeros(2))])
        with pytest.raises(WeightUpdateError, match="no model.safetensors"):
            eng.update_weights(str(tmp_path))
    finally:
        eng.close()
    with pytest.raises(EngineClosedError, match="after close"):
        _gather(eng, [PROMPTS[0]], sp)


def test_request_and_sampling_validation(engine):
    with pytest.raises(RequestError, match="prompt_ids is empty"):
        _gather(engine, [[]], [SamplingParams()])
    with pytest.raises(RequestError, match=r"prompt_ids\[1\] = 99999; ids must be ints in"):
        _gather(engine, [[1, 99999]], [SamplingParams()])
    for bad in (True, -1, 2.0):  # bools are ints to Python but never token ids
        with pytest.raises(RequestError, match=rf"prompt_ids\[2\] = {bad!r}; ids must be ints"):
            _gather(engine, [[1, 2, bad, 3]], [SamplingParams()])
    with pytest.raises(SamplingParamsError, match="temperature must be a finite number >= 0"):
        SamplingParams(temperature=-1)
    with pytest.raises(SamplingParamsError, match="top_p must be in \\(0, 1\\]"):
        SamplingParams(top_p=0)
    with pytest.raises(SamplingParamsError, match="top_k must be -1"):
        SamplingParams(top_k=0)
    with pytest.raises(SamplingParamsError, match="max_new_tokens must be an int >= 1"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(SamplingParamsError, match="seed must be None or an int >= 0"):
        SamplingParams(seed=-3)
    with pytest.raises(SamplingParamsError, match="stop must hold non-empty strings"):
        SamplingParams(stop=("",))
    assert SamplingParams(stop_token_ids=[3, 4]).stop_token_ids == (3, 4)
    base = SamplingParams(temperature=0.5, max_new_tokens=3, stop=("x",))
    assert base.seeded(7) == base.replace(seed=7) and base.seeded(None) == base
    assert hash(base.seeded(7)) == hash(base.replace(seed=7)) and base.seed is None
    for bad in (-3, True, 1.0):
        with pytest.raises(SamplingParamsError, match="seed must be None or an int >= 0"):
            base.seeded(bad)


def test_context_limit_finishes_with_length(engine):
    long_prompt = [7] * (engine.max_context - 2)
    out = _gather(engine, [long_prompt], [SamplingParams(max_new_tokens=10, seed=0)])[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 2
    full = _gather(engine, [[7] * engine.max_context], [SamplingParams()])[0]
    assert full == Completion([], [], "length")

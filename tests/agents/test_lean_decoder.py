"""The lean Llama-family forward: which models it runs, its logits against the module's forward,
its preallocated KV buffers, and the engine's output with and without it."""

from __future__ import annotations

import asyncio

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.agents.engine import SamplingParams
from rlvr.agents.hf.engine import TransformersEngine
from rlvr.agents.hf.lean_decoder import KVBuffer, LeanDecoder, lean_unsupported

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23], [30] * 9, [40, 41, 42]]


def _model(kind: str, **overrides):
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(0)
    common = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.3)  # peaked attention: a wrong key or mask shows
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**{**common, **overrides})).eval()
    if kind == "llama":
        cfg = {**common, "attention_bias": True, "mlp_bias": True, "rope_theta": 500.0}
        return LlamaForCausalLM(LlamaConfig(**{**cfg, **overrides})).eval()
    if kind == "mistral":
        return MistralForCausalLM(MistralConfig(**{**common, **overrides})).eval()
    return GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4)).eval()


def test_it_runs_qwen2_llama_and_mistral_and_says_why_not_otherwise():
    assert lean_unsupported(_model("qwen2")) is None
    assert lean_unsupported(_model("llama")) is None
    assert lean_unsupported(_model("mistral", sliding_window=None)) is None
    assert "GPT2LMHeadModel is not one of" in lean_unsupported(_model("gpt2"))
    assert lean_unsupported(_model("mistral", sliding_window=16)) == "sliding-window attention"
    assert lean_unsupported(_model("qwen2", use_sliding_window=True, sliding_window=16,
                                   max_window_layers=0)) is not None
    assert "hidden_act" in lean_unsupported(_model("llama", hidden_act="gelu"))


def _reference_logits(model, seqs: list[list[int]]) -> list[torch.Tensor]:
    """Each sequence's next-token logits at every position, one unpadded forward each."""
    with torch.no_grad():
        return [model(torch.tensor([s])).logits[0] for s in seqs]


@pytest.mark.parametrize("kind", ["qwen2", "llama", "mha"])
def test_prefill_and_decode_logits_match_the_modules_forward(kind):
    """Left-padded prefill, decode steps past the buffer's room (it grows), rows dropped and
    padding columns trimmed mid-way, and a merge with late rows: every logit row equals the
    module's own forward over the unpadded sequence, to float rounding."""
    model = _model("qwen2" if kind == "mha" else kind,
                   **({"num_key_value_heads": 4} if kind == "mha" else {}))
    lean = LeanDecoder(model)
    gen = torch.Generator().manual_seed(1)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[3]]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    real = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts])
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    seqs = [list(p) for p in prompts]
    checks: list[tuple[int, int, torch.Tensor]] = []  # (seq, position, lean logits)
    with torch.no_grad():
        kv = lean.new_buffer(3, width + 2)  # room for 2 decode steps: the 3rd reallocates
        logits = lean.prefill(ids, real, positions, kv)
        checks += [(i, len(seqs[i]) - 1, logits[i]) for i in range(3)]
        rows = [0, 1, 2]
        for step in range(6):
            if step == 3:  # row 2 (the longest prompt) leaves: 2 padding columns are trimmed
                keep = torch.tensor([0, 1])
                start = int((real[keep].sum(0) > 0).nonzero()[0, 0])
                kv.select(keep, start)
                real, rows = real[keep][:, start:], [0, 1]
            if step == 4:  # a late row joins (prefilled on its own, then merged)
                late = lean.new_buffer(1, 8)
                late_ids = torch.tensor([PROMPTS[2]])
                late_logits = lean.prefill(late_ids, torch.ones_like(late_ids, dtype=torch.bool),
                                           torch.arange(4)[None], late)
                seqs.append(list(PROMPTS[2]))
                checks.append((3, 3, late_logits[0]))
                merged_width = max(kv.width, late.width)
                kv = KVBuffer.merged(kv, late, room=1)
                real = torch.cat([
                    torch.cat([torch.zeros(2, merged_width - real.shape[1], dtype=torch.bool),
                               real], 1),
                    torch.cat([torch.zeros(1, merged_width - 4, dtype=torch.bool),
                               torch.ones(1, 4, dtype=torch.bool)], 1)])
                rows = [0, 1, 3]
            nxt = torch.randint(1, 97, (len(rows),), generator=gen)
            for r, tok in zip(rows, nxt.tolist()):
                seqs[r].append(tok)
            real = torch.cat([real, torch.ones(len(rows), 1, dtype=torch.bool)], 1)
            pos = torch.tensor([[len(seqs[r]) - 1] for r in rows])
            logits = lean.decode(nxt[:, None], pos, kv, real)
            checks += [(r, len(seqs[r]) - 1, logits[j]) for j, r in enumerate(rows)]
    reference = _reference_logits(model, seqs)
    worst = max((ref_row - mine).abs().max().item()
                for r, at, mine in checks for ref_row in [reference[r][at]])
    assert worst < 1e-5, worst
    assert len(checks) == 3 + 3 * 3 + 2 + 1 + 2 * 3  # every row at every step was compared


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 5),
    width=st.integers(1, 6),
    room=st.integers(0, 3),
    grow=st.integers(1, 20),
    keep=st.lists(st.booleans(), min_size=5, max_size=5),
    trim=st.integers(0, 5),
)
def test_kv_buffer_keeps_the_used_columns_through_select_reserve_and_merge(
        rows, width, room, grow, keep, trim):
    kv = KVBuffer.empty(2, rows, 1, width + room, 3, torch.empty(0))
    for x in kv.keys + kv.values:
        x[:, :, :width] = torch.randn(rows, 1, width, 3)
    kv.end = width
    used = [x[:, :, :width].clone() for x in kv.keys + kv.values]
    kv.reserve(grow)
    assert kv.capacity - kv.end >= grow
    assert all(torch.equal(x[:, :, kv.start:kv.end], u) for x, u in zip(kv.keys + kv.values, used))
    picked = [i for i, k in enumerate(keep[:rows]) if k] or [0]
    start = min(trim, width - 1)
    kv.select(torch.tensor(picked), start)
    assert kv.width == width - start
    assert all(torch.equal(x[:, :, kv.start:kv.end], u[picked][:, :, start:])
               for x, u in zip(kv.keys + kv.values, used))
    other = KVBuffer.empty(2, 2, 1, 4, 3, torch.empty(0))
    for x in other.keys + other.values:
        x[:, :, :2] = torch.randn(2, 1, 2, 3)
    other.end = 2
    merged = KVBuffer.merged(kv, other, room=room)
    w = max(kv.width, 2)
    assert merged.width == w and merged.capacity == w + room
    for m, a, b in zip(merged.keys + merged.values, kv.keys + kv.values,
                       other.keys + other.values):
        assert torch.equal(m[: len(picked), :, w - kv.width:w], a[:, :, kv.start:kv.end])
        assert torch.equal(m[len(picked):, :, w - 2:w], b[:, :, :2])
        assert not m[: len(picked), :, : w - kv.width].any()  # left padding is zeros
        assert not m[len(picked):, :, : w - 2].any()


def _engine_outputs(model, lean: bool):
    """A mixed workload: seeded sampling with shared prompts, greedy rows, a long row that
    outgrows the buffer's first room, and requests that join a running batch."""
    params = [SamplingParams(temperature=1.0, max_new_tokens=n, seed=i)
              for i, n in enumerate([3, 8, 8, 8, 80])]
    params.append(SamplingParams(temperature=0.0, max_new_tokens=10))
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[1], PROMPTS[3], PROMPTS[4]]

    async def go(engine):
        async def late(prompt, sp, delay):
            await asyncio.sleep(delay)
            return await engine.generate(prompt, sp)

        first = [engine.generate(p, s) for p, s in zip(prompts, params)]
        joined = [late(PROMPTS[2], SamplingParams(temperature=1.0, max_new_tokens=12, seed=9),
                       0.01)]
        return await asyncio.gather(*first, *joined)

    with TransformersEngine(model, None, max_batch_size=16, lean=lean) as engine:
        assert engine.lean is lean
        engine.eos_token_ids = frozenset()  # rows end by their stop ids or their budget only
        return asyncio.run(go(engine))


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_engine_gives_the_same_completions_with_and_without_the_lean_forward(kind):
    model = _model(kind)
    fast, plain = _engine_outputs(model, True), _engine_outputs(model, False)
    assert [o.token_ids for o in fast] == [o.token_ids for o in plain]
    assert [o.finish_reason for o in fast] == [o.finish_reason for o in plain]
    assert max(len(o.token_ids) for o in fast) == 80  # the long row outgrew its first buffer
    for a, b in zip(fast, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_the_lean_forward_reads_the_modules_current_weights():
    model = _model("qwen2")
    sp = SamplingParams(temperature=0.0, max_new_tokens=5)
    with TransformersEngine(model, None, lean=True) as engine:
        before = asyncio.run(engine.generate(PROMPTS[0], sp))
        with torch.no_grad():
            model.lm_head.weight.zero_()
            model.lm_head.weight[:, 7] = 0  # every logit equal: greedy picks token 0
        after = asyncio.run(engine.generate(PROMPTS[0], sp))
    assert before.token_ids != [0] * 5
    assert after.token_ids == [0] * 5 and after.logprobs == pytest.approx([-4.5747] * 5, abs=1e-3)


def test_a_model_it_cannot_run_uses_the_modules_forward():
    with TransformersEngine(_model("gpt2"), None, lean=True) as engine:
        assert engine.lean is False
        out = asyncio.run(engine.generate(PROMPTS[0], SamplingParams(temperature=0.0,
                                                                    max_new_tokens=4)))
    assert len(out.token_ids) == 4


def test_the_compiled_layers_give_the_python_functions_logits():
    """TorchScript compiles the layers on this torch; its logits equal the Python function's."""
    from rlvr.agents.hf.lean_layers import compiled_layers, run_layers

    model = _model("llama")  # biases everywhere: every Optional weight is a tensor
    compiled = LeanDecoder(model)
    assert compiled.compiled
    plain = LeanDecoder(model)
    plain._layers = run_layers
    ids = torch.tensor([PROMPTS[0]])
    real = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        out = [lean.prefill(ids, real, torch.arange(ids.shape[1])[None], lean.new_buffer(1, 9))
               for lean in (compiled, plain)]
    assert torch.equal(out[0], out[1])
    assert compiled_layers()[0] is compiled._layers  # compiled once per process

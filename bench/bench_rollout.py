"""Rollout throughput: TransformersEngine (its lean forward, and the module's own forward) vs
``model.generate`` vs a hand-written KV-cache loop.

All three generate exactly ``--new-tokens`` sampled tokens (temperature 1) for the same
``--batch`` prompts of mixed lengths (eos is disabled so every row runs to the same length: the
engine's early-exit of finished rows is not what is measured here). Then the cost of the runner's
multi-turn bookkeeping per turn (chat-template delta, decoding the action, placing rewards, the
token-exact checker) is measured with an engine that answers instantly.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_rollout.py [--batch 16 --new-tokens 64]

Prints a table and writes bench/results/rollout.json. CPU timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import platform
import random
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from rlvr.agents.engine import Completion, SamplingParams
from rlvr.agents.hf.engine import TransformersEngine
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from rlvr.envs.base import TextEnv
from rlvr.tiny import TinyModelSpec, tiny_model_dir

SIZES = {
    "tiny": TinyModelSpec(),
    "small": TinyModelSpec(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                           num_key_value_heads=4, intermediate_size=1536),
}


def load(spec: TinyModelSpec):
    path = tiny_model_dir(spec)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.config.eos_token_id = None
    model.generation_config.eos_token_id = None
    return model, AutoTokenizer.from_pretrained(path)


def make_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab - 10) for _ in range(rng.randint(16, 128))] for _ in range(n)]


def bench_engine(model, prompts, new_tokens: int, lean: bool = True) -> float:
    engine = TransformersEngine(model, None, max_batch_size=len(prompts), lean=lean)
    assert engine.lean is lean
    sp = [SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=i)
          for i in range(len(prompts))]

    async def go():
        return await asyncio.gather(*[engine.generate(p, s) for p, s in zip(prompts, sp)])

    start = time.perf_counter()
    outs = asyncio.run(go())
    elapsed = time.perf_counter() - start
    engine.close()
    assert all(len(o.token_ids) == new_tokens for o in outs)
    return elapsed


def _left_padded(prompts, pad: int):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def bench_generate(model, prompts, new_tokens: int, pad: int) -> float:
    ids, mask = _left_padded(prompts, pad)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=pad)
    elapsed = time.perf_counter() - start
    assert out.shape[1] == ids.shape[1] + new_tokens
    return elapsed


def bench_manual_loop(model, prompts, new_tokens: int, pad: int) -> float:
    """The plainest batched KV-cache loop: prefill, then one token per step, batched sampling."""
    ids, mask = _left_padded(prompts, pad)
    start = time.perf_counter()
    with torch.no_grad():
        cache = DynamicCache()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                       use_cache=True, logits_to_keep=1).logits[:, -1]
        nxt_pos = pos[:, -1:] + 1
        for _ in range(new_tokens):
            probs = torch.softmax(logits.float(), -1)
            tok = torch.multinomial(probs, 1)
            torch.log_softmax(logits.float(), -1).gather(1, tok)  # the logprob, as the engine
            mask = torch.cat([mask, torch.ones_like(tok)], 1)
            logits = model(input_ids=tok, attention_mask=mask, position_ids=nxt_pos, cache=cache,
                           use_cache=True, logits_to_keep=1).logits[:, -1]
            nxt_pos = nxt_pos + 1
    return time.perf_counter() - start


class _InstantEngine:
    """Answers every request at once with a fixed short turn (measures bookkeeping only)."""

    def __init__(self, turn: list[int]):
        self.turn = turn

    async def generate(self, prompt_ids, sampling):
        return Completion(list(self.turn), [-1.0] * len(self.turn), "stop")

    def update_weights(self, weights):
        pass

    def release_memory(self):
        pass

    def resume_memory(self):
        pass

    def close(self):
        pass


class _ChattyEnv(TextEnv):
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": "Compute 12 + 30 with the tool."}], {"task_id": "b"}

    def step(self, action):
        return ([{"role": "tool", "content": "result: 42"}], 0.1, False, False,
                {"reward_spans": [(0, 4, 0.05)]})


def bench_bookkeeping(tokenizer, episodes: int, turns: int, check: bool) -> float:
    text = 'I will call the tool. <tool_call>{"name": "calc"}</tool_call>'
    turn = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    cfg = RunnerConfig(max_turns=turns, max_tokens_per_turn=len(turn) + 1,
                       max_response_tokens=100_000, check_token_exact=check, env_workers=4)
    runner = EpisodeRunner(_InstantEngine(turn), tokenizer, cfg)
    specs = [EpisodeSpec(env_factory=_ChattyEnv, seed=i) for i in range(episodes)]
    start = time.perf_counter()
    trajs = runner.run(specs)
    elapsed = time.perf_counter() - start
    runner.close()
    assert all(t.outcome.turns == turns for t in trajs)
    return elapsed / (episodes * turns)


def measure_size(size: str, batch: int, new_tokens: int, repeats: int) -> list[dict]:
    """Best-of-``repeats`` time of each method; methods are interleaved within each repeat so a
    change of load on the shared machine hits all of them alike."""
    model, tok = load(SIZES[size])
    prompts = make_prompts(batch, len(tok))
    pad = tok.pad_token_id
    runs = {
        "TransformersEngine": lambda: bench_engine(model, prompts, new_tokens),
        "engine, module fwd": lambda: bench_engine(model, prompts, new_tokens, lean=False),
        "model.generate": lambda: bench_generate(model, prompts, new_tokens, pad),
        "manual KV loop": lambda: bench_manual_loop(model, prompts, new_tokens, pad),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(fn())
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return [
        {"model": size, "params_M": params, "method": name, "seconds": min(ts),
         "median_seconds": sorted(ts)[len(ts) // 2], "tokens_per_s": batch * new_tokens / min(ts)}
        for name, ts in times.items()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="tiny,small")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = [r for size in args.sizes.split(",")
            for r in measure_size(size, args.batch, args.new_tokens, args.repeats)]
    _, tok = load(SIZES["tiny"])
    bookkeeping = {
        f"per_turn_ms_check_{check}": 1e3 * bench_bookkeeping(copy.deepcopy(tok), 32, 6, check)
        for check in (False, True)
    }
    print(f"{'model':6} {'params(M)':>9} {'method':20} {'best s':>7} {'median s':>8} "
          f"{'tokens/s':>9}")
    for r in rows:
        print(f"{r['model']:6} {r['params_M']:9.2f} {r['method']:20} {r['seconds']:7.3f} "
              f"{r['median_seconds']:8.3f} {r['tokens_per_s']:9.0f}")
    for k, v in bookkeeping.items():
        print(f"runner bookkeeping {k}: {v:.2f} ms")
    result = {
        "batch": args.batch, "new_tokens": args.new_tokens, "repeats": args.repeats,
        "threads": torch.get_num_threads(), "machine": platform.platform(),
        "note": "CPU, 2 cores shared with other jobs (load average far above 2): timings are "
                "noisy; best and median of interleaved repeats",
        "throughput": rows, "bookkeeping": bookkeeping,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

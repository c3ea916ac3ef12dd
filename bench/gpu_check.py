"""One-shot GPU check of the learner: ``bash dev.sh gpu-check`` (<= 8 minutes on one GPU).

On one CUDA GPU, with no network and the torch/transformers found there (nothing downloaded):

1. a Qwen2.5-0.5B-shaped model (config built here, random weights) is saved and loaded as the
   actor over NCCL (world size 1), FSDP2 with bf16 compute and fp32 master weights;
2. engine-vs-learner logprob parity in bf16: the TransformersEngine samples responses from the
   actor's own module; the learner scores the same tokens (mean and max |delta|);
3. one GRPO update (token budget, chunked logprobs): seconds, tokens/s and MFU
   (``6 x params x tokens / time / peak bf16 FLOP/s`` of the GPU, when known);
4. checkpoint and resume: a second actor loads the checkpoint; its weights, update counter and
   next update's loss equal the first's.

It prints one table. Without CUDA it says so and exits 0. ``--device cpu --layers 1 --vocab
1024`` runs the same path on the CPU (gloo, fp32) as a smoke test.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

#: Peak dense bf16 FLOP/s by GPU name fragment (vendor datasheets), for MFU.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12,
             "L4": 121e12, "4090": 165e12}


def peak_flops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one-shot GPU check of the learner")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run.")
        return 0
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agents.engine import SamplingParams
    from agents.hf_engine import TransformersEngine
    from rlvr.data import RolloutBatch, Trajectory
    from rlvr.learner import Actor, ActorConfig, Checkpointer, OptimConfig, init_distributed

    t_start = time.perf_counter()
    rows: list[tuple[str, str]] = []
    info = init_distributed(args.device)
    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    rows.append(("device", f"{dev_name}, torch {torch.__version__}"))
    import transformers

    rows.append(("transformers", transformers.__version__))
    config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=args.layers,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=args.vocab,
                         max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True)
    mp = "bf16" if args.device == "cuda" else "fp32"
    cfg = ActorConfig(optim=OptimConfig(lr=1e-6), micro_batch_size=args.rows,
                        max_tokens_per_micro_batch=8192, mixed_precision=mp)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        n_params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(Path(tmp, "model"), safe_serialization=True)
        del model
        rows.append(("model", f"Qwen2 {args.layers} layers, {n_params / 1e6:.0f} M params"))
        actor = Actor.from_pretrained(Path(tmp, "model"), cfg, info)

        # engine-vs-learner parity: sample with the actor's own module, score with the learner
        rng = random.Random(0)
        prompts = [[rng.randint(1, args.vocab - 1) for _ in range(64)]
                   for _ in range(max(1, args.rows // 4))]
        engine = TransformersEngine(actor.module, None, max_batch_size=args.rows)
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=0)

        async def play():
            return await asyncio.gather(*(engine.generate(p, sampling) for p in prompts
                                          for _ in range(4)))

        t0 = time.perf_counter()
        with actor.gathered():
            completions = asyncio.run(play())
        gen_s = time.perf_counter() - t0
        engine.close()
        n_new = sum(len(c.token_ids) for c in completions)
        rows.append(("engine decode",
                     f"{n_new} tokens in {gen_s:.1f} s, {n_new / gen_s:.0f} tok/s"))
        trajs = [Trajectory(prompt_ids=list(prompts[i // 4]), response_ids=list(c.token_ids),
                            response_mask=[1] * len(c.token_ids),
                            rollout_logprobs=list(c.logprobs),
                            token_level_scores=[0.0] * (len(c.token_ids) - 1) + [float(i % 2)],
                            group_id=i // 4) for i, c in enumerate(completions)]
        batch = RolloutBatch.from_trajectories(trajs, pad_token_id=0).to(info.device)
        learner_logp = actor.compute_logprobs(batch, 1.0)
        mask = batch.response_mask.bool()
        delta = (learner_logp - batch.rollout_logprobs).abs()[mask]
        rows.append(("logprob |engine - learner|",
                     f"mean {float(delta.mean()):.2e}, max {float(delta.max()):.2e} ({mp})"))

        # one GRPO update
        g = torch.Generator().manual_seed(0)
        batch.set("advantages", (torch.randn(len(batch), 1, generator=g).to(info.device)
                                 * batch.response_mask))
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        metrics = actor.update(batch, 1.0)
        if args.device == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - t0
        tokens = int(batch.attention_mask.sum())
        tps = tokens / step_s
        peak = peak_flops(dev_name)
        mfu = f"{6 * n_params * tps / peak:.1%}" if peak else "n/a (unknown GPU peak)"
        rows.append(("GRPO update", f"{step_s:.2f} s, {tps:.0f} tok/s, MFU {mfu}"))
        rows.append(("update loss / grad norm",
                     f"{metrics['actor/pg_loss']:.4f} / {metrics['actor/grad_norm']:.3f}"))
        if args.device == "cuda":
            peak_mem = torch.cuda.max_memory_allocated() / 2**30
            rows.append(("peak GPU memory", f"{peak_mem:.2f} GiB"))

        # checkpoint and resume
        ckpt = Path(tmp, "ckpt", "step_1")
        Checkpointer({"actor": actor}).save(ckpt)
        resumed = Actor.from_pretrained(Path(tmp, "model"), cfg, info)
        Checkpointer({"actor": resumed}).load(ckpt)
        same = all(torch.equal(a.full_tensor(), b.full_tensor())
                   for a, b in zip(actor.module.parameters(), resumed.module.parameters()))
        next_a = actor.update(batch, 1.0)["actor/pg_loss"]
        next_b = resumed.update(batch, 1.0)["actor/pg_loss"]
        ok = same and resumed.updates == 2 and abs(next_a - next_b) <= 1e-6 * max(1, abs(next_a))
        rows.append(("checkpoint + resume",
                     f"{'OK' if ok else 'MISMATCH'} (weights equal {same}, next loss "
                     f"{next_a:.6f} vs {next_b:.6f})"))
    rows.append(("wall time", f"{time.perf_counter() - t_start:.0f} s"))
    width = max(len(k) for k, _ in rows)
    print("\ngpu-check")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

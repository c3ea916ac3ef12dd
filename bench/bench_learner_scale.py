"""The learner at Qwen2.5-0.5B shape on 2 gloo ranks: memory per rank and speed of one GRPO update.

A Qwen2.5-0.5B-shaped model (config built here, random weights, vocab 151,936, tied embeddings)
is saved once; 2 gloo ranks load it (weights read on rank 0, scattered into shards), and run one
GRPO update of ``--rows`` sequences x ``--tokens`` tokens (half prompt, half response; 4 rows per
prompt) with a token budget per micro-batch. Per rank it reports the peak RSS, and the bytes of
parameters, gradients (after the last backward) and AdamW state it holds against the model's
total. The same update as a plain fwd+bwd+AdamW loop on one process (no FSDP, full logits,
``torch.log_softmax``) gives the baseline seconds per update and tokens/s.

Both arms recompute each decoder layer's activations in the backward pass (activation
checkpointing, as a real 0.5B run at 1,024 tokens would): without it the full size does not fit
this project's 24 GiB machine (rank 0 was killed at 12.1 GB RSS, both ranks at ~10 GB during the
first micro-batch). ``--no-checkpointing`` turns it off in both arms.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/bench_learner_scale.py      # full size, ~35 min
    .venv/bin/python bench/bench_learner_scale.py --layers 2 --rows 4 --tokens 128 --budget 256

``--lora R`` runs the same update twice on the 2 ranks, full fine-tuning and a rank-R LoRA
adapter on every projection (``actor.lora``), and prints them side by side: trainable
parameters, optimizer and gradient bytes, peak RSS, seconds per update, and the bytes one weight
sync sends (every full tensor vs the adapter's).

Prints a table and writes bench/results/learner_scale.json. CPU timings on a shared machine
are noisy; compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent


def qwen05b_config(layers: int, vocab: int):
    from transformers import Qwen2Config

    return Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                       num_attention_heads=14, num_key_value_heads=2, vocab_size=vocab,
                       max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True)


def make_batch(rows: int, tokens: int, vocab: int, seed: int = 0):
    from rlvr.batch import RolloutBatch
    from rlvr.trajectory import Trajectory

    rng = random.Random(seed)
    p = tokens // 2
    trajs = []
    for i in range(rows):
        if i % 4 == 0:
            prompt = [rng.randint(1, vocab - 1) for _ in range(p)]
        r = rng.randint(tokens // 4, tokens - p)
        trajs.append(Trajectory(prompt_ids=list(prompt),
                                response_ids=[rng.randint(1, vocab - 1) for _ in range(r)],
                                response_mask=[1] * r, rollout_logprobs=[-1.0] * r,
                                token_level_scores=[0.0] * (r - 1) + [float(i % 2)],
                                group_id=i // 4))
    batch = RolloutBatch.from_trajectories(trajs, pad_token_id=0)
    g = torch.Generator().manual_seed(seed)
    batch.set("advantages", torch.randn(rows, 1, generator=g) * batch.response_mask)
    return batch


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _local_bytes(t) -> int:
    from torch.distributed.tensor import DTensor

    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


def rank_main(rank: int, world: int, port: int, model_dir: str, args, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from rlvr.learner import Actor, ActorConfig, LoraConfig, OptimConfig, init_distributed

    info = init_distributed("cpu")
    lora = LoraConfig(rank=args.arm_lora, alpha=2.0 * args.arm_lora) if args.arm_lora else None
    cfg = ActorConfig(optim=OptimConfig(lr=1e-6), micro_batch_size=args.rows,
                        max_tokens_per_micro_batch=args.budget,
                        sequence_packing=args.packing,
                        activation_checkpointing=args.checkpointing, lora=lora)
    t0 = time.perf_counter()
    actor = Actor.from_pretrained(model_dir, cfg, info)
    load_s = time.perf_counter() - t0
    batch = make_batch(args.rows, args.tokens, args.vocab)
    half = args.rows // world
    local = batch.select(list(range(rank * half, (rank + 1) * half)))
    grads = {}

    def loss(mb):
        out = actor._loss(mb, 1.0, True)
        grads["micro"] = grads.get("micro", 0) + 1
        return out

    orig_clip = actor._clip_and_step

    def clip_and_step():
        grads["bytes"] = sum(_local_bytes(p.grad) for p in actor.module.parameters()
                             if p.grad is not None)
        return orig_clip()

    actor._clip_and_step = clip_and_step
    t0 = time.perf_counter()
    actor.run_update(local, loss, prefix="actor")
    update_s = time.perf_counter() - t0
    params_b = sum(_local_bytes(p) for p in actor.module.parameters())
    optim_b = sum(_local_bytes(v) for st in actor.optimizer.state.values() for v in st.values()
                  if torch.is_tensor(v) and v.dim() > 0)
    tokens = int(local.attention_mask.sum())
    trainable = sum(p.numel() for p in actor.module.parameters() if p.requires_grad)  # global
    sync_bytes = sum(t.numel() * t.element_size()
                     for _, t in actor.named_sync_tensors(adapter_only=True))
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "peak_rss_bytes": _kib("VmHWM"), "param_bytes": params_b,
        "grad_bytes": grads.get("bytes", 0), "optim_bytes": optim_b, "load_s": load_s,
        "update_s": update_s, "tokens": tokens, "micro_batches": grads.get("micro", 0),
        "trainable_params": trainable, "sync_bytes": sync_bytes}))
    torch.distributed.destroy_process_group()


def baseline(model_dir: str, args) -> dict:
    """Plain loop: full model, full logits, log_softmax, backward, AdamW step, one process."""
    from transformers import AutoModelForCausalLM

    from rlvr.learner.parallel import enable_activation_checkpointing

    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if args.checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, foreach=True)
    batch = make_batch(args.rows, args.tokens, args.vocab)
    p = batch.prompt_len
    t0 = time.perf_counter()
    micro = max(1, args.budget // batch.input_ids.shape[1])
    for s in range(0, args.rows, micro):
        sl = slice(s, s + micro)
        out = model(input_ids=batch.input_ids[sl], attention_mask=batch.attention_mask[sl],
                    position_ids=batch.position_ids[sl], use_cache=False)
        logits = out.logits[:, p - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, batch.responses[sl, :, None])[..., 0]
        m = batch.response_mask[sl]
        (-(logp * batch.advantages[sl] * m).sum() / batch.response_mask.sum()).backward()
    opt.step()
    opt.zero_grad()
    dt = time.perf_counter() - t0
    return {"update_s": dt, "tokens": int(batch.attention_mask.sum()),
            "peak_rss_bytes": _kib("VmHWM")}


def _print_lora(full: list[dict], lora: list[dict], args, n_params: int) -> None:
    mib = 2**20
    rows = [
        ("trainable parameters", f"{full[0]['trainable_params'] / 1e6:.2f} M",
         f"{lora[0]['trainable_params'] / 1e6:.3f} M"),
        ("AdamW state per rank", f"{full[0]['optim_bytes'] / mib:.1f} MiB",
         f"{lora[0]['optim_bytes'] / mib:.2f} MiB"),
        ("gradients per rank", f"{full[0]['grad_bytes'] / mib:.1f} MiB",
         f"{lora[0]['grad_bytes'] / mib:.2f} MiB"),
        ("peak RSS, rank 0 / 1", " / ".join(f"{r['peak_rss_bytes'] / mib:.0f}" for r in full)
         + " MiB", " / ".join(f"{r['peak_rss_bytes'] / mib:.0f}" for r in lora) + " MiB"),
        ("seconds per update", f"{max(r['update_s'] for r in full):.2f} s",
         f"{max(r['update_s'] for r in lora):.2f} s"),
        ("bytes sent per sync", f"{full[0]['sync_bytes'] / mib:.1f} MiB",
         f"{lora[0]['sync_bytes'] / mib:.2f} MiB"),
    ]
    print(f"\nfull fine-tuning vs LoRA rank {args.lora} (alpha {2 * args.lora}), "
          f"{n_params / 1e6:.1f} M parameters, 2 gloo ranks, {args.rows} x {args.tokens} tokens")
    width = max(len(r[0]) for r in rows)
    print(f"  {'':<{width}}  {'full':>14}  {'LoRA':>14}")
    for name, a, b in rows:
        print(f"  {name:<{width}}  {a:>14}  {b:>14}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--budget", type=int, default=4096, help="max_tokens_per_micro_batch")
    ap.add_argument("--packing", action="store_true")
    ap.add_argument("--no-checkpointing", dest="checkpointing", action="store_false",
                    help="keep every activation (both arms); the full size then needs > 24 GiB")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--lora", type=int, default=0, metavar="R",
                    help="also run a rank-R LoRA adapter and compare it with full fine-tuning")
    args = ap.parse_args()
    from transformers import Qwen2ForCausalLM

    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(qwen05b_config(args.layers, args.vocab))
        n_params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(Path(tmp, "model"), safe_serialization=True)
        del model
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        arms = {}
        for arm in ([0, args.lora] if args.lora else [0]):
            args.arm_lora = arm
            mp.spawn(rank_main, args=(world, port, str(Path(tmp, "model")), args, tmp),
                     nprocs=world)
            arms[arm] = [json.loads(Path(tmp, f"rank{r}.json").read_text())
                         for r in range(world)]
            port += 1
        ranks = arms[0]
        base = None if args.no_baseline or args.lora else baseline(str(Path(tmp, "model")), args)
    if args.lora:
        _print_lora(arms[0], arms[args.lora], args, n_params)
    total = n_params * 4
    sharded_s = max(r["update_s"] for r in ranks)
    tokens = sum(r["tokens"] for r in ranks)
    rows = [("model parameters", f"{n_params / 1e6:.1f} M", f"fp32 {total / 2**20:.0f} MiB")]
    for r in ranks:
        k = r["rank"]
        rows += [
            (f"rank {k} peak RSS", f"{r['peak_rss_bytes'] / 2**20:.0f} MiB", ""),
            (f"rank {k} params", f"{r['param_bytes'] / 2**20:.0f} MiB",
             f"{r['param_bytes'] / total:.2f} of total"),
            (f"rank {k} grads", f"{r['grad_bytes'] / 2**20:.0f} MiB",
             f"{r['grad_bytes'] / total:.2f} of total"),
            (f"rank {k} AdamW state", f"{r['optim_bytes'] / 2**20:.0f} MiB",
             f"{r['optim_bytes'] / (2 * total):.2f} of 2 x total"),
            (f"rank {k} micro-batches", str(r["micro_batches"]), f"budget {args.budget}"),
        ]
    rows.append(("sharded update (2 ranks)", f"{sharded_s:.1f} s",
                 f"{tokens / sharded_s:.0f} tok/s"))
    if base:
        rows.append(("plain fwd+bwd+AdamW (1 proc)", f"{base['update_s']:.1f} s",
                     f"{base['tokens'] / base['update_s']:.0f} tok/s"))
        rows.append(("plain loop peak RSS", f"{base['peak_rss_bytes'] / 2**20:.0f} MiB", ""))
    print(f"\nlearner scale: {args.layers} layers, vocab {args.vocab}, {args.rows} x {args.tokens}"
          f" tokens, budget {args.budget}, packing {args.packing}, activation checkpointing "
          f"{args.checkpointing}")
    width = max(len(r[0]) for r in rows)
    for name, a, b in rows:
        print(f"  {name:<{width}}  {a:>12}  {b}")
    result = {"args": vars(args), "n_params": n_params, "ranks": ranks, "baseline": base,
              "lora_ranks": arms.get(args.lora) if args.lora else None,
              "machine": platform.platform(), "torch": torch.__version__,
              "cpus": os.cpu_count()}
    out = ROOT / "bench" / "results" / "learner_scale.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

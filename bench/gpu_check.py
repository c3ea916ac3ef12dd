"""One-shot GPU check of the learner: ``bash dev.sh gpu-check`` (aims at < 6 minutes on one GPU).

Runs on the Python it is given (``$PYTHON``, else the first ``python3`` that imports torch),
from the checkout, with no network and nothing installed: it needs torch and transformers only
(not gymnasium, jsonschema or sglang; ``agents`` imports its parts lazily). Checks, on one
CUDA GPU (``--device cpu``: the same on the CPU over gloo, smaller and without the 7B part):

1. a Qwen2.5-0.5B-shaped model (config built here, random weights) loaded as the actor, FSDP2
   with bf16 compute and fp32 master weights;
2. engine-vs-learner logprob parity in bf16: the TransformersEngine samples responses with the
   actor's own module; the learner scores the same tokens (mean and max |delta|);
3. one GRPO step (token budget, chunked fp32 LM head): seconds, tokens/s, MFU
   (``6 x params x tokens / time / peak bf16 FLOP/s`` of the GPU, when known), peak memory;
4. resume: after step 1 the actor is checkpointed; step 2 runs on the same rows with the old
   logprobs of step 1 (ratio != 1, so the loss depends on the restored weights and the Adam
   moments); a second actor restored from the checkpoint must give the same loss, gradient
   norm and weights after its step 2 (fails if the optimizer state was not restored);
5. a Qwen2.5-7B-shaped actor at 2 and 4 layers (CUDA only): peak memory of one step next to
   ``bench/memory_budget.py``'s prediction for the same shape on one GPU, and the prediction at
   28 layers on 8 GPUs;
6. the weight-sync placement rule: NCCL to a server on the trainer's own GPU is refused (an
   expected error), the colocated server syncs through disk.

It prints one table and exits 1 when a check fails. Without CUDA (and without ``--device cpu``)
it says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an install
sys.path.insert(0, str(Path(__file__).resolve().parent))  # memory_budget

#: Peak dense bf16 FLOP/s by GPU name fragment (vendor datasheets), for MFU.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12,
             "L4": 121e12, "4090": 165e12}

QWEN25_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
              "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1e6,
              "tie_word_embeddings": True}


def peak_flops(name: str) -> float | None:
    """The GPU's peak dense bf16 FLOP/s, when known."""
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def full(t: torch.Tensor) -> torch.Tensor:
    """The full tensor of a DTensor parameter, or the plain parameter itself."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


class Table:
    """Rows of (check, result, ok) printed at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, bool | None]] = []

    def add(self, name: str, value: str, ok: bool | None = None) -> None:
        """One row; ``ok`` None for a measurement, True/False for a check."""
        self.rows.append((name, value, ok))
        mark = "" if ok is None else (" [ok]" if ok else " [FAILED]")
        print(f"gpu-check: {name}: {value}{mark}", flush=True)

    def print(self) -> bool:
        """Print the table; True when no check failed."""
        width = max(len(k) for k, _, _ in self.rows)
        print("\ngpu-check")
        for k, v, ok in self.rows:
            mark = "" if ok is None else ("  ok" if ok else "  FAILED")
            print(f"  {k:<{width}}  {v}{mark}")
        return all(ok is not False for _, _, ok in self.rows)


def save_random_model(path: Path, layers: int, vocab: int, shape: dict[str, Any]) -> int:
    """A Qwen2 model of ``shape`` with random weights saved at ``path``; its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(num_hidden_layers=layers, vocab_size=vocab, **shape)
    with torch.device("cpu"):
        model = Qwen2ForCausalLM(config)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path, safe_serialization=True)
    return n


def real_model(path: str) -> tuple[Path, int, int]:
    """A model folder (or a .gguf file, imported once: needs the ``gguf`` package), its parameter
    count and vocabulary size."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.gguf_import import resolve_model_path

    folder = Path(resolve_model_path(path))
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    return folder, n, int(config.vocab_size)


def batch_from(prompts: list[list[int]], completions: list[Any], device: torch.device) -> Any:
    """A RolloutBatch of the sampled responses (rewards alternate 0/1 within a group)."""
    from rlvr.batch import RolloutBatch
    from rlvr.trajectory import Trajectory

    group = len(completions) // len(prompts)
    trajs = [Trajectory(prompt_ids=list(prompts[i // group]), response_ids=list(c.token_ids),
                        response_mask=[1] * len(c.token_ids),
                        rollout_logprobs=list(c.logprobs),
                        token_level_scores=[0.0] * (len(c.token_ids) - 1) + [float(i % 2)],
                        group_id=i // group)
             for i, c in enumerate(completions) if c.token_ids]
    return RolloutBatch.from_trajectories(trajs, pad_token_id=0).to(device)


def check_small(args: argparse.Namespace, info: Any, table: Table, tmp: Path) -> None:
    """Points 1-4 of the module docstring on the 0.5B-shaped model."""
    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.learner import Actor, ActorConfig, Checkpointer, OptimConfig
    from rlvr.training.sync_guard import default_limit

    cuda = info.device.type == "cuda"
    if args.model:  # a real model: its own weights, vocabulary and shape
        model_dir, n_params, args.vocab = real_model(args.model)
        table.add("model", f"{model_dir.name}, vocab {args.vocab}, {n_params / 1e6:.0f} M "
                           "params, its own weights")
    else:
        model_dir = tmp / "model"
        n_params = save_random_model(model_dir, args.layers, args.vocab, QWEN25_05B)
        table.add("model", f"Qwen2.5-0.5B-shaped, {args.layers} layers, vocab {args.vocab}, "
                           f"{n_params / 1e6:.0f} M params, random weights")
    cfg = ActorConfig(optim=OptimConfig(lr=1e-5), micro_batch_size=args.rows,
                      max_tokens_per_micro_batch=8192, mixed_precision="bf16")
    actor = Actor.from_pretrained(model_dir, cfg, info)
    rng = random.Random(0)
    prompts = [[rng.randint(1, args.vocab - 1) for _ in range(64)]
               for _ in range(max(1, args.rows // 4))]
    engine = TransformersEngine(actor.module, None, max_batch_size=args.rows)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=0)

    async def play() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, sampling) for p in prompts
                                           for _ in range(4))))

    t0 = time.perf_counter()
    with actor.gathered():
        completions = asyncio.run(play())
    gen_s = time.perf_counter() - t0
    engine.close()
    n_new = sum(len(c.token_ids) for c in completions)
    table.add("engine decode (bf16)", f"{n_new} tokens in {gen_s:.1f} s, {n_new / gen_s:.0f} tok/s")
    batch = batch_from(prompts, completions, info.device)
    old = actor.compute_logprobs(batch, 1.0)
    mask = batch.response_mask.bool()
    delta = (old - batch.rollout_logprobs).abs()[mask]
    mean, worst = float(delta.mean()), float(delta.max())
    limit = default_limit(torch.bfloat16)  # the sync guard's: a gap it would stop a run for
    table.add("logprob |engine - learner| (bf16)", f"mean {mean:.2e}, max {worst:.2e} "
              f"(guard limit {limit:g})", mean <= limit)
    batch.set("old_logprobs", old)
    g = torch.Generator().manual_seed(0)
    batch.set("advantages", torch.randn(len(batch), 1, generator=g).to(info.device)
              * batch.response_mask)

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    first = actor.update(batch, 1.0)
    if cuda:
        torch.cuda.synchronize()
    step_s = time.perf_counter() - t0
    tokens = int(batch.attention_mask.sum())
    tps = tokens / step_s
    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    mfu = f"MFU {6 * n_params * tps / peak:.1%}" if peak else "MFU n/a"
    table.add("GRPO step", f"{step_s:.2f} s, {tokens} tokens, {tps:.0f} tok/s, {mfu}")
    table.add("step 1 loss / grad norm",
              f"{first['actor/pg_loss']:.4f} / {first['actor/grad_norm']:.3f}",
              bool(torch.isfinite(torch.tensor(first["actor/grad_norm"]))))
    if cuda:
        table.add("peak GPU memory (step)", f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    ckpt = tmp / "ckpt" / "step_1"
    Checkpointer({"actor": actor}).save(ckpt)
    second = actor.update(batch, 1.0)  # old logprobs of step 1: the ratio is not 1
    resumed = Actor.from_pretrained(model_dir, cfg, info)
    Checkpointer({"actor": resumed}).load(ckpt)
    again = resumed.update(batch, 1.0)
    with torch.no_grad():
        drift = max(float((full(a) - full(b)).abs().max())
                    for a, b in zip(actor.module.parameters(), resumed.module.parameters()))
    loss_a, loss_b = second["actor/pg_loss"], again["actor/pg_loss"]
    same = (abs(loss_a - loss_b) <= 1e-5 * max(1.0, abs(loss_a)) and drift == 0.0
            and resumed.updates == actor.updates == 2 and second["actor/ppo_kl"] != 0.0)
    table.add("resume (step 2 after restoring weights + Adam)",
              f"loss {loss_a:.6f} vs {loss_b:.6f}, grad norm {second['actor/grad_norm']:.4f} vs "
              f"{again['actor/grad_norm']:.4f}, max weight diff {drift:.1e}, ppo_kl "
              f"{second['actor/ppo_kl']:.2e}", same)
    del actor, resumed


def check_7b_memory(info: Any, table: Table, tmp: Path, tokens: int) -> None:
    """Point 5: 7B-shaped actor at 2 and 4 layers, measured against the memory model."""
    import memory_budget as mb

    from rlvr.learner import Actor, ActorConfig, OptimConfig

    config = dict(mb.QWEN25_7B)
    shape = {k: config[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                    "num_key_value_heads", "tie_word_embeddings")}
    learner = mb.Learner("gpu-check", tokens, True, False, False, 0.0, False, 1)
    measured = {}
    for layers in (2, 4):
        path = tmp / f"7b-{layers}"
        save_random_model(path, layers, config["vocab_size"], shape)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        cfg = ActorConfig(optim=OptimConfig(lr=1e-6), micro_batch_size=8,
                          max_tokens_per_micro_batch=tokens, mixed_precision="bf16",
                          activation_checkpointing=True)
        actor = Actor.from_pretrained(path, cfg, info)
        rng = random.Random(layers)
        rows, length = 8, tokens // 8
        from rlvr.batch import RolloutBatch
        from rlvr.trajectory import Trajectory

        trajs = [Trajectory(prompt_ids=[rng.randint(1, 1000) for _ in range(length // 2)],
                            response_ids=[rng.randint(1, 1000) for _ in range(length // 2)],
                            response_mask=[1] * (length // 2),
                            rollout_logprobs=[-1.0] * (length // 2),
                            token_level_scores=[0.0] * (length // 2 - 1) + [float(i % 2)],
                            group_id=0) for i in range(rows)]
        batch = RolloutBatch.from_trajectories(trajs, pad_token_id=0).to(info.device)
        batch.set("advantages", torch.ones_like(batch.response_mask, dtype=torch.float32))
        actor.update(batch, 1.0)
        torch.cuda.synchronize()
        measured[layers] = torch.cuda.max_memory_allocated() / 2**30
        predicted = mb.budget(mb.Shape.from_config(config, layers), learner, 1, 80.0)
        table.add(f"7B-shaped, {layers} layers, 1 GPU",
                  f"peak {measured[layers]:.1f} GiB measured, {predicted['training phase']:.1f} "
                  f"GiB predicted (memory_budget)")
        del actor
        torch.cuda.empty_cache()
    per_layer = (measured[4] - measured[2]) / 2
    at8 = mb.budget(mb.Shape.from_config(config), learner, 8, 80.0)["training phase"]
    table.add("7B-shaped, per layer (1 GPU)", f"{per_layer:.2f} GiB measured; 28 layers on 8 "
                                              f"GPUs predicted {at8:.1f} GiB per GPU")


def check_placement(table: Table) -> None:
    """Point 6: NCCL to a colocated server is refused; auto picks disk."""
    from rlvr.agents.errors import SGLangError
    from rlvr.agents.sglang.placement import SyncFacts, choose_weight_sync, colocated_servers
    from rlvr.agents.sglang.server_info import ServerInfo

    here = {"http://127.0.0.1:30000": ServerInfo(base_gpu_id=0)}
    colocated = colocated_servers(here, {"LOCAL_WORLD_SIZE": "8"})
    facts = SyncFacts(colocated, None, {}, False)
    try:
        choose_weight_sync("distributed", facts)
        refused = "not refused"
    except SGLangError as exc:
        refused = "refused as expected" if "Duplicate GPU" in str(exc) else f"refused: {exc}"
    ok = bool(colocated) and refused == "refused as expected" \
        and choose_weight_sync("auto", facts) == "disk"
    table.add("NCCL to a server on trainer GPU 0", f"{refused}; auto -> disk", ok)


def main(argv: list[str] | None = None) -> int:
    """Run the checks and print the table."""
    ap = argparse.ArgumentParser(description="one-shot GPU check of the learner")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--layers", type=int, help="decoder layers (default 24; 1 on cpu)")
    ap.add_argument("--vocab", type=int, help="vocabulary (default 151936; 2048 on cpu)")
    ap.add_argument("--rows", type=int, help="sampled responses (default 16; 8 on cpu)")
    ap.add_argument("--new-tokens", type=int, help="tokens per response (default 256; 16 on cpu)")
    ap.add_argument("--tokens-7b", type=int, default=8192,
                    help="token budget of the 7B-shaped step (default 8192)")
    ap.add_argument("--skip-7b", action="store_true", help="skip the 7B-shaped memory check")
    ap.add_argument("--model", help="check a real model (a folder, or a .gguf file such as "
                    "SmolLM2-135M-Instruct's) instead of the random 0.5B-shaped one")
    args = ap.parse_args(argv)
    cpu = args.device == "cpu"
    args.layers = args.layers or (1 if cpu else 24)
    args.vocab = args.vocab or (2048 if cpu else 151936)
    args.rows = args.rows or (8 if cpu else 16)
    args.new_tokens = args.new_tokens or (16 if cpu else 256)
    if not cpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run. "
              "(--device cpu runs the same checks on the CPU.)")
        return 0
    import transformers

    from rlvr.learner import init_distributed

    t_start = time.perf_counter()
    table = Table()
    info = init_distributed(args.device)
    name = torch.cuda.get_device_name() if not cpu else "cpu"
    table.add("device", f"{name}; torch {torch.__version__}"
              + (f", CUDA {torch.version.cuda}, NCCL "
                 f"{'.'.join(map(str, torch.cuda.nccl.version()))}" if not cpu else "")
              + f"; transformers {transformers.__version__}; Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        check_small(args, info, table, Path(tmp))
        if cpu or args.skip_7b:
            table.add("7B-shaped memory", "skipped (" + ("CUDA only" if cpu else "--skip-7b")
                      + ")")
        else:
            check_7b_memory(info, table, Path(tmp), args.tokens_7b)
    check_placement(table)
    table.add("wall time", f"{time.perf_counter() - t_start:.0f} s")
    return 0 if table.print() else 1


if __name__ == "__main__":
    sys.exit(main())

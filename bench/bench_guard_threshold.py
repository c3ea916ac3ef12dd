"""The bf16 sync guard's statistic, synced vs stale, on a Qwen2.5-0.5B-shaped model (CPU).

``rollout.max_logprob_diff``'s bfloat16 default (``rlvr.training.sync_guard``) must sit above
the gap a correct sync leaves and below the gap of an engine that missed a sync. This measures
both with the guard's own code path:

* the learner: ``Actor`` with bf16 compute over fp32 master weights (FSDP2, one gloo rank),
  float32 LM-head logits, AdamW (weight decay 0.01, grad clip 1.0, as the GPU configs);
* the engine: a separate bfloat16 copy of the model (``TransformersEngine``: bf16 weights, bf16
  logits, as an sglang server launched with ``--dtype bfloat16``) that samples the rollouts;
  after each optimizer step it receives ``actor.named_sync_tensors`` (a correct sync, lag 0) or
  keeps the weights of 1 or 2 steps before (a sync that did not land);
* the statistic: ``Actor.set_old_logprobs``' ``rollout/logprob_diff`` (token mean of
  ``|logp_learner - logp_engine|`` over the sampled response tokens), then ``SyncGuard.check``.

The model has random weights in the real 24-layer, 151936-vocabulary shape; a random model's
logits are nearly uniform (std ~0.6), where bf16 rounding hardly matters, so the final RMSNorm
weight is set to ``--final-norm`` (default 12: logit std ~7, tails near 30, the scale of a
trained LM head; its token entropy is printed). Prints one table and writes JSON.

    nice -n 5 python bench/bench_guard_threshold.py            # ~15 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an install

QWEN25_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
              "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1e6,
              "tie_word_embeddings": True}


def save_model(path: Path, layers: int, vocab: int, seed: int, final_norm: float) -> None:
    """A Qwen2.5-0.5B-shaped model with random weights (final norm scaled) saved at ``path``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=layers, vocab_size=vocab,
                                         **QWEN25_05B))
    with torch.no_grad():
        model.model.norm.weight.fill_(final_norm)
    model.save_pretrained(path, safe_serialization=True)


class Float32Head(torch.nn.Module):
    """Float32 logits from the bf16 head weights (as sglang's ``--enable-fp32-lm-head``)."""

    def __init__(self, head: torch.nn.Linear) -> None:
        super().__init__()
        self.head = head  # the same (tied) parameter: a sync of the embedding reaches it

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(hidden.float(), self.head.weight.float())


def bf16_engine(path: Path, rows: int, head: str = "bf16") -> Any:
    """A TransformersEngine over a bfloat16 copy of the model at ``path``.

    ``head``: ``bf16`` logits (the lean decoder), or ``fp32`` logits (the module's own forward
    with ``Float32Head``).
    """
    from transformers import AutoModelForCausalLM

    from rlvr.agents.hf.engine import TransformersEngine

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    if head == "fp32":
        model.lm_head = Float32Head(model.lm_head)
    return TransformersEngine(model, None, max_batch_size=rows, lean=head == "bf16")


def sample(engine: Any, prompts: list[list[int]], group: int, new_tokens: int, seed: int,
           device: torch.device) -> Any:
    """The engine's rollouts of ``prompts`` (``group`` each) as a RolloutBatch."""
    from rlvr.agents.engine import SamplingParams
    from rlvr.batch import RolloutBatch
    from rlvr.trajectory import Trajectory

    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed)

    async def play() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, sampling) for p in prompts
                                           for _ in range(group))))

    trajs = [Trajectory(prompt_ids=list(prompts[i // group]), response_ids=list(c.token_ids),
                        response_mask=[1] * len(c.token_ids), rollout_logprobs=list(c.logprobs),
                        token_level_scores=[0.0] * (len(c.token_ids) - 1) + [float(i % 2)],
                        group_id=i // group)
             for i, c in enumerate(asyncio.run(play())) if c.token_ids]
    return RolloutBatch.from_trajectories(trajs, pad_token_id=0).to(device)


def bf16_snapshot(actor: Any) -> list[tuple[str, torch.Tensor]]:
    """What a sync sends, as the bf16 engine would hold it."""
    return [(n, t.detach().to(torch.bfloat16).clone())
            for n, t in actor.named_sync_tensors(adapter_only=False)]


def changed_fraction(a: list[tuple[str, torch.Tensor]], b: list[tuple[str, torch.Tensor]]) -> float:
    """The fraction of bf16 weights that differ between two snapshots."""
    diff = sum(int((x != y).sum()) for (_, x), (_, y) in zip(a, b))
    return diff / sum(x.numel() for _, x in a)


def run_one(args: argparse.Namespace, info: Any, seed: int, lr: float, tmp: Path) -> list[dict]:
    """One model and learning rate: the statistic per step and lag."""
    from rlvr.learner import Actor, ActorConfig, OptimConfig
    from rlvr.training.sync_guard import SyncGuard

    path = tmp / f"model_{seed}"
    if not path.exists():
        save_model(path, args.layers, args.vocab, seed, args.final_norm)
    cfg = ActorConfig(optim=OptimConfig(lr=lr, weight_decay=0.01, grad_clip=1.0),
                      micro_batch_size=args.prompts * args.group,
                      max_tokens_per_micro_batch=16384, mixed_precision="bf16")
    actor = Actor.from_pretrained(path, cfg, info)
    engine = bf16_engine(path, args.prompts * args.group, args.engine_head)
    rng = random.Random(seed)
    snapshots = {0: bf16_snapshot(actor)}
    rows: list[dict] = []
    for step in range(args.steps + 1):
        prompts = [[rng.randint(1, args.vocab - 1) for _ in range(args.prompt_len)]
                   for _ in range(args.prompts)]
        train = None
        for lag in range(min(step, args.max_lag) + 1):
            engine.update_weights(snapshots[step - lag])
            t0 = time.perf_counter()
            batch = sample(engine, prompts, args.group, args.new_tokens, seed * 1000 + step,
                           info.device)
            metrics = actor.set_old_logprobs(batch, 1.0, needed_before_update=True)
            diff = metrics["rollout/logprob_diff"]
            mask = batch.response_mask.bool()
            worst = float((batch.old_logprobs - batch.rollout_logprobs).abs()[mask].max())
            entropy = float(-batch.rollout_logprobs[mask].mean())
            guard = SyncGuard(args.threshold, torch.bfloat16, "bf16 transformers")
            try:
                guard.check(step, metrics)
                caught = False
            except Exception:  # noqa: BLE001 - WeightSyncError: the guard stopped it
                caught = True
            row = {"seed": seed, "lr": lr, "step": step, "lag": lag, "logprob_diff": diff,
                   "kl": metrics["rollout/kl"], "max_token_diff": worst,
                   "sampled_nll": entropy, "tokens": int(mask.sum()),
                   "bf16_weights_changed": changed_fraction(snapshots[step - lag],
                                                            snapshots[step]),
                   "guard_limit": guard.limit, "guard_stops": caught,
                   "seconds": time.perf_counter() - t0}
            rows.append(row)
            print(f"  seed {seed} lr {lr:.0e} step {step} lag {lag}: diff {diff:.4f} "
                  f"(max {worst:.3f}, nll {entropy:.2f}, bf16 changed "
                  f"{row['bf16_weights_changed']:.2%}) {row['seconds']:.0f}s", flush=True)
            if lag == 0:
                train = batch
        if step == args.steps:
            break
        assert train is not None
        g = torch.Generator().manual_seed(seed * 7919 + step)
        train.set("advantages", torch.randn(len(train), 1, generator=g).to(info.device)
                  * train.response_mask)
        actor.update(train, 1.0)
        snapshots[step + 1] = bf16_snapshot(actor)
        snapshots.pop(step - args.max_lag, None)  # keep the last max_lag + 1
    engine.close()
    return rows


def _stats(lr: float | None, lag: int, picked: list[dict], limit: float) -> dict:
    vals = [r["logprob_diff"] for r in picked]
    return {"lr": lr, "lag": lag, "n": len(vals), "min": min(vals),
            "mean": statistics.fmean(vals), "max": max(vals),
            "bf16_changed_mean": statistics.fmean(r["bf16_weights_changed"] for r in picked),
            "guard_stops": sum(v > limit for v in vals)}


def summarize(rows: list[dict], limit: float) -> list[dict]:
    """Min/mean/max of the statistic per (lr, lag), and over every synced measurement.

    Step 0 (before any update) is the same measurement for every lr of a seed: the "all lrs"
    synced row counts it once per seed. ``guard_stops``: how many exceed ``limit``.
    """
    out = [_stats(lr, lag, [r for r in rows if r["lr"] == lr and r["lag"] == lag], limit)
           for lr, lag in sorted({(r["lr"], r["lag"]) for r in rows})]
    first_lr = {r["seed"]: r["lr"] for r in reversed(rows)}
    synced = [r for r in rows
              if r["lag"] == 0 and (r["step"] > 0 or r["lr"] == first_lr[r["seed"]])]
    out.append(_stats(None, 0, synced, limit))
    return out


def report(rows: list[dict], args: argparse.Namespace, limit: float) -> list[dict]:
    """Print the table of ``rows``; return the summary."""
    summary = summarize(rows, limit)
    print(f"\nbf16 sync guard statistic (rollout/logprob_diff), Qwen2.5-0.5B shape, "
          f"{args.layers} layers, vocab {args.vocab}, final norm {args.final_norm}, engine "
          f"logits {args.engine_head}, "
          f"seeds {sorted({r['seed'] for r in rows})}, {args.prompts}x{args.group} rows x "
          f"{args.new_tokens} tokens")
    print(f"  {'lr':>8} {'engine':<14} {'n':>3} {'min':>8} {'mean':>8} {'max':>8} "
          f"{'bf16 w changed':>15} {'over limit':>11}")
    for s in summary:
        what = "synced" if s["lag"] == 0 else f"{s['lag']} step stale"
        lr = "all" if s["lr"] is None else f"{s['lr']:.0e}"
        print(f"  {lr:>8} {what:<14} {s['n']:>3} {s['min']:>8.4f} {s['mean']:>8.4f} "
              f"{s['max']:>8.4f} {s['bf16_changed_mean']:>15.2%} {s['guard_stops']:>5}/{s['n']}")
    print(f"  over limit: rollout/logprob_diff > {limit:g} (the guard stops the run)")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run the grid, print the table, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--final-norm", type=float, default=12.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 1e-5])
    ap.add_argument("--steps", type=int, default=2, help="optimizer steps per run")
    ap.add_argument("--max-lag", type=int, default=2, help="stale engines up to this many steps")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--engine-head", choices=["bf16", "fp32"], default="bf16",
                    help="the engine's logits: bf16, or fp32 (as --enable-fp32-lm-head)")
    ap.add_argument("--threshold", type=float, default=None,
                    help="guard limit to report against (default: the bf16 default)")
    ap.add_argument("--out", default="bench/results/guard_threshold.json")
    ap.add_argument("--append", action="store_true",
                    help="add to the rows already in --out (run seeds as separate jobs)")
    ap.add_argument("--report", action="store_true",
                    help="measure nothing: print the table of the rows in --out")
    args = ap.parse_args(argv)

    import transformers

    from rlvr.learner import init_distributed
    from rlvr.training.sync_guard import default_limit

    limit = default_limit(torch.bfloat16) if args.threshold is None else args.threshold
    out = Path(args.out)
    rows: list[dict] = (json.loads(out.read_text())["rows"]
                        if (args.append or args.report) and out.exists() else [])
    if args.report:
        report(rows, args, limit)
        return 0
    info = init_distributed("cpu")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for lr in args.lrs:
                rows += run_one(args, info, seed, lr, Path(tmp))
    summary = report(rows, args, limit)
    print(f"  wall {time.perf_counter() - t0:.0f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "threads": torch.get_num_threads()},
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "args": vars(args),
        "summary": summary, "rows": rows}, indent=1))
    print(f"  wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

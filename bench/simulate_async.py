"""What asynchronous RL (``rollout.max_staleness: k``) gives at 7B on 8 GPUs, on paper.

    python bench/simulate_async.py                        # Qwen2.5-7B, 8 x H100, defaults below
    python bench/simulate_async.py --decode-tok-s 4000 12000 --mfu 0.25 0.45

No GPU: an event simulation of the producer (rollout servers) and the consumer (the learner)
with per-token costs from public hardware numbers, stated here so they can be replaced by
measured ones (``bash dev.sh gpu-check`` prints the learner's tokens/s and MFU on a GPU).

The workload (one RL step): ``--prompts`` x ``--group`` responses, prompts of ``--prompt-len``
tokens, response lengths drawn per step from a log-normal with mean ``--mean-len`` and
``--sigma``, capped at ``--max-len`` (long reasoning tails: the step's rollout lasts until its
longest response is done).

Costs:

* generation on ``g`` GPUs: ``max(tokens / (g * decode_tok_s), longest * tail_s_per_token)``:
  throughput-bound for the bulk, latency-bound for the straggler (one sequence decoding alone
  reads all weights each token: 15.2 GB / 3.35 TB/s = 4.5 ms on an H100; 6 ms with overheads).
  ``--decode-tok-s`` (default 8,000 output tokens/s per GPU for a 7B model in bf16 at large
  batch) is in the range SGLang's published offline benchmarks give for 8B models on one H100;
* training on ``t`` GPUs: ``flops_per_token * tokens / (t * peak * mfu)`` with
  ``flops_per_token = (6 + 2 + 2) * P`` (forward + backward, the old-logprob forward, the
  reference forward), peak 989 TFLOP/s (H100 bf16 dense), MFU ``--mfu`` (default 0.35);
* weight sync: NCCL broadcast of the bf16 weights to the servers' GPUs (``--sync-s``, default
  3 s); colocated runs sync through disk (``--colocated-sync-s``, default 20 s), plus the
  release/resume of the servers' memory (``--swap-s``, default 4 s).

Layouts: **sync, colocated**: all 8 GPUs generate, then all train (today's loop with
``max_staleness: 0``). **split, k = 0**: the same loop with servers and learner on GPUs of their
own (NCCL sync, no overlap). **async, disaggregated**: ``g`` GPUs serve, ``8 - g`` train, the
producer runs at most ``k`` steps ahead of the learner; the best split ``g`` is reported. With
``k = 1`` the producer waits for the update after one step ahead; ``k = 2`` lets it bank a fast step
against a slow one (the step times vary with the longest response).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PEAK_FLOPS = 989e12  # H100 SXM bf16 dense
PARAMS_7B = 7.62e9  # Qwen2.5-7B


@dataclass(frozen=True)
class Costs:
    """Per-token costs and fixed costs of one setting."""

    decode_tok_s: float = 8000.0
    tail_s_per_token: float = 0.006
    mfu: float = 0.35
    params: float = PARAMS_7B
    sync_s: float = 3.0
    colocated_sync_s: float = 20.0
    swap_s: float = 4.0

    def generate_s(self, gpus: int, lengths: list[int]) -> float:
        return max(sum(lengths) / (gpus * self.decode_tok_s), max(lengths) * self.tail_s_per_token)

    def train_s(self, gpus: int, tokens: int) -> float:
        return 10 * self.params * tokens / (gpus * PEAK_FLOPS * self.mfu)


@dataclass(frozen=True)
class Workload:
    prompts: int = 64
    group: int = 8
    prompt_len: int = 512
    mean_len: float = 1200.0
    sigma: float = 0.8
    max_len: int = 4096

    def step(self, rng: random.Random) -> list[int]:
        """One step's response lengths."""
        mu = math.log(self.mean_len) - self.sigma**2 / 2
        return [min(self.max_len, max(1, round(rng.lognormvariate(mu, self.sigma))))
                for _ in range(self.prompts * self.group)]

    def tokens(self, lengths: list[int]) -> int:
        return len(lengths) * self.prompt_len + sum(lengths)


def simulate_sync(costs: Costs, work: Workload, steps: list[list[int]], gpus: int) -> float:
    """Seconds per step, colocated: generate on all GPUs, then train on all, then sync."""
    total = 0.0
    for lengths in steps:
        total += (costs.generate_s(gpus, lengths) + costs.train_s(gpus, work.tokens(lengths))
                  + costs.colocated_sync_s + costs.swap_s)
    return total / len(steps)


def simulate_async(costs: Costs, work: Workload, steps: list[list[int]], gen_gpus: int,
                   train_gpus: int, k: int) -> tuple[float, float, float]:
    """Seconds per step, and the servers' and learner's idle shares, with staleness ``k``.

    The producer starts rollout ``i`` once the learner has finished update ``i - k - 1`` and its
    weights arrived (so rollout ``i`` uses a policy at most ``k`` versions old) and once it has
    finished rollout ``i - 1``. The learner trains on rollout ``i`` once it is done.
    """
    gen_done: list[float] = []
    train_done: list[float] = []
    gen_busy = train_busy = 0.0
    for i, lengths in enumerate(steps):
        weights_at = train_done[i - k - 1] + costs.sync_s if i - k - 1 >= 0 else 0.0
        start = max(gen_done[-1] if gen_done else 0.0, weights_at)
        g = costs.generate_s(gen_gpus, lengths)
        gen_done.append(start + g)
        gen_busy += g
        t = costs.train_s(train_gpus, work.tokens(lengths))
        begin = max(gen_done[i], train_done[-1] if train_done else 0.0)
        train_done.append(begin + t)
        train_busy += t
    end = train_done[-1]
    return end / len(steps), 1 - gen_busy / end, 1 - train_busy / end


def run(costs: Costs, work: Workload, gpus: int, n_steps: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)  # the same steps for every layout
    steps = [work.step(rng) for _ in range(n_steps)]
    sync_s = simulate_sync(costs, work, steps, gpus)
    row: dict[str, Any] = {"costs": asdict(costs), "sync_s_per_step": sync_s}
    for k in (0, 1, 2):
        best = min((simulate_async(costs, work, steps, g, gpus - g, k) + (g,)
                    for g in range(1, gpus)), key=lambda r: r[0])
        row[f"k{k}"] = {"s_per_step": best[0], "speedup": sync_s / best[0],
                        "gen_gpus": best[3], "gen_idle": best[1], "train_idle": best[2]}
    row["gen_s_8"] = sum(costs.generate_s(gpus, s) for s in steps) / n_steps
    row["train_s_8"] = sum(costs.train_s(gpus, work.tokens(s)) for s in steps) / n_steps
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-tok-s", type=float, nargs="+", default=[4000.0, 8000.0, 12000.0])
    parser.add_argument("--mfu", type=float, nargs="+", default=[0.35])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mean-len", type=float, default=Workload.mean_len)
    parser.add_argument("--sigma", type=float, default=Workload.sigma)
    parser.add_argument("--max-len", type=int, default=Workload.max_len)
    parser.add_argument("--out", type=Path, default=Path("bench/results/simulate_async.json"))
    args = parser.parse_args(argv)
    work = Workload(mean_len=args.mean_len, sigma=args.sigma, max_len=args.max_len)
    rows = [run(Costs(decode_tok_s=d, mfu=m), work, args.gpus, args.steps, args.seed)
            for d in args.decode_tok_s for m in args.mfu]
    print(f"7B on {args.gpus} GPUs, {work.prompts}x{work.group} responses/step, mean "
          f"{work.mean_len:.0f} tokens (cap {work.max_len}), {args.steps} simulated steps")
    print("| decode tok/s/GPU | MFU | gen / train s on 8 GPUs | colocated sync s/step "
          "| split, k=0 | k=1 (gen GPUs) | k=2 | k=1 vs colocated | k=1 vs split k=0 "
          "| k=1 idle gen / train |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, k0, k1, k2 = r["costs"], r["k0"], r["k1"], r["k2"]
        print(f"| {c['decode_tok_s']:.0f} | {c['mfu']:.2f} | {r['gen_s_8']:.1f} / "
              f"{r['train_s_8']:.1f} | {r['sync_s_per_step']:.1f} | {k0['s_per_step']:.1f} "
              f"| {k1['s_per_step']:.1f} ({k1['gen_gpus']}) | {k2['s_per_step']:.1f} "
              f"| {k1['speedup']:.2f}x | {k0['s_per_step'] / k1['s_per_step']:.2f}x "
              f"| {k1['gen_idle']:.0%} / {k1['train_idle']:.0%} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"workload": asdict(work), "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

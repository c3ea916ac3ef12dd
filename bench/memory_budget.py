"""Per-GPU memory budget of a model under each shipped GPU config, computed from the model config.

    python bench/memory_budget.py                # Qwen2.5-7B, 80 GB GPUs, every configs/gpu/*.yaml
    python bench/memory_budget.py --layers 4 --gpus 1   # gpu_check's 7B-shaped 4-layer actor

No GPU and no download: the model's shape is Qwen2.5-7B's ``config.json`` (``QWEN25_7B`` below,
or ``--config`` a local one). Each config's learner settings are read from its YAML (token
budget per micro-batch, activation checkpointing, KL reference, critic); a colocated server's
static memory (``--mem-fraction-static`` of the total) is read from the launch line in the
config's comments, counted when the server sits on the learner's GPUs (no ``--base-gpu-id``).

What a GPU holds (bytes; P = parameters, N = GPUs, T = tokens of one micro-batch):

* actor, FSDP2 with fp32 master weights and AdamW: ``(4 + 4 + 8) P / N`` (weights, gradients,
  two moments), plus the bf16 weights FSDP gathers: the root group (embedding, LM head, final
  norm, kept gathered) and two decoder layers (the current one and the prefetched next);
* the LM head's float32 work (``rlvr.learner.logprobs``): an fp32 copy of the head weight in the
  forward, and in the backward that copy plus the fp32 gradient accumulator and its bf16 cast;
* activations (bf16): with activation checkpointing each layer keeps its input
  (``T * H * 2``) and one layer's are recomputed at a time; without, every layer keeps
  ``T * (7 H + 2 H_kv + 4 I) * 2`` (norm inputs/outputs, q/k/v, attention output, residual,
  gate, up, SiLU(gate), their product; sdpa/flash attention keeps no ``T^2`` scores);
* reference (KL): bf16 shards ``2 P / N`` plus its gathered root and layers;
* critic (GAE): like the actor without the LM head, plus a value head;
* CUDA context and allocator slack: 1.5 GB (``OVERHEAD``).

Two phases per step: training (learner peak; a colocated server has released its memory) and
rollout (the learner's resident state: weights, moments, reference, critic; gradients freed;
plus the server's static fraction). The larger is the GPU's peak.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 2**30
OVERHEAD = 1.5 * GiB
"""CUDA context, NCCL buffers and allocator slack per process (typical, not measured here)."""

QWEN25_7B: dict[str, Any] = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "tie_word_embeddings": False,
}
"""Qwen/Qwen2.5-7B-Instruct's config.json (the fields that size it)."""


@dataclass(frozen=True)
class Shape:
    """The sizes of a Qwen2-style decoder."""

    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, c: dict[str, Any], layers: int | None = None) -> Shape:
        """From a HF ``config.json`` dict (``layers`` overrides the depth)."""
        return cls(c["hidden_size"], c["intermediate_size"], layers or c["num_hidden_layers"],
                   c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"],
                   bool(c.get("tie_word_embeddings", False)))

    @property
    def kv(self) -> int:
        """Width of the k (or v) projection."""
        return self.hidden // self.heads * self.kv_heads

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (q/k/v with biases, o, gate/up/down, two norms)."""
        h, kv, i = self.hidden, self.kv, self.inter
        return (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h

    @property
    def root_params(self) -> int:
        """Embedding, LM head (unless tied) and final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        """All parameters."""
        return self.root_params + self.layers * self.layer_params


@dataclass(frozen=True)
class Learner:
    """What one shipped config asks of the learner (and where its server sits)."""

    name: str
    tokens: int
    checkpointing: bool
    reference: bool
    critic: bool
    server_fraction: float
    colocated: bool
    gpus: int | None


def learner_of(path: Path, prompt_tokens: int) -> Learner:
    """The learner settings of a config file (see the module docstring)."""
    import yaml

    text = path.read_text()
    cfg = yaml.safe_load(text)
    actor = cfg.get("actor", {})
    runner = cfg.get("rollout", {}).get("runner", {})
    seq = prompt_tokens + int(runner.get("max_response_tokens", 1024))
    tokens = actor.get("max_tokens_per_micro_batch") or int(actor.get("micro_batch_size", 8)) * seq
    algo = cfg.get("algorithm", {})
    kl = algo.get("kl") or {}
    launch = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    frac = re.search(r"--mem-fraction-static\s+([0-9.]+)", launch)
    nproc = re.search(r"--nproc_per_node[= ](\d+)", launch)
    return Learner(path.stem, int(tokens), bool(actor.get("activation_checkpointing", False)),
                   bool(kl.get("placement")), algo.get("estimator") == "gae",
                   float(frac.group(1)) if frac else 0.0,
                   "sglang.launch_server" in launch and "--base-gpu-id" not in launch,
                   int(nproc.group(1)) if nproc else None)


def budget(shape: Shape, learner: Learner, gpus: int, gpu_gib: float) -> dict[str, float]:
    """GiB per GPU of each part, and the two phases' totals (see the module docstring)."""
    p, n, h, v = shape.params, gpus, shape.hidden, shape.vocab
    gathered = 2 * (shape.root_params + 2 * shape.layer_params)  # bf16 root + two layers
    head = v * h
    head_work = 4 * head + 4 * head + 2 * head  # fp32 copy + fp32 accumulator + bf16 cast
    per_token_layer = (7 * h + 2 * shape.kv + 4 * shape.inter) * 2
    t = learner.tokens
    if learner.checkpointing:
        acts = shape.layers * t * h * 2 + t * per_token_layer
    else:
        acts = shape.layers * t * per_token_layer
    parts = {
        "actor weights+grads+adam": 16 * p / n,
        "gathered bf16 (root + 2 layers)": gathered,
        "LM head fp32 work": head_work,
        "activations": acts,
    }
    resident = 12 * p / n  # weights + moments; gradients freed after the step
    if learner.reference:
        parts["reference (bf16)"] = 2 * p / n + gathered
        resident += 2 * p / n
    if learner.critic:
        backbone = p - (0 if shape.tied else head)
        parts["critic"] = 16 * backbone / n
        resident += 12 * backbone / n
    train = sum(parts.values()) + OVERHEAD
    server = learner.server_fraction * gpu_gib * GiB if learner.colocated else 0.0
    rollout = resident + OVERHEAD + server
    out = {k: v / GiB for k, v in parts.items()}
    out |= {"server static (colocated)": server / GiB, "training phase": train / GiB,
            "rollout phase": rollout / GiB, "peak": max(train, rollout) / GiB}
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table (and ``--json`` it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="a model config.json (default: Qwen2.5-7B's)")
    ap.add_argument("--layers", type=int, help="override the depth (e.g. 2 or 4)")
    ap.add_argument("--gpus", type=int,
                    help="learner GPUs (default: each config's torchrun --nproc_per_node, else 8)")
    ap.add_argument("--gpu-gib", type=float, default=80.0)
    ap.add_argument("--prompt-tokens", type=int, default=512,
                    help="padded prompt length assumed per row (default 512)")
    ap.add_argument("--configs", nargs="*", type=Path,
                    default=sorted(Path(__file__).resolve().parents[1].glob("configs/gpu/*.yaml")))
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    model = json.loads(args.config.read_text()) if args.config else QWEN25_7B
    shape = Shape.from_config(model, args.layers)
    rows = {}
    for path in args.configs:
        learner = learner_of(path, args.prompt_tokens)
        gpus = args.gpus or learner.gpus or 8
        rows[learner.name] = (learner, budget(shape, learner, gpus, args.gpu_gib) | {"gpus": gpus})
    print(f"Per-GPU memory (GiB) of {shape.params / 1e9:.2f} B parameters ({shape.layers} "
          f"layers) on {args.gpu_gib:.0f} GB GPUs; prompts padded to {args.prompt_tokens} "
          "tokens.\n")
    names = list(rows)
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    facts = {
        "learner GPUs": lambda learner, b: str(b["gpus"]),
        "tokens per micro-batch": lambda learner, b: str(learner.tokens),
        "server": lambda learner, b: (f"colocated, {learner.server_fraction} static"
                                      if learner.colocated else "own GPUs"),
    }
    for label, fn in facts.items():
        print(f"| {label} | " + " | ".join(fn(*rows[n]) for n in names) + " |")
    totals = ["server static (colocated)", "training phase", "rollout phase", "peak"]
    keys = list(dict.fromkeys(k for n in names for k in rows[n][1]
                              if k != "gpus" and k not in totals)) + totals
    for k in keys:
        cells = [f"{rows[n][1][k]:.1f}" if k in rows[n][1] else "-" for n in names]
        bold = k == "peak"
        label = f"**{k}**" if bold else k
        print(f"| {label} | " + " | ".join(f"**{c}**" if bold else c for c in cells) + " |")
    print("| fits in the GPU | " + " | ".join(
        "yes" if rows[n][1]["peak"] <= args.gpu_gib * 1e9 / GiB else "NO" for n in names) + " |")
    if args.json:
        args.json.write_text(json.dumps({n: b for n, (_, b) in rows.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

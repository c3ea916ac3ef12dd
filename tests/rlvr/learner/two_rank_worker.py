"""Run by ``torchrun --nproc_per_node=2`` from the ``two_rank_runs`` fixture (not a test itself).

One process group runs every job the two-rank learner tests read (one launch instead of one per
test: each launch costs three interpreters importing torch), each job in ``out_dir/<job>``:

- ``full`` (test_learner_distributed.py) and ``lora`` (test_learner_lora.py): each rank trains on
  its half of a fixed global batch (``FULL_STEPS`` / ``LORA_STEPS`` updates); rank 0 writes the
  metrics; then every rank takes part in a sharded checkpoint save and an export (HF, or the
  peft adapter).
- ``memory`` (test_learner_memory_distributed.py; first, so that its peak-RSS measurement sees a
  fresh process): ``two_rank_memory_worker.memory_job``.
- ``bf16`` (test_learner_loading_dtypes.py): both ranks build a bf16-compute actor and a bf16
  reference (rank 0 loads the checkpoint, rank 1 builds on the meta device); each rank writes
  its buffers' dtypes and the reference's logprobs of a fixed batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from learner_helpers import (  # noqa: E402
    global_batch,
    run_steps,
    two_rank_config,
    two_rank_lora,
)
from two_rank_memory_worker import memory_job  # noqa: E402
from worker_exit import end_worker  # noqa: E402

from rlvr.learner import (  # noqa: E402
    Actor,
    ActorConfig,
    Checkpointer,
    OptimConfig,
    Reference,
    export_adapter,
    export_hf,
    init_distributed,
)

FULL_STEPS = 3
LORA_STEPS = 2


def train_job(out_dir: Path, model_path: str, steps: int, lora, info) -> None:
    """Train ``steps`` updates on this rank's half, save a checkpoint, export."""
    out_dir.mkdir(parents=True, exist_ok=True)
    batch = global_batch()
    half = len(batch) // info.world_size
    local = batch.select(list(range(info.rank * half, (info.rank + 1) * half)))
    torch.manual_seed(0)  # the adapter's initialisation (rank 0's is scattered)
    actor = Actor.from_pretrained(model_path, two_rank_config(lora), info)
    metrics = run_steps(actor, local, steps)
    Checkpointer({"actor": actor}).save(out_dir / "ckpt" / f"step_{steps}")
    if lora is None:
        export_hf(actor.module, out_dir / "export")
    else:
        export_adapter(actor.module, out_dir / "export", lora, model_path)
    if info.rank == 0:
        (out_dir / "metrics.json").write_text(json.dumps(metrics))


def bf16_job(out_dir: Path, model_path: str, info) -> None:
    """Build a bf16 actor and reference; write this rank's dtypes and reference logprobs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=4, mixed_precision="bf16")
    actor = Actor.from_pretrained(model_path, cfg, info)
    ref = Reference.from_pretrained(model_path, cfg, info)
    ref_logp = ref.compute_logprobs(global_batch())
    record = {
        "actor": {n: str(b.dtype) for n, b in actor.module.named_buffers()},
        "reference": {n: str(b.dtype) for n, b in ref.module.named_buffers()},
        "ref_logp_sum": float(ref_logp.double().sum()),
    }
    (out_dir / f"rank{info.rank}.json").write_text(json.dumps(record))


def main() -> None:
    out_dir, model_path = Path(sys.argv[1]), sys.argv[2]
    info = init_distributed("cpu")
    assert info.world_size == 2
    memory_job(out_dir / "memory", Path(model_path), info)
    train_job(out_dir / "full", model_path, FULL_STEPS, None, info)
    train_job(out_dir / "lora", model_path, LORA_STEPS, two_rank_lora(), info)
    bf16_job(out_dir / "bf16", model_path, info)
    (out_dir / f"done{info.rank}").write_text("ok")
    end_worker()  # no interpreter teardown: it could abort rank 0 (see worker_exit)


if __name__ == "__main__":
    main()

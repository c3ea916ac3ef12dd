"""Run by ``torchrun --nproc_per_node=2`` from test_learner_distributed.py (not a test itself).

Each rank trains on its half of a fixed global batch; rank 0 writes the metrics. Then every
rank takes part in a sharded checkpoint save and an HF export.
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
from worker_exit import end_worker  # noqa: E402

from rlvr.learner import (  # noqa: E402
    Actor,
    Checkpointer,
    export_adapter,
    export_hf,
    init_distributed,
)


def main() -> None:
    out_dir, model_path, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lora = two_rank_lora() if sys.argv[4:] == ["lora"] else None
    info = init_distributed("cpu")
    assert info.world_size == 2
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

    end_worker()  # no interpreter teardown: it could abort rank 0 (see worker_exit)


if __name__ == "__main__":
    main()

"""Run by ``torchrun --nproc_per_node=2`` from test_learner_loading_dtypes.py (not a test itself).

Both ranks build a bf16-compute actor and a bf16 reference over gloo (rank 0 loads the
checkpoint, rank 1 builds on the meta device); each rank writes its buffers' dtypes and the
reference's logprobs of a fixed batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from learner_helpers import global_batch  # noqa: E402
from worker_exit import end_worker  # noqa: E402

from rlvr.learner import Actor, ActorConfig, OptimConfig, Reference, init_distributed  # noqa: E402


def main() -> None:
    out_dir, model_path = Path(sys.argv[1]), sys.argv[2]
    info = init_distributed("cpu")
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
    end_worker()


if __name__ == "__main__":
    main()

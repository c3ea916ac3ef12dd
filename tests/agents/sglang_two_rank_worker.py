"""Run by ``torchrun --nproc_per_node=2`` from test_sglang_real.py (not a test itself).

Asynchronous RL (``rollout.max_staleness=1``) with the sglang engine on two ranks, both
generating on the real server at ``argv[2]``: rank 0's producer loads the weights and names
their version on the server, rank 1's waits for the version (``AsyncRollout.follower``). Each
rank writes ``out_dir/rank<r>.json``: its producer's accounting, the versions its rows carry per
step, and its logged metrics.

Usage: sglang_two_rank_worker.py OUT_DIR SERVER_URL MODEL_DIR INFLIGHT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rlvr"))

from worker_exit import end_worker  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.learner import init_distributed  # noqa: E402
from rlvr.trainer import Trainer  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEPS = 3


def main() -> None:
    out, url, model, inflight = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    rank = init_distributed("cpu").rank
    config = load_config(CONFIGS / "quickstart.yaml", [
        f"model.path={model}", "sft.enabled=false", f"trainer.output_dir={out}",
        f"trainer.steps={STEPS}", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=2", "eval.tasks=4", "eval.every=2",
        "actor.optim.lr=3e-3", "actor.optim.schedule=constant", "rollout.engine=sglang",
        f"rollout.sglang.url={url}", "rollout.sglang.allow_unseeded=true",
        "rollout.max_logprob_diff=1e-4", "rollout.max_staleness=1", "actor.tis_cap=2.0",
        f"rollout.inflight_update={inflight}"])
    trainer = Trainer(config, log=lambda *_: None)
    versions: dict[int, list[int]] = {}
    collect = trainer.stream.collect

    def recording(step, position=0):
        trajs, metrics = collect(step, position)
        versions[step] = sorted({v for t in trajs for v, m in
                                 zip(t.policy_versions or [], t.response_mask) if m})
        return trajs, metrics

    trainer.stream.collect = recording
    history = trainer.train().history
    producer = trainer.rollout.producer
    assert producer is not None
    (out / f"rank{rank}.json").write_text(json.dumps({
        "follower": producer.follower, "versioned": producer.versioned,
        "started": producer.started, "trained": producer.trained,
        "dropped": dict(producer.dropped), "accounted": producer.accounted,
        "versions": versions, "history": history}))
    end_worker()  # no interpreter teardown: it could abort rank 0 (see worker_exit)


if __name__ == "__main__":
    main()

"""Every weight version proven in asynchronous RL: one probe, scored by the engine and the learner.

The sync guard's usual numbers (``rollout/logprob_diff``: the learner's logprobs of the step's
rollout tokens against the engine's) only prove a sync where the rows were played by the
weights the learner holds now; with ``rollout.max_staleness >= 1`` most rows were played by an
older version, so most steps would go unchecked (``rlvr.training.async_rollout.fresh_mismatch``).
The probe proves each version the engine claims to hold instead:

* the probe is one fixed sequence, the run's first trainable episode (prompt, model tokens and
  env tokens as they were played), chosen at the first step this process trains;
* the learner scores it right after each update ``v``, before it publishes ``v``
  (``record_learner``: its own forward, as stage B's, at temperature 1);
* the engine scores it each time it holds a version it has not proven yet (``check_engine``:
  after the producer loads weights between steps, after an in-flight update, after a pause for
  evaluation), by ``rlvr.agents.engine.ScoringEngine.score``: every server of a server engine scores
  it, so a sync that reached one server of two is caught;
* ``sync/probe_logprob_diff`` is the token mean of ``|engine - learner|`` over the probe's model
  tokens at the same version, the worst replica's; ``SyncGuard`` holds it to the same limit as
  ``rollout/logprob_diff``. ``sync/probe_version`` names that version and ``sync/probe_checks``
  counts the versions proven so far.

Both sides score at temperature 1 (the weights are what is proven; sglang's input-token
logprobs are untempered). An engine that cannot score (not a ``ScoringEngine``) leaves the probe
off, said once in the log. Memory: the learner's scores of versions not yet proven, one float per
probe token each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rlvr.agents.engine import ScoringEngine
from rlvr.batch import RolloutBatch
from rlvr.distributed import all_reduce_max, rank_and_world
from rlvr.training.sync_guard import PROBE_METRIC
from rlvr.trajectory import INVALID_FINISH_REASONS, Trajectory

ScoreRows = Callable[[RolloutBatch], torch.Tensor]
"""The learner's logprobs of a batch's responses, ``(B, R)`` (``Actor.compute_logprobs``)."""


@dataclass(frozen=True)
class ProbeResult:
    """One version proven on one replica.

    Attributes:
        version: the version the engine claimed to hold.
        replica: which weights scored it (``"transformers"``, or a server's URL).
        diff: token mean of ``|engine - learner|`` over the probe's model tokens.
        max_diff: the largest per-token gap.
    """

    version: int
    replica: str
    diff: float
    max_diff: float


class VersionProbe:
    """The probe's sequence, the learner's scores by version, and the engine's checks.

    ``record_learner`` runs on the learner's thread, ``check_engine`` on the producer's (or the
    pusher's, or the learner's during a pause); a lock guards what they share.

    Args:
        pad_id: the pad token id (for the learner's one-row batch).
        device: where the learner's batch goes.
    """

    def __init__(self, pad_id: int, device: torch.device | str = "cpu") -> None:
        self.pad_id = pad_id
        self.device = torch.device(device)
        self.row: Trajectory | None = None
        self._learner: dict[int, torch.Tensor] = {}
        self._proven: set[int] = set()
        self._results: list[ProbeResult] = []
        self.last_worst: ProbeResult | None = None
        """The worst result of the last ``metrics`` call (its replica names the server)."""
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """A probe sequence was chosen."""
        return self.row is not None

    def choose(self, trajectories: Sequence[Trajectory]) -> None:
        """Take the first valid row with a model token as the probe (once; later calls keep it)."""
        if self.row is not None:
            return
        for traj in trajectories:
            if traj.finish_reason not in INVALID_FINISH_REASONS and any(traj.response_mask):
                n = len(traj.response_ids)
                self.row = Trajectory(list(traj.prompt_ids), list(traj.response_ids),
                                      list(traj.response_mask), [0.0] * n, [0.0] * n)
                return

    def record_learner(self, version: int, score_rows: ScoreRows) -> None:
        """The learner's scores of the probe at ``version`` (call before publishing it).

        Collective: every rank calls it (``score_rows`` is an FSDP forward). A rank that has no
        probe yet while another has (its first step's rows were all errors) runs the forward on
        a two-token stand-in row and keeps nothing, so the ranks' forwards stay paired.
        """
        if rank_and_world()[1] > 1:
            anyone = torch.tensor([float(self.row is not None)], device=self.device)
            if not float(all_reduce_max(anyone)[0]):
                return
        elif self.row is None:
            return
        row = self.row or Trajectory([self.pad_id], [self.pad_id], [1], [0.0], [0.0])
        batch = RolloutBatch.from_trajectories([row], self.pad_id).to(self.device)
        with torch.no_grad():
            logp = score_rows(batch)[0].detach().double().cpu()
        if self.row is None:
            return
        mask = torch.tensor(self.row.response_mask, dtype=torch.bool)
        with self._lock:
            self._learner[int(version)] = logp[: len(mask)][mask]

    def check_engine(self, engine: object, version: int) -> None:
        """Score the probe on ``engine``, which claims to hold ``version``; record the gap.

        Does nothing before the learner has scored ``version``, for a version already proven,
        or for an engine that cannot score.
        """
        version = int(version)
        with self._lock:
            learner = self._learner.get(version)
            if self.row is None or learner is None or version in self._proven:
                return
        if not isinstance(engine, ScoringEngine):
            return
        row = self.row
        scores = engine.score(row.prompt_ids + row.response_ids, len(row.prompt_ids))
        mask = torch.tensor(row.response_mask, dtype=torch.bool)
        results = []
        for replica, values in scores.items():
            gap = (torch.tensor(values, dtype=torch.float64)[mask] - learner).abs()
            results.append(ProbeResult(version, replica, float(gap.mean()), float(gap.max())))
        with self._lock:
            self._proven.add(version)
            self._results += results
            for old in [v for v in self._learner if v <= version]:
                del self._learner[old]

    def metrics(self) -> dict[str, float]:
        """The versions proven so far, and the worst gap since the last call and its version."""
        with self._lock:
            results, self._results = self._results, []
            proven = len(self._proven)
        out = {"sync/probe_checks": float(proven)} if self.row is not None else {}
        if results:
            worst = self.last_worst = max(results, key=lambda r: r.diff)
            out |= {PROBE_METRIC: worst.diff, "sync/probe_version": float(worst.version),
                    "sync/probe_max_token_diff": worst.max_diff}
        return out


def reduce_probe_metrics(metrics: dict[str, float], device: torch.device) -> dict[str, float]:
    """The probe's numbers over every rank: the worst gap wins (collective; one rank: as is).

    Every rank calls it every step, with or without a check of its own, so every rank's sync
    guard sees the same worst gap and stops together.
    """
    if rank_and_world()[1] == 1:
        return metrics
    out = {k: v for k, v in metrics.items() if not k.startswith("sync/probe_")}
    mine = torch.tensor([metrics.get(PROBE_METRIC, -1.0), metrics.get("sync/probe_checks", -1.0)],
                        dtype=torch.float64, device=device)
    worst, checks = all_reduce_max(mine).tolist()
    if checks >= 0:
        out["sync/probe_checks"] = checks
    own = worst >= 0 and worst == float(mine[0])
    # the rank with the worst gap tells its version and largest token gap (-1 elsewhere)
    detail = torch.tensor([metrics.get(k, -1.0) if own else -1.0
                           for k in ("sync/probe_version", "sync/probe_max_token_diff")],
                          dtype=torch.float64, device=device)
    version, max_token = all_reduce_max(detail).tolist()
    if worst >= 0:
        out |= {PROBE_METRIC: worst, "sync/probe_version": version,
                "sync/probe_max_token_diff": max_token}
    return out

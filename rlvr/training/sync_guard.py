"""Every weight sync proven: the engine-vs-learner logprob gap must stay under a threshold.

After each sync the next step's rollout was sampled by the engine with the weights it was sent;
the learner recomputes the same tokens' logprobs with its own weights (``rollout/logprob_diff``:
the token mean of ``|logp_learner - logp_engine|`` over response tokens, all ranks). A sync that
silently did not land (the engine kept old weights), a dtype mismatch or a template/tokenizer
mismatch shows up there, long before the run merely looks "stale". ``SyncGuard.check`` stops the
run with ``WeightSyncError`` naming the likely causes and the step's numbers.

Default thresholds per rollout dtype (``rollout.max_logprob_diff: null``), from gaps measured on
this CPU (BENCHMARKS.md, "SGLang on CPU and the sync guard"):

* float32: 2e-7 per token (transformers engine, and the stand-in server), 5e-7 (real sglang
  0.5.23 on CPU, float32); an engine kept one step behind (lr 3e-3) gave 0.22. Default 1e-3.
* bfloat16: measured on the real Qwen2.5-0.5B shape (24 layers, vocab 151936, random weights
  with logits of a trained head's scale; ``bench/bench_guard_threshold.py``): the learner
  (bf16 compute over fp32 master weights, float32 logits) against a bfloat16 engine (bf16
  logits) leaves 0.040-0.072 per token after a correct sync (3 seeds, 19 measurements; 13
  over the old default 5e-2, which stopped healthy runs); float32 engine logits (as
  ``--enable-fp32-lm-head``) 0.028-0.080 (the gap is the hidden states', not the head's).
  Default 0.12 (1.5x the largest). The gap grows with the sampled tokens' NLL (0.03-0.05 x
  NLL per token at NLL 1.0-2.1): a policy sampling above ~2.4 nats per token may need more.
  An engine one or two steps stale gave 0.041-0.080 at lr 1e-6, 0.055-0.139 at lr 1e-5 (within
  bf16's noise) and 0.28-1.18 at lr 1e-4: the bf16 guard catches wrong weights, dtype and
  template mismatches and a sync that stays missing while the policy moves, not one missed
  step at a small learning rate.
  float16 (3 more mantissa bits): default 2e-2, not measured.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlvr.errors import WeightSyncError

DEFAULT_MAX_LOGPROB_DIFF: dict[torch.dtype, float] = {
    torch.float32: 1e-3,
    torch.bfloat16: 0.12,
    torch.float16: 2e-2,
}
"""``rollout.max_logprob_diff`` when it is null, by the dtype the engine computes in."""

METRIC = "rollout/logprob_diff"
PROBE_METRIC = "sync/probe_logprob_diff"
"""Asynchronous RL's proof of the engine's claimed version (``rlvr.training.version_probe``)."""


def default_limit(dtype: torch.dtype) -> float:
    """The default threshold for an engine computing in ``dtype`` (float32's for unknown ones)."""
    return DEFAULT_MAX_LOGPROB_DIFF.get(dtype, DEFAULT_MAX_LOGPROB_DIFF[torch.float32])


class SyncGuard:
    """Stops the run when the logprob gap after a weight sync exceeds ``limit``.

    Args:
        limit: the most allowed ``rollout/logprob_diff``; None picks ``default_limit(dtype)``;
            ``inf`` disables the guard.
        dtype: the dtype the rollout engine computes in.
        engine: the engine's name (for the message).
    """

    def __init__(self, limit: float | None, dtype: torch.dtype, engine: str) -> None:
        self.limit = default_limit(dtype) if limit is None else float(limit)
        self.dtype = dtype
        self.engine = engine

    def check(self, step: int, metrics: Mapping[str, float]) -> None:
        """Raise ``WeightSyncError`` if ``metrics``' logprob gap is over the limit.

        Steps that did not measure the gap (no ``rollout/logprob_diff``) pass. In asynchronous
        RL the probe's gap at the version the engine claims (``sync/probe_logprob_diff``) is
        held to the same limit.
        """
        self._check_probe(step, metrics)
        diff = metrics.get(METRIC)
        if diff is None or diff <= self.limit:
            return
        kl = metrics.get("rollout/kl")
        kl_text = "n/a" if kl is None else f"{kl:.3g}"
        raise WeightSyncError(
            f"step {step}: the {self.engine} engine's logprobs differ from the learner's by "
            f"{diff:.3g} per token (rollout/logprob_diff; rollout/kl {kl_text}), "
            f"over rollout.max_logprob_diff = {self.limit:.3g} (default for "
            f"{str(self.dtype).removeprefix('torch.')}). Likely causes: the last weight sync did "
            "not land (the engine kept older weights: check the server log of "
            "update_weights_from_disk/_distributed), a dtype mismatch between the engine and "
            "the learner (e.g. a float16 server for a float32 policy), or a chat template/"
            "tokenizer that differs between the engine and the learner. Raise the threshold "
            "only if the gap is expected (rollout.max_logprob_diff: .inf disables the guard)."
        )

    def _check_probe(self, step: int, metrics: Mapping[str, float]) -> None:
        diff = metrics.get(PROBE_METRIC)
        if diff is None or diff <= self.limit:
            return
        version = metrics.get("sync/probe_version")
        raise WeightSyncError(
            f"step {step}: the {self.engine} engine claims to hold the weights of version "
            f"{'?' if version is None else int(version)}, but its logprobs of the probe "
            f"sequence differ from the learner's at that version by {diff:.3g} per token "
            f"({PROBE_METRIC}; largest token gap "
            f"{metrics.get('sync/probe_max_token_diff', float('nan')):.3g}), over "
            f"rollout.max_logprob_diff = {self.limit:.3g} (default for "
            f"{str(self.dtype).removeprefix('torch.')}). The asynchronous producer's weight "
            "load did not land (on every server), or landed with other numbers (dtype, a "
            "partial load); rlvr.training.version_probe explains the check."
        )

"""Config overrides shared by the trainer tests: a small tiny model and a quiet run."""

from __future__ import annotations

SMALL_MODEL = [
    "model.tiny.hidden_size=32", "model.tiny.num_hidden_layers=2",
    "model.tiny.num_attention_heads=2", "model.tiny.num_key_value_heads=1",
    "model.tiny.intermediate_size=64", "model.tiny.vocab_size=320",
]
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
         "trainer.export_at_end=false"]

#: The engine-vs-learner gap: the engine's logprobs round differently with what else it batches
#: (CPU GEMMs are not batch-invariant: a row alone and in a batch of 4 differ by ~5e-7), and how
#: a step's requests meet in the batch depends on thread timing. Its sampled tokens do not.
ENGINE_ROUNDING = ("rollout/logprob_diff", "rollout/kl")


def assert_same_run(a: list[dict[str, float]], b: list[dict[str, float]]) -> None:
    """Two runs' per-step metrics are the same run: every number equal to the bit (timings and
    throughput aside), the engine-vs-learner gap (``ENGINE_ROUNDING``) equal to rounding."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        exact = sorted(k for k in x if not k.startswith(("time/", "perf/"))
                       and k not in ENGINE_ROUNDING)
        assert [(k, x[k]) for k in exact] == [(k, y[k]) for k in exact]
        for key in ENGINE_ROUNDING:
            if key in x:
                assert abs(x[key] - y[key]) <= 1e-6, (x["step"], key, x[key], y[key])

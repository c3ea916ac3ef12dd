"""Config overrides shared by the trainer tests: a small tiny model and a quiet run."""

from __future__ import annotations

SMALL_MODEL = [
    "model.tiny.hidden_size=32", "model.tiny.num_hidden_layers=2",
    "model.tiny.num_attention_heads=2", "model.tiny.num_key_value_heads=1",
    "model.tiny.intermediate_size=64", "model.tiny.vocab_size=320",
]
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
         "trainer.export_at_end=false"]

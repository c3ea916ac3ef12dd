"""docs/configuration.md is generated from the config dataclasses and lists every key."""

import dataclasses
import typing
from dataclasses import dataclass

import pytest

from rlvr.config import TrainConfig
from rlvr.config.docs import DOC_PATH, iter_keys, main, render
from rlvr.errors import ConfigError


def _leaf_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key a YAML config may set, walked independently of the generator."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            keys.extend(_leaf_keys(tp, key))
        elif f.init:
            keys.append(key)
    return keys


def test_the_reference_is_current():
    assert DOC_PATH.read_text() == render(), "stale: run python -m rlvr.config.docs"
    assert main(["--check"]) == 0


def test_every_key_has_a_row_with_a_meaning():
    text = DOC_PATH.read_text()
    keys = _leaf_keys(TrainConfig)
    assert len(keys) > 80
    missing = [k for k in keys if f"| `{k}` |" not in text]
    assert not missing, f"docs/configuration.md lacks {missing}"
    for _, _, rows in iter_keys(TrainConfig):
        for row in rows:
            assert row.meaning and row.type and row.default, row


def test_allowed_values_come_from_literals_bounds_and_registries():
    rows = {r.key: r for _, _, rs in iter_keys(TrainConfig) for r in rs}
    assert rows["actor.loss_agg"].allowed.startswith("`token-mean`, `token-sum`")
    assert rows["actor.clip_low"].allowed == "(0, 1)"
    assert "`drgrpo`" in rows["algorithm.estimator"].allowed
    threads = rows["trainer.threads"]
    assert threads.type == "int \\| null" and threads.default == "`null`"


def test_keys_that_take_effect_only_in_some_setups_say_so():
    rows = {r.key: r for _, _, rs in iter_keys(TrainConfig) for r in rs}
    assert rows["rollout.sglang.master_address"].meaning.endswith(
        "Only with the `distributed` weight sync.")
    text = DOC_PATH.read_text()
    assert "Options of the SGLang engine. Takes effect only with the `sglang` engine." in text
    assert "Takes effect only with the `transformers` engine." in text
    assert "Used only when `model.path` is null." in text


def test_a_key_without_a_description_fails_the_generator(tmp_path):
    @dataclass
    class Undocumented:
        """A config whose docstring forgets a field.

        Attributes:
            known: documented.
        """

        known: int = 0
        forgotten: int = 1

    with pytest.raises(ConfigError, match="forgotten: no description"):
        list(iter_keys(Undocumented, "x"))
    stale = tmp_path / "configuration.md"
    stale.write_text(render().replace("| `trainer.seed` |", "| `trainer.sed` |"))
    assert main(["--check", "--out", str(stale)]) == 1

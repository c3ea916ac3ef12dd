"""``rlvr eval`` builds its config like ``rlvr train``: one typed path from flag to engine.

The flags are dotted keys of ``SuiteEvalConfig`` (``--sglang-url`` is ``sglang.url``), any key
can follow as ``key=value``, and a bad key or value is reported as the dotted key with the
allowed values, by the same loader and checks as ``rlvr train``'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.agents.engine import SamplingParams
from rlvr.agents.hf.options import TransformersOptions
from rlvr.agents.hf.sampling import row_plan
from rlvr.agents.sglang.options import SGLangOptions
from rlvr.cli import eval_args, eval_main
from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.eval.evaluator import SuiteEvalConfig, eval_config
from rlvr.eval.plan import default_temperature
from rlvr.trajectory import logprob_temperature

BASE = ["--model", "m", "--suite", "arith-smoke"]


def test_flags_are_dotted_keys_of_the_typed_config() -> None:
    _, config = eval_args([*BASE, "--engine", "sglang", "--sglang-url", "http://h:1",
                           "--sglang-allow-unseeded", "--samples", "4", "--stop", "\n\n"])
    assert isinstance(config, SuiteEvalConfig)
    assert config.engine_options is config.sglang
    assert config.sglang == SGLangOptions(url="http://h:1", allow_unseeded=True)
    assert config.samples == 4 and config.temperature == 1.0 and config.stop == ("\n\n",)
    _, default = eval_args(BASE)
    assert default == eval_config({"suite": "arith-smoke"})  # unset flags keep the defaults


def test_dotted_overrides_follow_the_flags() -> None:
    _, config = eval_args([*BASE, "--device", "cpu", "transformers.threads=2", "seed=3",
                           "transformers.lean=false"])
    assert config.engine_options == TransformersOptions(threads=2, lean=False)
    assert config.device == "cpu" and config.seed == 3


@pytest.mark.parametrize(("override", "message"), [
    ("sglang.weight_sync=nccl",
     "sglang.weight_sync: unknown value 'nccl'; allowed: auto, disk, distributed"),
    ("sglang.bucket_mb=0", "sglang.bucket_mb must be >= 1; got 0"),
    ("sglang.bogus=1", "unknown config key 'sglang.bogus'; allowed keys here: url,"),
    ("transformers.threads=0", "transformers.threads must be >= 1 or null; got 0"),
    ("engine=tgi", "engine: unknown value 'tgi'; allowed: sglang, transformers, vllm"),
    ("vllm.weight_sync=ipc", "vllm.weight_sync: unknown value 'ipc'"),
    ("samples=0", "samples must be >= 1; got 0"),
    ("top_p=2", "top_p must be in (0, 1]; got 2"),
])
def test_a_bad_key_is_named_as_dotted_like_train(
    override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        eval_args([*BASE, override])
    assert str(err.value).startswith(message)
    assert eval_main([*BASE, override]) == 2  # before any model is read
    assert f"rlvr eval: error: {message}" in capsys.readouterr().err
    if override.startswith(("sglang.", "transformers.", "engine=")):  # the same words in train
        with pytest.raises(ConfigError) as train_err:
            load_config(None, [f"rollout.{override}"])
        key = override.partition("=")[0]
        assert str(train_err.value).startswith(message.replace(key, f"rollout.{key}", 1))


def test_a_threads_override_reaches_the_engine(tiny_model_path: Path) -> None:
    from transformers import AutoTokenizer

    from rlvr.eval.evaluator import _build_engine

    _, config = eval_args(["--model", str(tiny_model_path), "--suite", "arith-smoke",
                           "--device", "cpu", "transformers.threads=2"])
    engine = _build_engine(tiny_model_path, AutoTokenizer.from_pretrained(tiny_model_path), config)
    try:
        assert engine.threads == 2 and str(engine.device) == "cpu"
    finally:
        engine.close()


def test_greedy_for_one_sample_is_one_rule() -> None:
    assert default_temperature(1) == 0.0 and default_temperature(2) == 1.0
    assert SuiteEvalConfig(suite="s").temperature == default_temperature(1)
    assert SuiteEvalConfig(suite="s", samples=8).temperature == default_temperature(8)
    assert SuiteEvalConfig(suite="s", samples=8, temperature=0.5).temperature == 0.5


def test_temperature_zero_counts_as_one_for_logprobs_is_one_rule() -> None:
    import torch

    from rlvr.learner.logits import logprobs_from_logits

    assert logprob_temperature(0) == 1.0 and logprob_temperature(0.7) == 0.7
    assert row_plan(SamplingParams(temperature=0)).temperature == logprob_temperature(0)
    assert row_plan(SamplingParams(temperature=0.5)).temperature == logprob_temperature(0.5)
    logits, labels = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    torch.testing.assert_close(logprobs_from_logits(logits, labels, temperature=0.0),
                               logprobs_from_logits(logits, labels, temperature=1.0))


def test_each_engine_registers_its_options_class_and_has_a_section() -> None:
    import dataclasses
    import typing

    from rlvr.agents.engine_registry import ENGINES, EngineRequest, engine_options, options_class
    from rlvr.agents.errors import EngineConfigError
    from rlvr.config.engine import EngineSection

    hints = typing.get_type_hints(EngineSection)
    sections = {f.name for f in dataclasses.fields(EngineSection)} - {"engine"}
    assert sections == set(ENGINES)
    for name in ENGINES:
        assert hints[name] is options_class(name)
        assert isinstance(EngineSection(engine=name).engine_options, options_class(name))
    request = EngineRequest(engine="sglang", model_path="m", options={"url": "http://h:1"})
    assert engine_options(request) == SGLangOptions(url="http://h:1")
    with pytest.raises(EngineConfigError, match="sglang engine options: .*'device'"):
        engine_options(EngineRequest(engine="sglang", model_path="m", options={"device": "x"}))
    with pytest.raises(EngineConfigError, match="the transformers engine takes "
                                                "TransformersOptions; got SGLangOptions"):
        engine_options(EngineRequest(engine="transformers", model_path="m",
                                     options=SGLangOptions()))

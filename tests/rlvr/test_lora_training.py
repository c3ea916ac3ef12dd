"""End to end: a LoRA run with a KL term exports a peft adapter, and ``rlvr eval`` reads it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402

from rlvr.cli import eval_main  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.trainer import train  # noqa: E402

CONFIGS = Path(__file__).parents[2] / "configs"


def test_a_lora_run_with_kl_exports_an_adapter_that_eval_loads(tmp_path, capsys):
    quiet = [q for q in QUIET if not q.startswith("trainer.export_at_end")]
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + quiet + [
        f"trainer.output_dir={tmp_path / 'run'}", "trainer.steps=2", "sft.enabled=false",
        "rollout.prompts_per_step=2", "rollout.group_size=4", "eval.tasks=4", "eval.every=0",
        "actor.lora.rank=4", "actor.lora.alpha=8", "actor.lora.export_merged=true",
        "algorithm.kl.placement=loss", "actor.optim.schedule=constant",
    ])
    result = train(config, log=lambda *_: None)
    assert len(result.history) == 2
    assert all("actor/kl_loss" in m or "actor/kl" in m for m in result.history), \
        sorted(result.history[-1])
    adapter = tmp_path / "run" / "export"
    settings = json.loads((adapter / "adapter_config.json").read_text())
    assert settings["r"] == 4 and settings["peft_type"] == "LORA"
    assert (tmp_path / "run" / "export_merged" / "config.json").is_file()
    suite = tmp_path / "suite.yaml"
    suite.write_text("""
name: tiny
entries:
  - env: rlvr/Math-v0
    name: arith
    split: test
    n_tasks: 2
    kwargs: {answer_format: plain, system_prompt: null, source_kwargs: {n_tasks: 20}}
""")
    code = eval_main(["--model", str(adapter), "--suite", str(suite), "--out",
                      str(tmp_path / "eval"), "--max-new-tokens", "4", "--no-progress"])
    assert code == 0, capsys.readouterr().err


def test_lora_keys_are_checked_on_load():
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError, match="actor.lora.rank"):
        load_config(CONFIGS / "quickstart.yaml", ["actor.lora.rank=0"])

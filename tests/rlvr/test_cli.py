import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_usage_without_a_command(capsys):
    assert main([]) == 2
    assert "rlvr train CONFIG" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_unknown_command_names_the_allowed_ones(capsys):
    assert main(["trian"]) == 2
    assert "unknown command 'trian'; allowed: train, eval" in capsys.readouterr().err


def test_train_rejects_a_bad_override_before_any_work(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["train", str(CONFIGS / "quickstart.yaml"), "rollout.group_sise=4",
                 f"trainer.output_dir={out}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown config key 'rollout.group_sise'" in err
    assert "Did you mean 'group_size'?" in err
    assert not out.exists()


def test_train_rejects_a_bad_value_naming_the_allowed_ones(capsys):
    assert main(["train", str(CONFIGS / "quickstart.yaml"), "algorithm.estimator=ppo"]) == 2
    assert "algorithm.estimator: unknown value 'ppo'; allowed: drgrpo, gae, grpo" in \
        capsys.readouterr().err


def test_train_reports_a_plugin_that_cannot_be_imported(capsys):
    code = main(["train", str(CONFIGS / "quickstart.yaml"), "--import", "no_such_plugin_xyz"])
    assert code == 2
    assert "no_such_plugin_xyz" in capsys.readouterr().err


def test_train_rejects_an_unknown_env_or_env_kwarg_before_any_work(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["train", str(CONFIGS / "quickstart.yaml"), "env.id=rlvr/Maths-v0",
                 f"trainer.output_dir={out}"]) == 2
    assert "rlvr/Math-v0" in capsys.readouterr().err
    assert main(["train", str(CONFIGS / "quickstart.yaml"), "env.kwargs.answer_fmt=plain",
                 f"trainer.output_dir={out}"]) == 2
    assert "answer_fmt" in capsys.readouterr().err
    assert not out.exists()


def test_eval_dispatches_to_the_evaluation_cli(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--help"])
    assert exc.value.code == 0
    assert "--suite" in capsys.readouterr().out


def test_console_entry_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", "missing.yaml"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "config file 'missing.yaml' does not exist" in proc.stderr

"""Plugins named in a config's ``env.imports`` are imported before any key is validated.

An estimator or loss that a plugin registers must validate when the same YAML names it, whatever
the path that loads the config. Each test writes a real module, loads the config from YAML, and
unregisters what the module registered.
"""

import sys
import textwrap

import pytest

from rlvr.algorithms.advantages import ADVANTAGE_ESTIMATORS, unregister_estimator
from rlvr.algorithms.losses import POLICY_LOSSES
from rlvr.config import TrainConfig, load_config
from rlvr.config.loader import from_dict
from rlvr.errors import ConfigError

PLUGIN = """
from rlvr.algorithms.advantages import compute_grpo, register_estimator
from rlvr.algorithms.losses import POLICY_LOSSES, ppo_clip_loss, register_policy_loss

register_estimator("{name}_estimator", needs_groups=True)(compute_grpo)
register_policy_loss("{name}_loss")(ppo_clip_loss)
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A real plugin module on sys.path; its registrations are removed afterwards."""
    name = f"rlvr_test_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PLUGIN.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    if f"{name}_estimator" in ADVANTAGE_ESTIMATORS:
        unregister_estimator(f"{name}_estimator")
    if f"{name}_loss" in POLICY_LOSSES:
        POLICY_LOSSES.remove(f"{name}_loss")


def test_an_estimator_and_loss_registered_by_env_imports_validate(plugin, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(f"""
        env: {{imports: [{plugin}]}}
        algorithm: {{estimator: {plugin}_estimator}}
        actor: {{policy_loss: {plugin}_loss}}
    """))
    config = load_config(path)
    assert config.algorithm.estimator == f"{plugin}_estimator"
    assert config.actor.policy_loss == f"{plugin}_loss"


def test_from_dict_imports_too(plugin):
    config = from_dict(TrainConfig, {"env": {"imports": [plugin]},
                                     "algorithm": {"estimator": f"{plugin}_estimator"}})
    assert config.algorithm.estimator == f"{plugin}_estimator"


def test_an_override_can_name_the_plugin(plugin):
    config = load_config(None, [f"env.imports=[{plugin}]",
                                f"algorithm.estimator={plugin}_estimator"])
    assert config.env.imports == [plugin]


@pytest.mark.parametrize("imports, message", [
    ("[no_such_module_for_rlvr]", "env.imports: --import 'no_such_module_for_rlvr' failed"),
    ("no_such_module_for_rlvr", "env.imports: expected a list of module names"),
])
def test_a_bad_import_names_the_key(imports, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"env.imports={imports}"])

import sys
import textwrap
import warnings

import gymnasium
import pytest

from rlvr import envs
from rlvr.envs import EnvArgumentError, PluginImportError, UnknownEnvError


def test_builtins_are_registered_and_listed():
    assert envs.list_envs(namespace="rlvr") == [
        "rlvr/Code-v0", "rlvr/CompactToolUse-v0", "rlvr/Math-v0", "rlvr/OpenEnv-v0",
        "rlvr/ReasoningGym-v0",
        "rlvr/ToolUse-v0", "rlvr/Verifiers-v0", "rlvr/VerifiersHarness-v0"]
    for env_id in envs.BUILTIN_ENVS:
        assert env_id in gymnasium.registry
    envs.register_builtins()  # idempotent: no "overriding" warning, no error
    assert "CartPole-v1" not in envs.list_envs()


def test_gymnasium_make_with_its_checker_and_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gymnasium.make("rlvr/Math-v0", answer_format="plain", source_kwargs={"n_tasks": 10})
        messages, info = env.reset(seed=0)
        new, reward, terminated, truncated, info = env.step("7")
    assert isinstance(env.unwrapped, envs.MathEnv)
    assert messages[0]["role"] == "user" and terminated and new == []
    assert env.get_wrapper_attr("num_tasks") == 10


def test_make_suggests_close_ids():
    with pytest.raises(
        UnknownEnvError, match=r"'rlvr/Math-v1' is not registered\. Did you mean 'rlvr/Math-v0'"
    ):
        envs.make("rlvr/Math-v1")
    with pytest.raises(UnknownEnvError, match="Did you mean 'rlvr/ToolUse-v0'"):
        envs.make("rlvr/tooluse-v0")
    with pytest.raises(UnknownEnvError, match=r"Registered text envs: \["):
        envs.make("zzz")


def test_make_names_bad_kwargs():
    with pytest.raises(
        EnvArgumentError,
        match=(
            r"unexpected parameter 'max_attemps'\. Did you mean 'max_attempts'\? "
            r"Accepted parameters: \[.*'answer_format'"
        ),
    ):
        envs.make("rlvr/Math-v0", max_attemps=3)
    env = envs.make("rlvr/Code-v0", max_attempts=2, disable_env_checker=True)
    assert env.unwrapped.max_attempts == 2


def test_third_party_registration_and_kwargs_through_subclasses(clean_registry):
    class Sub(envs.MathEnv):
        def __init__(self, flavour="x", **kwargs):
            super().__init__(**kwargs)
            self.flavour = flavour

    gymnasium.register("thirdparty/Sub-v0", entry_point=Sub)
    assert "thirdparty/Sub-v0" in envs.list_envs()
    env = envs.make("thirdparty/Sub-v0", flavour="y", max_attempts=2)
    assert env.unwrapped.flavour == "y" and env.unwrapped.max_attempts == 2
    with pytest.raises(EnvArgumentError, match="unexpected parameter 'colour'.*'flavour'"):
        envs.make("thirdparty/Sub-v0", colour="red")


def test_import_plugins(tmp_path, monkeypatch, clean_registry):
    package = tmp_path / "myplugin_envs"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            import gymnasium
            gymnasium.register("myplugin/Arith-v0", entry_point="rlvr.envs.math_env:MathEnv",
                               kwargs={"answer_format": "plain"})
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (module,) = envs.import_plugins(["myplugin_envs"])
    assert module.__name__ == "myplugin_envs"
    assert "myplugin/Arith-v0" in envs.list_envs()
    assert envs.make("myplugin/Arith-v0").unwrapped.answer_format == "plain"
    sys.modules.pop("myplugin_envs", None)
    with pytest.raises(
        PluginImportError, match="--import 'no_such_plugin_xyz' failed: ModuleNotFoundError"
    ):
        envs.import_plugins(["no_such_plugin_xyz"])

import dataclasses
from pathlib import Path

import pytest
import yaml

from rlvr.config import TrainConfig, load_config
from rlvr.config.loader import dump_config, from_dict, parse_overrides, to_dict
from rlvr.errors import ConfigError
from rlvr.learner.config import ActorConfig, ActorSection, CriticSection

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


SHIPPED = sorted(CONFIGS.glob("*.yaml")) + sorted(CONFIGS.glob("gpu/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert isinstance(config, TrainConfig)


def test_defaults_round_trip_through_yaml(tmp_path):
    config = load_config(None, ["algorithm.estimator=gae", "actor.optim.lr=3e-4"])
    dump_config(config, tmp_path / "c.yaml")
    again = load_config(tmp_path / "c.yaml")
    assert again == config
    assert again.actor.optim.lr == pytest.approx(3e-4)


def test_dotted_overrides_reach_nested_component_configs():
    config = load_config(CONFIGS / "quickstart.yaml", [
        "rollout.runner.sampling.temperature=0.7",
        "rollout.group_size=4",
        "actor.optim.betas=[0.9, 0.95]",
        "env.kwargs.source_kwargs.max_digits=1",
        "model.tiny.num_hidden_layers=2",
    ])
    assert config.rollout.runner.sampling.temperature == 0.7
    assert config.rollout.group_size == 4
    assert config.actor.optim.betas == (0.9, 0.95)
    assert config.env.kwargs["source_kwargs"] == {**load_config(CONFIGS / "quickstart.yaml")
                                                  .env.kwargs["source_kwargs"], "max_digits": 1}
    assert config.model.tiny.num_hidden_layers == 2
    assert isinstance(config.actor, ActorSection) and isinstance(config.critic, CriticSection)


def test_a_bare_off_is_the_string_off_for_a_choice_that_has_it(tmp_path):
    """YAML 1.1 reads ``off`` as false: a choice field that allows "off" takes it as "off"."""
    path = tmp_path / "c.yaml"
    path.write_text("rollout:\n  max_staleness: 1\n  inflight_update: off\n"
                    "actor:\n  tis_cap: 2.0\n")
    config = load_config(path, ["algorithm.kl.placement=off"])
    assert config.rollout.inflight_update == "off" and config.algorithm.kl.placement == "off"
    config = load_config(path, ["rollout.inflight_update=continue"])
    assert config.rollout.inflight_update == "continue"
    assert load_config(path, ["rollout.inflight_update=off"]).rollout.inflight_update == "off"


def test_yaml_reads_exponent_floats_that_yaml11_leaves_as_strings():
    assert load_config(None, ["actor.optim.lr=1e-4"]).actor.optim.lr == pytest.approx(1e-4)


@pytest.mark.parametrize("override, message", [
    ("algorithm.estimater=gae",
     r"unknown config key 'algorithm.estimater'; allowed keys here: estimator, .*"
     r"Did you mean 'estimator'\?"),
    ("trainr.steps=3", r"unknown config key 'trainr'.*Did you mean 'trainer'\?"),
    ("algorithm.estimator=grop",
     r"algorithm.estimator: unknown value 'grop'; allowed: drgrpo, gae, grpo, reinforce_pp, "
     r"reinforce_pp_baseline, rloo. Did you mean 'grpo'"),
    ("algorithm.kl.placement=rewards",
     r"algorithm.kl.placement: unknown value 'rewards'; allowed: both, loss, off, reward"),
    ("algorithm.kl.reward.estimator=k4",
     r"algorithm.kl.reward.estimator: unknown value 'k4'; allowed: abs"),
    ("algorithm.kl.loss.estimator=low_var",
     r"algorithm.kl.loss.estimator: unknown value 'low_var'; allowed: .*Did you mean "
     r"'low_var_kl'"),
    ("algorithm.kl.loss.coef=-1", r"algorithm.kl.loss.coef must be >= 0; got -1"),
    ("algorithm.kl.estimator=k3",
     r"unknown config key 'algorithm.kl.estimator'.*moved: use algorithm.kl.reward.estimator "
     r"or algorithm.kl.loss.estimator"),
    ("algorithm.kl.coef=0.1", r"moved: use algorithm.kl.reward.coef or algorithm.kl.loss.coef"),
    ("rollout.group_size=2.5", r"rollout.group_size: expected an integer; got 2.5"),
    ("trainer.resume=maybe", r"trainer.resume: expected true or false; got 'maybe'"),
    ("trainer.steps=0", r"trainer.steps must be > 0; got 0"),
    ("trainer.threads=0", r"trainer.threads must be > 0 or null; got 0"),
    ("trainer.threads=two", r"trainer.threads: expected int or null; got 'two'"),
    ("algorithm.gamma=1.5", r"algorithm.gamma must be in \[0, 1\]; got 1.5"),
    ("actor.mini_batch_size=7",
     r"actor.mini_batch_size \(7\) counts prompts, like verl's ppo_mini_batch_size .*must "
     r"divide rollout.prompts_per_step \(16\)"),
    ("actor.optim.lr=0", r"^actor.optim.lr must be > 0; got 0.0$"),
    ("rollout.runner.max_turn=2",
     r"unknown config key 'rollout.runner.max_turn'.*Did you mean 'max_turns'\?"),
    ("rollout.runner.sampling.top_p=2", r"rollout.runner.sampling.*top_p must be in \(0, 1\]"),
    ("actor.kl_loss_coef=0.1", r"actor.kl_loss_coef is set from algorithm.kl"),
    ("algorithm.kl.reward.controller=adaptive",
     r"algorithm.kl.reward.controller='adaptive' needs algorithm.kl.placement 'reward' or "
     r"'both'; got placement='off'"),
    ("algorithm.kl.reward.controller=pid",
     r"algorithm.kl.reward.controller: unknown value 'pid'; allowed: adaptive, fixed"),
    ("model.tiny.hidden_size=33", r"^model.tiny.hidden_size \(33\) must be divisible"),
    ("rollout.engine=tgi",
     r"rollout.engine: unknown value 'tgi'; allowed: sglang, transformers, vllm"),
    ("sft.target_accuracy=2", r"sft.target_accuracy must be in \(0, 1\] or null"),
    ("algorithm.kl=3", r"algorithm.kl: expected a mapping of KLConfig fields; got 3"),
    ("rollout.inflight_update=continue",
     r"rollout.inflight_update 'continue' updates weights .* needs max_staleness >= 1 \(got 0\); "
     r"allowed without it: 'off'"),
    ("rollout.inflight_update=pause",
     r"rollout.inflight_update: unknown value 'pause'; allowed: abort, continue, off"),
    ("rollout.inflight_update=on",
     r"rollout.inflight_update: unknown value True; allowed: abort, continue, off"),
])
def test_bad_keys_and_values_fail_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIGS / "quickstart.yaml", [override])


def test_malformed_override_and_file_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"'trainer.steps' must look like dotted.key=value"):
        parse_overrides(["trainer.steps"])
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"must hold a mapping at the top level"):
        load_config(tmp_path / "list.yaml")


def test_override_under_a_plain_value_is_rejected():
    with pytest.raises(ConfigError, match=r"sets a key under 'steps', a plain value"):
        parse_overrides(["trainer.steps=3", "trainer.steps.x=1"])


def test_learner_configs_take_seed_and_kl_loss_from_one_place():
    config = load_config(None, ["algorithm.kl.placement=loss", "algorithm.kl.loss.coef=0.05",
                                "algorithm.kl.loss.estimator=k2", "trainer.seed=7"])
    actor, critic = config.learner_configs()
    assert (actor.kl_loss_coef, actor.kl_loss_estimator, actor.seed) == (0.05, "k2", 7)
    assert critic.seed == 7 and not hasattr(critic, "kl_loss_coef")  # no KL term: no field
    reward = load_config(None, ["algorithm.kl.placement=reward"]).learner_configs()[0]
    assert reward.kl_loss_coef == 0.0


def test_each_kl_placement_has_its_own_estimator_and_coef_with_verl_defaults():
    kl = load_config(None, ["algorithm.kl.placement=both"]).algorithm.kl
    assert (kl.in_reward, kl.in_loss) == (True, True)
    assert (kl.reward.estimator, kl.loss.estimator) == ("k1", "k3")  # verl: kl, low_var_kl
    both = load_config(None, ["algorithm.kl.placement=both", "algorithm.kl.reward.coef=0.2",
                              "algorithm.kl.loss.coef=0.03", "algorithm.kl.reward.controller="
                              "adaptive"])
    actor = both.learner_configs()[0]
    assert (actor.kl_loss_coef, actor.kl_loss_estimator) == (0.03, "k3")
    assert both.algorithm.kl.reward.coef == 0.2


@pytest.mark.parametrize("override, instead", [
    ("actor.group_size=1", "rollout.group_size"),
    ("critic.group_size=4", "rollout.group_size"),
    ("actor.seed=3", "trainer.seed"),
    ("critic.seed=3", "trainer.seed"),
    ("actor.kl_loss_coef=0", "algorithm.kl.loss.coef"),
    ("actor.kl_loss_estimator=k3", "algorithm.kl.loss.estimator"),
    ("rollout.runner.seed=1", "trainer.seed"),
    ("rollout.runner.sampling.seed=1", "trainer.seed"),
    ("rollout.runner.sampling.max_new_tokens=8", "rollout.runner.max_tokens_per_turn"),
])
def test_runtime_keys_are_refused_naming_the_key_to_use(override, instead):
    """A key the run sets itself is not in the schema: writing it says what sets it."""
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key} is set .*{instead}") as err:
        load_config(CONFIGS / "quickstart.yaml", [override])
    assert err.value.key == key


def test_the_reference_lists_no_runtime_key():
    from rlvr.config.schema import RUNTIME_KEYS

    reference = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    assert not [key for key in RUNTIME_KEYS if f"`{key}`" in reference]


def test_runtime_context_reaches_the_components_from_the_run():
    config = load_config(CONFIGS / "quickstart.yaml", ["trainer.seed=5",
                                                        "rollout.runner.sampling.top_k=7"])
    runner = config.runner_config()
    assert runner.seed == 5 and runner.sampling.top_k == 7 and runner.sampling.seed is None
    assert runner.max_tokens_per_turn == config.rollout.runner.max_tokens_per_turn
    with pytest.raises(ConfigError, match=r"^actor.seed is set from trainer.seed"):
        from_dict(TrainConfig, {"actor": ActorConfig(seed=3)})  # from Python too


def test_from_dict_accepts_component_instances_and_to_dict_is_plain_data():
    config = from_dict(TrainConfig, {"actor": ActorConfig(micro_batch_size=3)})
    assert config.actor.micro_batch_size == 3
    data = to_dict(config)
    yaml.safe_dump(data)  # plain data only
    assert from_dict(TrainConfig, data) == config
    assert dataclasses.is_dataclass(config.rollout.runner.sampling)


def test_decaying_schedule_defaults_to_the_run_length():
    config = load_config(None, ["actor.optim.schedule=linear", "trainer.steps=40"])
    assert config.actor.optim.total_steps == 40
    config = load_config(None, ["critic.optim.schedule=cosine", "critic.optim.total_steps=7"])
    assert config.critic.optim.total_steps == 7 and config.actor.optim.total_steps is None


@pytest.mark.parametrize("override, message", [
    ("actor.clip_low=1.5", r"^actor.clip_low must be in \(0, 1\); got 1.5$"),
    ("actor.micro_batch_size=0", r"^actor.micro_batch_size must be >= 1; got 0$"),
    ("actor.mixed_precision=fp16",
     r"^actor.mixed_precision: unknown value 'fp16'; allowed: auto, bf16, fp32. "
     r"Did you mean 'bf16'"),
    ("actor.kl_loss_estimator=k9", r"^actor.kl_loss_estimator is set from algorithm.kl; use "
                                   r".*algorithm.kl.loss.estimator instead"),
    ("critic.optim.lr=-1", r"^critic.optim.lr must be > 0; got -1.0$"),
    ("critic.optim.schedule=cosine", None),  # valid: total_steps defaults to trainer.steps
    ("critic.value_clip=0", r"^critic.value_clip must be > 0; got 0.0$"),
    ("actor.optim.total_steps=0", r"^actor.optim.total_steps must be >= 1 or null; got 0$"),
    ("sft.lr=0", r"^sft.lr must be > 0; got 0.0$"),
    ("eval.tasks=0", r"^eval.tasks must be > 0; got 0$"),
    ("rollout.max_refill_rounds=-1", r"^rollout.max_refill_rounds must be >= 0; got -1$"),
    ("model.tiny.vocab_size=100", r"^model.tiny.vocab_size must be >= 300; got 100$"),
    ("env.id=", r"^env.id must be a registered gymnasium id"),
])
def test_errors_name_the_key_as_typed_not_an_internal_prefix(override, message):
    args = ["algorithm.estimator=gae", override]
    if message is None:
        load_config(CONFIGS / "quickstart.yaml", args)
        return
    with pytest.raises(ConfigError, match=message) as err:
        load_config(CONFIGS / "quickstart.yaml", args)
    assert "learner." not in str(err.value) and "TinyModelSpec" not in str(err.value)


@pytest.mark.parametrize("key, role, allowed", [
    ("critic.clip_low", "critic", "value_clip"),
    ("critic.entropy_coef", "critic", "value_clip"),
    ("critic.sequence_packing", "critic", "value_clip"),
    ("actor.value_clip", "actor", "clip_low"),
])
def test_a_key_meaningless_for_its_role_is_an_unknown_key(tmp_path, key, role, allowed):
    message = rf"^unknown config key '{key}'; allowed keys here: optim, .*\b{allowed}\b"
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIGS / "ppo_gae_quickstart.yaml", [f"{key}=0.1"])
    section, field = key.split(".")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({section: {field: 0.1}}))
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "c.yaml")


def test_a_critic_key_on_a_critic_free_estimator_loads_and_builds_no_critic(tmp_path):
    from rlvr.algorithms.advantages import get_estimator

    override = load_config(CONFIGS / "quickstart.yaml", ["critic.value_clip=0.3"])
    (tmp_path / "c.yaml").write_text("algorithm: {estimator: rloo}\ncritic: {value_clip: 0.3}\n")
    from_yaml = load_config(tmp_path / "c.yaml")
    for config in (override, from_yaml):
        assert config.critic.value_clip == 0.3
        assert not get_estimator(config.algorithm.estimator).needs_critic
    with pytest.raises(ConfigError, match=r"^critic.value_clip must be > 0; got -1.0$"):
        load_config(CONFIGS / "quickstart.yaml", ["critic.value_clip=-1"])


def test_switching_env_id_on_the_command_line_drops_the_files_env_kwargs():
    # tool_quickstart.yaml's kwargs/eval_kwargs are the tool env's; another env must not get them
    cfg = load_config("configs/tool_quickstart.yaml", ["env.id=rlvr/Math-v0"])
    assert (cfg.env.id, cfg.env.kwargs, cfg.env.eval_kwargs) == ("rlvr/Math-v0", {}, {})
    cfg = load_config("configs/tool_quickstart.yaml",
                      ["env.id=rlvr/Math-v0", "env.kwargs.source=arithmetic"])
    assert cfg.env.kwargs == {"source": "arithmetic"} and cfg.env.eval_kwargs == {}
    # the same id, or no id override, keeps (and merges into) the file's kwargs
    for overrides in (["env.kwargs.max_turns=3"],
                      ["env.id=rlvr/CompactToolUse-v0", "env.kwargs.max_turns=3"]):
        cfg = load_config("configs/tool_quickstart.yaml", overrides)
        assert cfg.env.kwargs == {"source_kwargs": {"n_tasks": 5000, "digits": [3, 2]},
                                  "max_turns": 3}
        assert cfg.env.eval_kwargs == {"source_kwargs": {"n_tasks": 200, "digits": [3, 2]}}

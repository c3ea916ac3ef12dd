from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest
from agent_helpers import (
    CALC_TOOL,
    EchoToolEnv,
    NeverEndingEnv,
    RaisingEnv,
    SlowEnv,
    recompute_logprobs,
)

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import RunnerConfigError
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig, group_specs, run_episodes
from rlvr.batch import RolloutBatch


def _config(stops, **kw):
    base = dict(
        max_turns=4,
        max_tokens_per_turn=12,
        max_response_tokens=400,
        env_step_timeout_s=5.0,
        check_token_exact=True,
        sampling=SamplingParams(temperature=1.0, stop_token_ids=stops),
        seed=7,
    )
    base.update(kw)
    return RunnerConfig(**base)


def _specs(n, factory=EchoToolEnv, **kw):
    return [EpisodeSpec(env_factory=lambda: factory(**kw), seed=i) for i in range(n)]


def _assert_text_matches_template(tok, traj, tools):
    """decode(prompt + response) == the chat template's rendering of the episode's messages,
    up to the closing of the last model turn (the sequence ends with a model token)."""
    msgs = traj.metadata["messages"]
    last_assistant = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    expected = tok.apply_chat_template(msgs[: last_assistant + 1], tools=tools, tokenize=False)
    got = tok.decode(traj.prompt_ids + traj.response_ids, skip_special_tokens=False)
    assert expected.startswith(got)
    assert expected[len(got):] in ("<|im_end|>\n", "\n")


def test_multi_turn_masks_alignment_and_logprobs(engine, tiny_model, tiny_tokenizer,
                                                 frequent_stops):
    runner = EpisodeRunner(engine, tiny_tokenizer, _config(frequent_stops))
    trajs = runner.run(_specs(6, n_turns=3))
    runner.close()
    assert len(trajs) == 6
    reasons = {t.finish_reason for t in trajs}
    assert reasons <= {"stop", "length"}
    multi = [t for t in trajs if t.outcome.turns == 3]
    assert multi, "expected some 3-turn episodes"
    for traj in trajs:
        n = len(traj.response_ids)
        assert len(traj.response_mask) == len(traj.rollout_logprobs) == n
        assert traj.response_mask[-1] == 1  # the sequence ends with a model token
        assert sum(traj.response_mask) == traj.metadata["n_model_tokens"]
        assert n - sum(traj.response_mask) == traj.metadata["n_env_tokens"]
        assert all(lp == 0.0 for lp, m in zip(traj.rollout_logprobs, traj.response_mask) if not m)
        mine, engine_lp = recompute_logprobs(tiny_model, traj, 1.0)
        assert (mine - engine_lp).abs().max().item() < 1e-4
        _assert_text_matches_template(tiny_tokenizer, traj, [CALC_TOOL])
    for traj in multi:
        assert traj.finish_reason == "stop"
        verdict = traj.outcome.verdict
        assert (verdict.score, verdict.passed, verdict.reason) == (1.0, True, "correct")
        assert traj.outcome.answer == "42" and traj.outcome.tool_calls == 2
        assert traj.outcome.tool_errors == 1
        # env tokens exist between turns and contain the tool response
        env_text = tiny_tokenizer.decode([t for t, m in zip(traj.response_ids, traj.response_mask)
                                          if m == 0])
        assert env_text.count("<tool_response>\nresult") == 2
        # rewards: 0.25 at the end of turns 1-2, 1.0 at the end of turn 3, 0.5 on spans
        assert traj.reward == pytest.approx(0.25 * 2 + 1.0 + 0.5 * 2)
        ends = [i for i in range(len(traj.response_mask))
                if traj.response_mask[i] == 1
                and (i + 1 == len(traj.response_mask) or traj.response_mask[i + 1] == 0)]
        assert len(ends) == 3
        assert traj.token_level_scores[ends[-1]] == pytest.approx(1.0)
        for e in ends[:2]:
            assert traj.token_level_scores[e] >= 0.25 - 1e-9
    batch = RolloutBatch.from_trajectories(trajs, tiny_tokenizer.pad_token_id)
    assert batch.response_mask.sum().item() == sum(sum(t.response_mask) for t in trajs)


def test_greedy_logprobs_are_reported_at_temperature_one(engine, tiny_model, tiny_tokenizer,
                                                         frequent_stops):
    cfg = _config(frequent_stops, sampling=SamplingParams(temperature=0.0,
                                                          stop_token_ids=frequent_stops))
    trajs = run_episodes(engine, tiny_tokenizer, _specs(2, n_turns=2), cfg)
    for traj in trajs:
        mine, engine_lp = recompute_logprobs(tiny_model, traj, 1.0)
        assert (mine - engine_lp).abs().max().item() < 1e-4
    # greedy: both episodes see identical prompts up to the seed in the question, so same turns
    assert trajs[0].outcome.turns >= 1


def test_temperature_scaled_logprobs(engine, tiny_model, tiny_tokenizer, frequent_stops):
    cfg = _config(frequent_stops, sampling=SamplingParams(temperature=0.7, top_k=50, top_p=0.9,
                                                          stop_token_ids=frequent_stops))
    trajs = run_episodes(engine, tiny_tokenizer, _specs(3, n_turns=2), cfg)
    for traj in trajs:
        mine, engine_lp = recompute_logprobs(tiny_model, traj, 0.7)
        assert (mine - engine_lp).abs().max().item() < 1e-4


def test_group_sampling_and_determinism_by_seed(engine, tiny_tokenizer, frequent_stops):
    runner = EpisodeRunner(engine, tiny_tokenizer, _config(frequent_stops))
    tasks = _specs(2, n_turns=2)
    a = runner.run(tasks, group_size=3)
    b = runner.run(tasks, group_size=3)
    c = runner.run(tasks, group_size=3, seed=8)
    runner.close()
    assert [t.group_id for t in a] == [0, 0, 0, 1, 1, 1]
    assert len({tuple(t.prompt_ids) for t in a[:3]}) == 1
    assert len({tuple(t.response_ids) for t in a[:3]}) > 1  # different samples in a group
    assert [t.response_ids for t in a] == [t.response_ids for t in b]
    for ta, tb in zip(a, b):
        assert ta.rollout_logprobs == pytest.approx(tb.rollout_logprobs, abs=1e-5)
    assert [t.response_ids for t in a] != [t.response_ids for t in c]
    # an episode's tokens do not depend on what else runs: play task 1's group alone
    alone = EpisodeRunner(engine, tiny_tokenizer, _config(frequent_stops))
    solo = alone.run(group_specs(tasks, 3))
    assert [t.response_ids for t in solo] == [t.response_ids for t in a]


def test_env_error_and_timeout_end_only_their_episode(engine, tiny_tokenizer, frequent_stops,
                                                      caplog):
    specs = [
        EpisodeSpec(env_factory=lambda: RaisingEnv(fail_at=1), seed=11),
        EpisodeSpec(env_factory=lambda: RaisingEnv(fail_at=0), seed=12),
        EpisodeSpec(env_factory=SlowEnv, seed=13),
        EpisodeSpec(env_factory=lambda: EchoToolEnv(n_turns=1), seed=14),
    ]
    cfg = _config(frequent_stops, env_step_timeout_s=0.3, max_tokens_per_turn=40)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rlvr.agents.runner"):
        trajs = run_episodes(engine, tiny_tokenizer, specs, cfg)
    assert time.monotonic() - start < 5
    raised, reset_failed, slow, ok = trajs
    assert raised.finish_reason == "error" and "sandbox exploded" in raised.outcome.error
    assert raised.reward == 0.0 and len(raised.response_ids) > 0
    assert reset_failed.finish_reason == "error" and reset_failed.response_ids == []
    assert reset_failed.prompt_ids == [tiny_tokenizer.pad_token_id]
    assert slow.finish_reason == "timeout" and "env_step_timeout_s=0.3" in slow.outcome.error
    assert ok.finish_reason in ("stop", "length")
    assert "task echo-11" in caplog.text and "sandbox exploded" in caplog.text
    batch = RolloutBatch.from_trajectories(trajs, tiny_tokenizer.pad_token_id)  # still collates
    assert batch.valid.tolist() == [False, False, False, True]  # a timeout is never trained on
    assert not slow.passed


def test_every_env_is_closed_once_however_its_episode_ends(engine, tiny_tokenizer,
                                                            frequent_stops):
    closes = []

    def counted(cls, **kw):
        env = cls(**kw)
        env.close = lambda: closes.append(env)
        return env

    specs = [
        EpisodeSpec(env_factory=lambda: counted(EchoToolEnv, n_turns=1), seed=1),
        EpisodeSpec(env_factory=lambda: counted(NeverEndingEnv), seed=2),
        EpisodeSpec(env_factory=lambda: counted(RaisingEnv, fail_at=2), seed=3),
        EpisodeSpec(env_factory=lambda: counted(RaisingEnv, fail_at=0), seed=4),
    ]
    cfg = _config(frequent_stops, max_turns=2, max_tokens_per_turn=40)
    trajs = run_episodes(engine, tiny_tokenizer, specs, cfg)
    assert len(closes) == len({id(e) for e in closes}) == 4
    assert trajs[1].finish_reason in ("max_turns", "length")
    assert trajs[3].finish_reason == "error"


def test_reused_envs_play_the_same_episodes_as_fresh_ones(engine, tiny_tokenizer, monkeypatch):
    kwargs = {"answer_format": "plain", "system_prompt": None, "source": "arithmetic",
              "source_kwargs": {"n_tasks": 50}}
    specs = [EpisodeSpec(env_id="rlvr/Math-v0", env_kwargs=kwargs, seed=s) for s in range(4)]
    cfg = RunnerConfig(max_turns=1, max_tokens_per_turn=6, max_response_tokens=6, seed=3,
                       sampling=SamplingParams(temperature=1.0))
    fresh = [run_episodes(engine, tiny_tokenizer, specs, cfg, group_size=3, seed=k)
             for k in range(2)]
    made = []
    make_env = EpisodeSpec.make_env
    monkeypatch.setattr(EpisodeSpec, "make_env", lambda self: made.append(1) or make_env(self))
    runner = EpisodeRunner(engine, tiny_tokenizer, replace(cfg, reuse_envs=8))
    reused = [runner.run(specs, group_size=3, seed=k) for k in range(2)]
    assert len(made) == 12 + 4  # 8 envs kept after the first run (the cap), 4 made again
    assert runner._pool.idle_count() == 8
    runner.close()
    assert runner._pool.idle_count() == 0
    for a, b in zip(fresh, reused):
        for x, y in zip(a, b):
            assert (x.prompt_ids, x.response_ids, x.token_level_scores, x.finish_reason) == \
                (y.prompt_ids, y.response_ids, y.token_level_scores, y.finish_reason)


def test_token_budgets_end_with_length(engine, tiny_tokenizer, frequent_stops):
    per_turn = run_episodes(
        engine, tiny_tokenizer, _specs(2, n_turns=3),
        _config((), max_tokens_per_turn=3),  # no early stops: the turn is cut by length
    )
    for traj in per_turn:
        assert traj.finish_reason == "length"
        assert traj.outcome.turns == 1 and len(traj.response_ids) == 3
        assert traj.reward == 0.0  # the env never saw the cut-off action
    total = run_episodes(
        engine, tiny_tokenizer, _specs(3, NeverEndingEnv),
        _config(frequent_stops, max_response_tokens=30, max_turns=50),
    )
    for traj in total:
        assert traj.finish_reason == "length"
        assert len(traj.response_ids) <= 30


def test_max_turns(engine, tiny_tokenizer, frequent_stops):
    trajs = run_episodes(engine, tiny_tokenizer, _specs(2, NeverEndingEnv),
                         _config(frequent_stops, max_turns=2, max_tokens_per_turn=40))
    for traj in trajs:
        assert traj.finish_reason == "max_turns"
        assert traj.outcome.turns == 2
        assert traj.response_mask[-1] == 1


def test_config_and_spec_validation():
    with pytest.raises(RunnerConfigError, match="^max_turns must be >= 1; got 0$"):
        RunnerConfig(max_turns=0)
    with pytest.raises(RunnerConfigError, match="^reuse_envs must be >= 0; got -1$"):
        RunnerConfig(reuse_envs=-1)
    with pytest.raises(RunnerConfigError, match="^env_step_timeout_s must be > 0; got 0$"):
        RunnerConfig(env_step_timeout_s=0)
    with pytest.raises(RunnerConfigError, match="exactly one of env_id"):
        EpisodeSpec()
    with pytest.raises(RunnerConfigError, match="group_size must be an int >= 1"):
        group_specs([EpisodeSpec(env_id="x")], 0)


@pytest.mark.parametrize(("override", "message"), [
    ("rollout.runner.max_turns=0", "rollout.runner.max_turns must be >= 1; got 0"),
    ("rollout.runner.env_workers=true",
     "rollout.runner.env_workers: expected an integer; got True"),
    ("rollout.runner.reuse_envs=-1", "rollout.runner.reuse_envs must be >= 0; got -1"),
    ("rollout.sglang.servers=0", "rollout.sglang.servers must be >= 1; got 0"),
    ("rollout.sglang.weight_sync=nccl",
     "rollout.sglang.weight_sync: unknown value 'nccl'; allowed: auto, disk, distributed"),
    ("rollout.transformers.threads=0", "rollout.transformers.threads must be >= 1 or null; got 0"),
    ("rollout.runner.sampling.top_p=2",
     "rollout.runner.sampling.top_p must be in (0, 1] (1 disables it); got 2.0"),
])
def test_a_bad_agents_key_is_named_as_the_user_wrote_it(override, message):
    from rlvr.config import load_config
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value) == message
    assert err.value.key == override.partition("=")[0]

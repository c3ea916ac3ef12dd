"""The runner on the real built-in envs (rlvr/ToolUse-v0, rlvr/Code-v0)."""

from __future__ import annotations

import pytest
from agent_helpers import recompute_logprobs
from test_chat import ScriptedEngine

from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig, run_episodes

envs = pytest.importorskip("rlvr.envs")

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'


def _tokens(tok, text, eos=True):
    return tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if eos else [])


def _rendered_matches(tok, traj, tools):
    msgs = traj.metadata["messages"]
    last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    expected = tok.apply_chat_template(msgs[: last + 1], tools=tools, tokenize=False)
    got = tok.decode(traj.prompt_ids + traj.response_ids, skip_special_tokens=False)
    return expected.startswith(got) and expected[len(got):] in ("<|im_end|>\n", "\n")


def test_tool_use_episode_with_a_real_tool_call(tiny_tokenizer):
    # turn 1 writes a tool call: generation stops at </tool_call> (the scripted eos after it is
    # never reached); turn 2 answers
    engine = ScriptedEngine([_tokens(tiny_tokenizer, CALL), _tokens(tiny_tokenizer, "Answer: 5")])
    cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=80, check_token_exact=True)
    traj = run_episodes(engine, tiny_tokenizer, [EpisodeSpec(env_id="rlvr/ToolUse-v0", seed=0)],
                        cfg)[0]
    assert traj.finish_reason == "stop", traj.metadata
    assert traj.env_id == "rlvr/ToolUse-v0" and traj.task_id
    assert traj.outcome.turns == 2
    assert traj.outcome.tool_calls == 1 and traj.outcome.tool_errors == 0
    tool_msgs = [m for m in traj.metadata["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["content"].strip() == "5"
    assert traj.outcome.verdict.reason
    # the tool turn's </tool_call> is a model token; the closing <|im_end|> after it is not
    tool_end = tiny_tokenizer.convert_tokens_to_ids("</tool_call>")
    i = traj.response_ids.index(tool_end)
    assert traj.response_mask[i] == 1 and traj.response_mask[i + 1] == 0
    assert traj.response_ids[i + 1] == tiny_tokenizer.eos_token_id
    tools = envs.make("rlvr/ToolUse-v0").unwrapped.tool_schemas()
    assert _rendered_matches(tiny_tokenizer, traj, tools)


def test_code_episode_places_the_format_span(tiny_tokenizer):
    program = "```python\nprint(input())\n```"
    engine = ScriptedEngine([_tokens(tiny_tokenizer, "Here:\n" + program)])
    cfg = RunnerConfig(max_turns=1, max_tokens_per_turn=80, check_token_exact=True)
    spec = EpisodeSpec(env_id="rlvr/Code-v0", env_kwargs={"format_reward": 0.1}, seed=1)
    traj = run_episodes(engine, tiny_tokenizer, [spec], cfg)[0]
    assert traj.finish_reason == "stop", traj.metadata
    assert traj.outcome.verdict.reason
    scores = traj.token_level_scores
    nonzero = [k for k, s in enumerate(scores) if s]
    # the span covers the code block, which ends at the last action token (before eos)
    assert len(traj.response_ids) - 2 in nonzero
    assert traj.reward == pytest.approx(traj.outcome.verdict.score + 0.1)


def test_tiny_model_on_tool_use_and_code(engine, tiny_model, tiny_tokenizer, frequent_stops):
    cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=16, check_token_exact=True, seed=3,
                       sampling=SamplingParams(stop_token_ids=frequent_stops))
    runner = EpisodeRunner(engine, tiny_tokenizer, cfg)
    # one tool keeps the prompt inside the tiny model's 1024-token context
    tool_use = {"tools": ["calculator"]}
    specs = [EpisodeSpec(env_id="rlvr/ToolUse-v0", env_kwargs=tool_use, seed=i)
             for i in range(2)] + [
        EpisodeSpec(env_id="rlvr/Code-v0", seed=0)
    ]
    trajs = runner.run(specs, group_size=2)
    runner.close()
    assert len(trajs) == 6 and [t.group_id for t in trajs] == [0, 0, 1, 1, 2, 2]
    for traj in trajs:
        assert traj.finish_reason in ("stop", "length", "truncated", "max_turns")
        assert traj.metadata["n_model_tokens"] > 0
        mine, theirs = recompute_logprobs(tiny_model, traj)
        assert (mine - theirs).abs().max().item() < 1e-4

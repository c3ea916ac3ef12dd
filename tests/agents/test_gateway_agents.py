"""Agent functions as envs: the runner plays them through the gateway, token-exact.

Real pieces throughout: the transformers engine, the official ``openai.AsyncOpenAI`` client (in
process, through the gateway's ASGI app), ``EpisodeRunner``, ``RolloutBatch``.
"""

from __future__ import annotations

import asyncio
import json

import gymnasium
import pytest
import torch
from gateway_helpers import ADD_TOOL, ANSWER, QUESTION

from rlvr import envs
from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from rlvr.batch import RolloutBatch
from rlvr.envs.agent_env import AgentEnv, register_agent
from rlvr.verifiers.math import verify

TASKS = [{"id": "t0", "question": QUESTION, "answer": "5"}]


def grade(answer: str, task) -> object:
    return verify(answer, str(task["answer"]))


async def tool_agent(client, task):
    """A plain openai-client tool loop: call tools until the model answers."""
    messages = list(task.messages)
    for _ in range(4):
        reply = await client.chat.completions.create(model="policy", messages=messages,
                                                     tools=[ADD_TOOL], max_tokens=40)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": str(args["a"] + args["b"])})
    return None


async def editing_agent(client, task):
    """Rewrites the model's tool call in its history (adds a space): the tokens must split."""
    messages = list(task.messages)
    first = await client.chat.completions.create(model="policy", messages=messages,
                                                 tools=[ADD_TOOL], max_tokens=40)
    call = first.choices[0].message.tool_calls[0]
    messages += [{"role": "assistant", "content": " ", "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    second = await client.chat.completions.create(model="policy", messages=messages,
                                                  tools=[ADD_TOOL], max_tokens=40)
    return second.choices[0].message.content


async def crashing_agent(client, task):
    await client.chat.completions.create(model="policy", messages=task.messages, max_tokens=4)
    raise RuntimeError("the agent's own bug")


async def hung_agent(client, task):
    await client.chat.completions.create(model="policy", messages=task.messages, max_tokens=4)
    await asyncio.sleep(3600)


async def chatty_agent(client, task):
    while True:  # never answers: the endpoint refuses the call past max_turns
        await client.chat.completions.create(model="policy", messages=task.messages,
                                             max_tokens=4)


async def silent_agent(client, task):
    return "5"


def _spec(agent, seed=0, **kwargs):
    return EpisodeSpec(env_factory=lambda: AgentEnv(agent, source=TASKS, verifier=grade,
                                                    **kwargs), seed=seed)


def _runner(engine, tokenizer, **cfg):
    config = RunnerConfig(**{"max_turns": 4, "max_tokens_per_turn": 40,
                             "max_response_tokens": 400, "check_token_exact": True,
                             "sampling": SamplingParams(temperature=0.0), **cfg})
    return EpisodeRunner(engine, tokenizer, config)


def _teacher_forced_logprobs(model, traj):
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(traj.prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(
        -1, torch.tensor(traj.response_ids)[:, None])[:, 0]


def test_a_tool_agent_is_one_token_exact_row(tool_engine, tiny_tokenizer):
    runner = _runner(tool_engine, tiny_tokenizer)
    try:
        [traj] = runner.run([_spec(tool_agent)])
    finally:
        runner.close()
    assert traj.finish_reason == "stop" and traj.outcome.error is None
    assert traj.reward == 1.0 and traj.passed and traj.outcome.answer == "5"
    assert traj.outcome.turns == 2 and traj.outcome.tool_calls == 1
    assert traj.extra_rows == [] and traj.metadata["gateway_prefix_breaks"] == 0
    text = tiny_tokenizer.decode(traj.response_ids)
    model_text = tiny_tokenizer.decode([t for t, m in zip(traj.response_ids, traj.response_mask)
                                        if m])
    assert '"name": "add"' in model_text and ANSWER in model_text
    assert "<tool_response>\n5\n</tool_response>" in text
    assert "<tool_response>" not in model_text  # the tool's result is env tokens (mask 0)
    # the row re-renders to the engine's ids: the whole conversation through the template
    history = [{"role": "user", "content": QUESTION},
               {"role": "assistant", "content": '<tool_call>\n{"name": "add", "arguments": '
                '{"a": 2, "b": 3}}\n</tool_call>'},
               {"role": "tool", "content": "5"}, {"role": "assistant", "content": ANSWER}]
    rendered = tiny_tokenizer.apply_chat_template(history, tools=[ADD_TOOL], tokenize=True)
    rendered = list(rendered["input_ids"] if not isinstance(rendered, list) else rendered)
    assert traj.prompt_ids + traj.response_ids == rendered[:-1]  # (the template's last "\n")
    # every model token's logprob is the learner's (teacher-forced) logprob
    lp = _teacher_forced_logprobs(tool_engine.model, traj)
    mask = torch.tensor(traj.response_mask, dtype=torch.bool)
    assert torch.allclose(lp[mask], torch.tensor(traj.rollout_logprobs)[mask], atol=1e-4)
    assert all(x == 0.0 for x, m in zip(traj.rollout_logprobs, traj.response_mask) if not m)


def test_an_edited_history_splits_into_rows_sharing_the_reward(tool_engine, tiny_tokenizer):
    runner = _runner(tool_engine, tiny_tokenizer)
    try:
        [traj] = runner.run([_spec(editing_agent)])
    finally:
        runner.close()
    assert traj.finish_reason == "stop" and traj.metadata["gateway_prefix_breaks"] == 1
    assert len(traj.extra_rows) == 1
    rows = [traj, *traj.extra_rows]
    for row in rows:  # each row: one call, exactly the engine's prompt and completion
        assert row.reward == 1.0
        assert sum(row.response_mask) == len(row.response_ids)
        lp = _teacher_forced_logprobs(tool_engine.model, row)
        assert torch.allclose(lp, torch.tensor(row.rollout_logprobs), atol=1e-4)
    assert tiny_tokenizer.decode(traj.response_ids).startswith(ANSWER)
    batch = RolloutBatch.from_trajectories([traj], tiny_tokenizer.pad_token_id)
    assert batch.input_ids.shape[0] == 2 and batch.valid.all()
    assert batch.group_ids[0] == batch.group_ids[1]


def test_a_history_rewriting_template_gives_split_rows_not_drift(tool_engine, tiny_model_path):
    from transformers import AutoTokenizer

    from rlvr.agents.gateway import EpisodeLimits, Gateway, create_app
    from rlvr.agents.gateway.http import http_client_module

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    # past assistant turns (not the last message) lose their newlines, as reasoning templates
    # drop past thinking: a longer chat rewrites the earlier turns' tokens
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>",
        "<|im_start|>{{ message.role }}\n{% if message.role == 'assistant' and not loop.last %}"
        "{{ message.content | replace('\\n', ' ') }}{% else %}{{ message.content }}{% endif %}"
        "<|im_end|>")
    gateway = Gateway(tool_engine, tokenizer)
    assert gateway.templates.delta is None and "prefix-stable" in gateway.templates.delta_error
    episode = gateway.open_episode(EpisodeLimits(
        sampling=SamplingParams(temperature=0.0), max_calls=4, max_tokens_per_call=40,
        max_response_tokens=400))
    httpx = http_client_module()

    async def play():
        import openai

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(gateway)),
                                     base_url="http://gateway") as http:
            client = openai.AsyncOpenAI(
                base_url=f"http://gateway/episodes/{episode.capture.key}/v1", api_key="x",
                http_client=http, max_retries=0)
            env = AgentEnv(tool_agent, source=TASKS, verifier=grade)
            env.reset(seed=0)
            return await tool_agent(client, env.agent_task())

    assert asyncio.run(play()) == ANSWER
    capture = episode.capture
    assert capture.prefix_breaks == 1
    rows = capture.rows(1.0)
    assert len(rows) == 2
    for row in rows:
        traj = row.record.to_trajectory()
        assert traj.reward == 1.0
        lp = _teacher_forced_logprobs(tool_engine.model, traj)
        mask = torch.tensor(traj.response_mask, dtype=torch.bool)
        assert torch.allclose(lp[mask], torch.tensor(traj.rollout_logprobs)[mask], atol=1e-4)


@pytest.mark.parametrize(("agent", "reason", "error"), [
    (crashing_agent, "error", "RuntimeError: the agent's own bug"),
    (hung_agent, "error", "TimeoutError"),
    (silent_agent, "error", "made no model call"),
    (chatty_agent, "max_turns", None),
])
def test_agents_that_fail_end_their_episode(tool_engine, tiny_tokenizer, agent, reason, error):
    runner = _runner(tool_engine, tiny_tokenizer, max_turns=2)
    try:
        timeout = 1.0 if agent is hung_agent else 120.0  # (a loaded CI machine is slow)
        [traj, ok] = runner.run([_spec(agent, timeout_s=timeout), _spec(tool_agent)])
    finally:
        runner.close()
    assert traj.finish_reason == reason
    if error is None:
        assert traj.outcome.error is None and traj.outcome.turns == 2 and traj.reward == 0
    else:
        assert error in traj.outcome.error and not traj.passed
        batch = RolloutBatch.from_trajectories([traj], tiny_tokenizer.pad_token_id)
        assert not batch.valid.any() and batch.response_mask.sum() == 0
    assert ok.finish_reason == "stop" and ok.passed  # the other episode went on


def test_many_agents_run_concurrently_with_sampling(tool_engine, tiny_tokenizer):
    runner = _runner(tool_engine, tiny_tokenizer, sampling=SamplingParams(temperature=1.0))
    try:
        trajs = runner.run([_spec(tool_agent, seed=s) for s in range(3)], group_size=4, seed=7)
        again = runner.run([_spec(tool_agent, seed=s) for s in range(3)], group_size=4, seed=7)
    finally:
        runner.close()
    assert len(trajs) == 12
    assert len({t.group_id for t in trajs}) == 3
    assert all(t.finish_reason in ("stop", "max_turns", "length") for t in trajs)
    # seeded per call: the same run seed gives the same tokens
    assert [t.response_ids for t in trajs] == [t.response_ids for t in again]
    for t in trajs:
        lp = _teacher_forced_logprobs(tool_engine.model, t)
        mask = torch.tensor(t.response_mask, dtype=torch.bool)
        assert torch.allclose(lp[mask], torch.tensor(t.rollout_logprobs)[mask], atol=1e-4)


def test_register_agent_makes_an_env_id_that_check_env_accepts(tool_engine, tiny_tokenizer):
    env_id = "gatewaytest/AddAgent-v0"
    register_agent(env_id, tool_agent, source=TASKS, verifier=grade)
    try:
        assert env_id in envs.list_envs()
        env = envs.make(env_id)
        report = envs.check_env(env, raise_on_failure=False)
        assert report.passed, report.table()
        runner = _runner(tool_engine, tiny_tokenizer)
        try:
            [traj] = runner.run([EpisodeSpec(env_id=env_id, seed=0)])
        finally:
            runner.close()
        assert traj.env_id == env_id and traj.passed
        with pytest.raises(envs.EnvArgumentError, match="already registered"):
            register_agent(env_id, tool_agent, source=TASKS, verifier=grade)
    finally:
        gymnasium.registry.pop(env_id, None)


def test_an_agent_can_reuse_a_registered_envs_tasks_and_grading():
    env = AgentEnv(tool_agent, env="rlvr/Math-v0", split="test")
    messages, info = env.reset(seed=3)
    task = env.agent_task()
    assert task.messages == messages and task.task_id == info["task_id"]
    gold = str(task.fields["answer"])
    _, reward, terminated, _, info = env.step(f"\\boxed{{{gold}}}")
    assert terminated and reward == 1.0 and info["verdict"].passed
    with pytest.raises(envs.EnvArgumentError, match="either env"):
        AgentEnv(tool_agent)

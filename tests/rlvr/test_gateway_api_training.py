"""Agents written against the Responses and the Anthropic Messages APIs train through the
gateway, token-exact.

``rlvr train`` (in process, 2 steps of the quickstart on a small tiny model) plays an agent
whose only model call is ``client.responses.create``, then one that streams
``anthropic.AsyncAnthropic.messages``: every episode is played (no error rows) and the engine's
logprobs are the learner's (``rollout/logprob_diff``).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.agents.gateway.clients import anthropic_client
from rlvr.config import load_config
from rlvr.envs.agent_env import register_agent
from rlvr.trainer import train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


async def responses_agent(client, task):
    reply = await client.responses.create(model="policy", input=list(task.messages))
    return reply.output_text


async def messages_agent(client, task):
    claude = anthropic_client(client)
    system = "".join(m["content"] for m in task.messages if m["role"] == "system")
    turns = [m for m in task.messages if m["role"] != "system"]
    async with claude.messages.stream(model="policy", max_tokens=256, messages=turns,
                                      **({"system": system} if system else {})) as stream:
        return "".join([piece async for piece in stream.text_stream])


def _register(env_id: str, agent) -> None:
    if env_id not in gymnasium.registry:
        register_agent(env_id, agent, env="rlvr/Math-v0")


def _train_two_steps(tmp_path: Path, env_id: str) -> list[dict]:
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=2",
        "trainer.threads=1", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "eval.tasks=2", "eval.every=0", "trainer.checkpoint_every=0", f"env.id={env_id}",
        "env.kwargs={}", "env.eval_kwargs={}"])
    train(config, log=lambda *_: None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [m for m in rows if "rollout/logprob_diff" in m]


def test_a_responses_api_agent_trains_token_exact(tmp_path):
    _register("tests/ResponsesMath-v0", responses_agent)
    steps = _train_two_steps(tmp_path, "tests/ResponsesMath-v0")
    assert len(steps) == 2
    for m in steps:
        assert m["response/error_ratio"] == 0.0, m   # every episode played
        assert m["rollout/logprob_diff"] < 1e-3, m   # token-exact through the gateway


def test_an_anthropic_messages_agent_trains_token_exact(tmp_path):
    _register("tests/MessagesMath-v0", messages_agent)
    steps = _train_two_steps(tmp_path, "tests/MessagesMath-v0")
    assert len(steps) == 2
    for m in steps:
        assert m["response/error_ratio"] == 0.0, m
        assert m["rollout/logprob_diff"] < 1e-3, m

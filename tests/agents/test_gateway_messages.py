"""``POST /v1/messages`` through the official ``anthropic`` client: tool_use / tool_result,
streaming, refusals, and an agent whose Messages calls become one token-exact row."""

from __future__ import annotations

import anthropic
import pytest
from gateway_helpers import ADD_TOOL, ANSWER, QUESTION

from rlvr.agents.engine import SamplingParams
from rlvr.agents.gateway import Gateway
from rlvr.agents.gateway.clients import anthropic_client
from rlvr.agents.gateway.server import GatewayServer
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from rlvr.envs.agent_env import AgentEnv
from rlvr.verifiers.math import verify

TOOL = {"name": "add", "description": ADD_TOOL["function"]["description"],
        "input_schema": ADD_TOOL["function"]["parameters"], "strict": True}  # Messages' shape
USER = [{"role": "user", "content": QUESTION}]
GREEDY = {"temperature": 0}  # (anthropic 2.x's create() takes no temperature argument)


@pytest.fixture(scope="module")
def gateway(tool_engine, tiny_tokenizer):
    return Gateway(tool_engine, tiny_tokenizer, model_name="tiny", api_key="secret")


@pytest.fixture(scope="module")
def client(gateway):
    with GatewayServer(gateway) as srv:
        yield anthropic.Anthropic(base_url=srv.url.removesuffix("/v1"), api_key="secret",
                                  max_retries=0)


def _result_turn(first) -> list[dict]:
    [use] = [b for b in first.content if b.type == "tool_use"]
    return [*USER, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": str(use.input["a"] + use.input["b"])}]}]


def test_a_tool_loop_with_messages_create(client):
    first = client.messages.create(model="tiny", max_tokens=40, messages=USER, tools=[TOOL],
                                   extra_body=GREEDY)
    assert first.stop_reason == "tool_use" and first.type == "message"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "add" and use.input == {"a": 2, "b": 3}
    second = client.messages.create(model="tiny", max_tokens=40, messages=_result_turn(first),
                                    tools=[TOOL], extra_body=GREEDY)
    assert [b.type for b in second.content] == ["text"] and second.content[0].text == ANSWER
    assert second.stop_reason == "end_turn" and second.usage.output_tokens > 0


def test_stop_sequences_and_max_tokens_are_reported(client):
    cut = client.messages.create(model="tiny", max_tokens=3, messages=USER, extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    call = client.messages.create(model="tiny", max_tokens=40, messages=USER, tools=[TOOL],
                                  extra_body=GREEDY)
    first = client.messages.create(model="tiny", max_tokens=40, messages=_result_turn(call),
                                   tools=[TOOL], extra_body=GREEDY, stop_sequences=[": 5"])
    assert first.stop_reason == "stop_sequence" and first.stop_sequence == ": 5"
    assert first.content[0].text == "Answer"


def test_streamed_events_as_the_client_reads_them(client):
    with client.messages.stream(model="tiny", max_tokens=40, messages=USER, tools=[TOOL],
                                extra_body=GREEDY) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use" and first.content[-1].input == {"a": 2, "b": 3}
    with client.messages.stream(model="tiny", max_tokens=40, messages=_result_turn(first),
                                tools=[TOOL], extra_body=GREEDY) as stream:
        deltas = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(deltas) > 1 and "".join(deltas) == ANSWER == final.content[0].text
    events = list(client.messages.create(model="tiny", max_tokens=4, messages=USER, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "content_block_delta" in kinds


@pytest.mark.parametrize("fields, param", [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"tool_choice": {"type": "any"}, "tools": [TOOL]}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0]"),
    ({"top_k": 0}, "top_k"),
    ({"temperature": 1.5}, "temperature"),
    ({"presence_penalty": 1.0}, "presence_penalty"),
    ({"min_p": 0.1}, "min_p"),
    ({"messages": [*USER, {"role": "assistant", "content": "Answer:"}]}, "messages[1]"),
])
def test_what_is_not_supported_is_refused_naming_the_field(client, fields, param):
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="tiny", max_tokens=8, messages=USER, extra_body=fields)
    assert err.value.status_code == 400 and err.value.body["type"] == "error"
    assert err.value.body["error"]["message"].startswith(f"{param}: ")


def test_a_wrong_key_is_an_anthropic_authentication_error(gateway):
    with GatewayServer(gateway) as srv:
        bad = anthropic.Anthropic(base_url=srv.url.removesuffix("/v1"), api_key="wrong",
                                  max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            bad.messages.create(model="tiny", max_tokens=4, messages=USER)


async def messages_agent(client, task):
    """A Messages API tool loop: tool_use blocks out, tool_result blocks in."""
    claude = anthropic_client(client)
    messages = list(task.messages)
    for _ in range(4):
        reply = await claude.messages.create(model="policy", max_tokens=40, messages=messages,
                                             tools=[TOOL])
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id,
             "content": str(u.input["a"] + u.input["b"])} for u in uses]})
    return None


def test_a_messages_agent_is_one_token_exact_row(tool_engine, tiny_tokenizer):
    tasks = [{"id": "t0", "question": QUESTION, "answer": "5"}]
    spec = EpisodeSpec(env_factory=lambda: AgentEnv(
        messages_agent, source=tasks,
        verifier=lambda answer, task: verify(answer, task["answer"])), seed=0)
    runner = EpisodeRunner(tool_engine, tiny_tokenizer, RunnerConfig(
        max_turns=4, max_tokens_per_turn=40, max_response_tokens=400, check_token_exact=True,
        sampling=SamplingParams(temperature=0.0)))
    try:
        [traj] = runner.run([spec])
    finally:
        runner.close()
    assert traj.finish_reason == "stop" and traj.outcome.error is None and traj.reward == 1.0
    assert traj.outcome.turns == 2 and traj.outcome.tool_calls == 1
    assert traj.extra_rows == [] and traj.metadata["gateway_prefix_breaks"] == 0
    text = tiny_tokenizer.decode(traj.response_ids)
    assert "<tool_response>\n5\n</tool_response>" in text and ANSWER in text

"""``POST /v1/responses`` through the official ``openai`` client: tools, streaming, refusals, and
an agent whose Responses calls become one token-exact row (the chat completions capture)."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_helpers import ADD_TOOL, ANSWER, QUESTION

from rlvr.agents.engine import SamplingParams
from rlvr.agents.gateway import Gateway
from rlvr.agents.gateway.server import GatewayServer
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from rlvr.envs.agent_env import AgentEnv
from rlvr.verifiers.math import verify

FUNCTION = {"type": "function", **ADD_TOOL["function"]}  # the Responses API's tool shape
USER = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def gateway(tool_engine, tiny_tokenizer):
    return Gateway(tool_engine, tiny_tokenizer, model_name="tiny")


@pytest.fixture(scope="module")
def client(gateway):
    with GatewayServer(gateway) as srv:
        yield openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0)


def _tool_loop(client, **kwargs):
    first = client.responses.create(model="tiny", input=USER, tools=[FUNCTION], temperature=0,
                                    max_output_tokens=40, **kwargs)
    [call] = [item for item in first.output if item.type == "function_call"]
    items = [*USER, *[item.model_dump(exclude_none=True) for item in first.output],
             {"type": "function_call_output", "call_id": call.call_id, "output": "5"}]
    second = client.responses.create(model="tiny", input=items, tools=[FUNCTION], temperature=0,
                                     max_output_tokens=40, **kwargs)
    return first, call, second


def test_a_tool_loop_with_responses_create(client):
    first, call, second = _tool_loop(client)
    assert first.status == "completed" and first.object == "response"
    assert call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 3}
    assert second.output_text == ANSWER and second.status == "completed"
    assert second.usage.total_tokens == second.usage.input_tokens + second.usage.output_tokens


def test_responses_answers_as_chat_completions_does(client):
    chat = client.chat.completions.create(model="tiny", messages=USER, temperature=1.0, seed=3,
                                          max_tokens=8, logprobs=True)
    resp = client.responses.create(model="tiny", input=QUESTION, temperature=1.0,
                                   extra_body={"seed": 3}, max_output_tokens=8,
                                   include=["message.output_text.logprobs"])
    assert resp.output_text == chat.choices[0].message.content
    assert [x.logprob for x in resp.output[0].content[0].logprobs] == [
        x.logprob for x in chat.choices[0].logprobs.content]
    assert resp.usage.output_tokens == chat.usage.completion_tokens == 8
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


def test_streamed_events_as_the_client_reads_them(client):
    with client.responses.create(model="tiny", input=USER, tools=[FUNCTION], temperature=0,
                                 max_output_tokens=40, stream=True) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    [call] = [i for i in events[-1].response.output if i.type == "function_call"]
    items = [*USER, call.model_dump(exclude_none=True),
             {"type": "function_call_output", "call_id": call.call_id, "output": "5"}]
    with client.responses.create(model="tiny", input=items, tools=[FUNCTION], temperature=0,
                                 max_output_tokens=40, stream=True) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == ANSWER
    assert events[-1].response.output_text == ANSWER


@pytest.mark.parametrize("fields, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"tool_choice": "required", "tools": [FUNCTION]}, "tool_choice"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]"),
    ({"presence_penalty": 1.0}, "presence_penalty"),
])
def test_what_is_not_supported_is_refused_naming_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="tiny", input=QUESTION, extra_body=fields)
    assert err.value.status_code == 400 and err.value.body["param"] == param


async def responses_agent(client, task):
    """A Responses API tool loop: function_call items out, function_call_output items in."""
    items = list(task.messages)
    for _ in range(4):
        reply = await client.responses.create(model="policy", input=items, tools=[FUNCTION],
                                              max_output_tokens=40)
        items += [item.model_dump(exclude_none=True) for item in reply.output]
        calls = [item for item in reply.output if item.type == "function_call"]
        if not calls:
            return reply.output_text
        for call in calls:
            args = json.loads(call.arguments)
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": str(args["a"] + args["b"])})
    return None


def test_a_responses_agent_is_one_token_exact_row(tool_engine, tiny_tokenizer):
    tasks = [{"id": "t0", "question": QUESTION, "answer": "5"}]
    spec = EpisodeSpec(env_factory=lambda: AgentEnv(
        responses_agent, source=tasks,
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
    # the second call continued the first's tokens: one row, no re-tokenised history
    assert traj.extra_rows == [] and traj.metadata["gateway_prefix_breaks"] == 0
    text = tiny_tokenizer.decode(traj.response_ids)
    assert "<tool_response>\n5\n</tool_response>" in text and ANSWER in text

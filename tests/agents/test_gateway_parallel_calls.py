"""``parallel_tool_calls: false`` is honoured: a choice holds at most one tool call.

The model is a one-layer tiny Qwen2 taught to answer the question with two calls in one turn
(``gateway_helpers.teach_tool_use``), so a plain request gets both. With
``parallel_tool_calls: false`` (chat completions and the Responses API) or Anthropic's
``tool_choice.disable_parallel_tool_use`` the engine stops at the first call's
``</tool_call>``: the reply holds that call alone, and its tokens are the ones generated (no call
is dropped after generation, so the agent's next request continues them token-exactly).
"""

from __future__ import annotations

import copy

import anthropic
import openai
import pytest
from gateway_helpers import ADD_TOOL, QUESTION, arguments, teach_tool_use

from rlvr.agents.gateway import Gateway
from rlvr.agents.gateway.server import GatewayServer

USER = [{"role": "user", "content": QUESTION}]
TWO_CALLS = ('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n'
             '<tool_call>\n{"name": "add", "arguments": {"a": 4, "b": 5}}\n</tool_call>')


@pytest.fixture(scope="module")
def server(tiny_tokenizer):
    import torch

    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.tiny import TinyModelSpec, build_model, chat_template

    # tools as one line ("Tools: add(a, b)"): a short prompt, so teaching is cheap
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = chat_template("line")
    torch.manual_seed(0)
    spec = TinyModelSpec(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=128)
    model = build_model(spec, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    teach_tool_use(model, tokenizer, steps=80, conversations=[(USER, TWO_CALLS)])
    engine = TransformersEngine(model, tokenizer, max_batch_size=4)
    try:
        with GatewayServer(Gateway(engine, tokenizer, model_name="tiny")) as srv:
            yield srv
    finally:
        engine.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def _chat(client, **extra):
    return client.chat.completions.create(model="tiny", messages=USER, tools=[ADD_TOOL],
                                          temperature=0, max_tokens=60, **extra)


def test_a_plain_request_gets_both_calls(client):
    out = _chat(client)
    assert [arguments(c) for c in out.choices[0].message.tool_calls] == [
        {"a": 2, "b": 3}, {"a": 4, "b": 5}]


def test_parallel_tool_calls_false_stops_at_the_first_call(client):
    out = _chat(client, parallel_tool_calls=False)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert arguments(call) == {"a": 2, "b": 3}
    both = _chat(client, logprobs=True)
    one = _chat(client, parallel_tool_calls=False, logprobs=True)
    assert one.usage.completion_tokens < both.usage.completion_tokens
    first = [t.token for t in one.choices[0].logprobs.content]
    assert first == [t.token for t in both.choices[0].logprobs.content][:len(first)]
    assert first[-1] == "</tool_call>"


def test_the_responses_api_honours_it(client):
    out = client.responses.create(model="tiny", input=QUESTION, temperature=0,
                                  max_output_tokens=60, parallel_tool_calls=False,
                                  tools=[{"type": "function", **ADD_TOOL["function"]}])
    assert [item.type for item in out.output] == ["function_call"]


def test_anthropic_disable_parallel_tool_use_honours_it(server):
    client = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="unused",
                                 max_retries=0)
    tool = {"name": "add", "description": "Add two integers.",
            "input_schema": ADD_TOOL["function"]["parameters"], "strict": True}
    kwargs = {"model": "tiny", "max_tokens": 60, "tools": [tool],
              "extra_body": {"temperature": 0},  # anthropic 2.x's create() takes no temperature
              "messages": [{"role": "user", "content": QUESTION}]}
    both = client.messages.create(**kwargs)
    assert [b.type for b in both.content] == ["tool_use", "tool_use"]
    one = client.messages.create(**kwargs, tool_choice={"type": "auto",
                                                        "disable_parallel_tool_use": True})
    assert [b.type for b in one.content] == ["tool_use"] and one.stop_reason == "tool_use"


def test_a_non_boolean_is_refused_naming_the_field(client):
    with pytest.raises(openai.BadRequestError, match="'parallel_tool_calls' must be a boolean"):
        _chat(client, extra_body={"parallel_tool_calls": "no"})

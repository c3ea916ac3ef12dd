"""The gateway through the official ``openai`` client, over real HTTP, on the transformers engine.

The model is a one-layer tiny Qwen2 taught one tool conversation (``gateway_helpers``), so
greedy requests get real tool calls; sampled requests are compared with the engine called
directly (same prompt ids, same seeds: the same tokens and logprobs).
"""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from gateway_helpers import ADD_TOOL, ANSWER, QUESTION, arguments

from rlvr.agents.engine import SamplingParams
from rlvr.agents.gateway import Gateway
from rlvr.agents.gateway.http import http_client_module
from rlvr.agents.gateway.server import GatewayServer

httpx = http_client_module()
USER = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def gateway(tool_engine, tiny_tokenizer):
    return Gateway(tool_engine, tiny_tokenizer, model_name="tiny")


@pytest.fixture(scope="module")
def server(gateway):
    with GatewayServer(gateway) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_tool_loop_with_the_openai_client(client):
    first = client.chat.completions.create(model="tiny", messages=USER, tools=[ADD_TOOL],
                                           temperature=0, max_tokens=40)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "add"
    assert arguments(call) == {"a": 2, "b": 3}
    assert choice.message.content is None
    history = [*USER, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    second = client.chat.completions.create(model="tiny", messages=history, tools=[ADD_TOOL],
                                            temperature=0, max_tokens=40)
    assert second.choices[0].message.content == ANSWER
    assert second.choices[0].finish_reason == "stop"
    assert second.usage.completion_tokens > 0
    assert second.usage.total_tokens == second.usage.prompt_tokens + second.usage.completion_tokens


def test_tool_choice_none_returns_the_text(client):
    out = client.chat.completions.create(model="tiny", messages=USER, tools=[ADD_TOOL],
                                         tool_choice="none", temperature=0, max_tokens=40)
    assert out.choices[0].message.tool_calls is None
    assert out.choices[0].message.content.startswith("<tool_call>")


def test_n_choices_and_logprobs_equal_the_engine_called_directly(client, gateway, tool_engine,
                                                                  tiny_tokenizer):
    out = client.chat.completions.create(model="tiny", messages=USER, n=3, temperature=1.0,
                                         seed=11, max_tokens=6, logprobs=True)
    assert [c.index for c in out.choices] == [0, 1, 2]
    prompt = gateway.templates.render(USER, None)
    assert out.usage.prompt_tokens == len(prompt)
    stops = tuple(sorted(gateway.templates.end_ids))

    async def direct():
        return await asyncio.gather(*(tool_engine.generate(prompt, SamplingParams(
            temperature=1.0, max_new_tokens=6, stop_token_ids=stops, seed=11 + i))
            for i in range(3)))

    for choice, ref in zip(out.choices, asyncio.run(direct())):
        ids = ref.token_ids[:-1] if ref.token_ids[-1] in stops else ref.token_ids
        got = [t.logprob for t in choice.logprobs.content]
        assert got == pytest.approx(ref.logprobs[: len(ids)], abs=1e-6)
        assert choice.message.content == tiny_tokenizer.decode(ids)
    assert len({c.message.content for c in out.choices}) > 1  # different seeds, different text


def test_streaming_gives_the_same_text_and_tool_calls(client):
    kwargs = dict(model="tiny", messages=USER, temperature=1.0, seed=3, max_tokens=8)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client.chat.completions.create(**kwargs, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    tools = list(client.chat.completions.create(model="tiny", messages=USER, tools=[ADD_TOOL],
                                                temperature=0, max_tokens=40, stream=True))
    calls = [tc for c in tools if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("add", {"a": 2, "b": 3})]
    assert tools[-1].choices[0].finish_reason == "tool_calls"


def test_stop_strings_cut_the_text(client):
    out = client.chat.completions.create(model="tiny", messages=USER, tools=[ADD_TOOL],
                                         tool_choice="none", temperature=0, max_tokens=40,
                                         stop=['"arguments"'])
    assert out.choices[0].message.content == '<tool_call>\n{"name": "add", '
    assert out.choices[0].finish_reason == "stop"


def test_text_completions_take_token_ids_and_text(client, tiny_tokenizer):
    ids = tiny_tokenizer.encode("the answer is", add_special_tokens=False)
    a = client.completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=1.0,
                                  seed=5, logprobs=0)
    b = client.completions.create(model="tiny", prompt="the answer is", max_tokens=5,
                                  temperature=1.0, seed=5)
    assert a.choices[0].text == b.choices[0].text
    assert len(a.choices[0].logprobs.token_logprobs) == a.usage.completion_tokens
    assert a.usage.prompt_tokens == len(ids)


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": USER}, "model"),
    ({"model": "tiny", "messages": []}, "messages"),
    ({"model": "tiny", "messages": "hi"}, "messages"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "user"}]}, "messages[0].content"),
    ({"model": "tiny", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"model": "tiny", "messages": USER, "n": 0}, "n"),
    ({"model": "tiny", "messages": USER, "n": "2"}, "n"),
    ({"model": "tiny", "messages": USER, "temperature": 5}, "temperature"),
    ({"model": "tiny", "messages": USER, "top_p": 0}, "top_p"),
    ({"model": "tiny", "messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny", "messages": USER, "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"model": "tiny", "messages": USER, "stop": [1]}, "stop"),
    ({"model": "tiny", "messages": USER, "seed": 1.5}, "seed"),
    ({"model": "tiny", "messages": USER, "tools": [{"type": "function"}]}, "tools[0]"),
    ({"model": "tiny", "messages": USER, "tool_choice": "sometimes"}, "tool_choice"),
    ({"model": "tiny", "messages": USER, "top_logprobs": 3}, "top_logprobs"),
    ({"model": "tiny", "messages": USER, "presence_penalty": 1}, "presence_penalty"),
    ({"model": "tiny", "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "add", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
])
def test_malformed_chat_requests_get_400_naming_the_field(server, body, param):
    r = httpx.post(f"{server.url}/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"null", b""])
def test_bodies_that_are_not_objects_get_400(server, raw):
    r = httpx.post(f"{server.url}/chat/completions", content=raw, timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()


def test_other_errors_are_openai_error_objects(server, client, tiny_tokenizer):
    r = httpx.get(f"{server.url}/nothing-here", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(f"{server.url}/chat/completions", timeout=30)
    assert r.status_code == 405 and "error" in r.json()
    r = httpx.post(f"{server.url}/completions", timeout=30,
                   json={"model": "tiny", "prompt": [len(tiny_tokenizer) + 50], "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_prompt"
    r = httpx.post(server.url.replace("/v1", "/episodes/nope/v1/chat/completions"), timeout=30,
                   json={"model": "tiny", "messages": USER})
    assert r.status_code == 404 and r.json()["error"]["code"] == "episode_not_found"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="tiny", messages=USER, temperature=9)


def test_an_api_key_is_required_when_set(tool_engine, tiny_tokenizer):
    with GatewayServer(Gateway(tool_engine, tiny_tokenizer, api_key="sesame")) as srv:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url, api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=srv.url, api_key="sesame", max_retries=0)
        assert ok.models.list().data[0].id == "rlvr"


def test_pydantic_ai_runs_its_tool_loop_through_the_gateway(server):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("tiny", provider=OpenAIProvider(base_url=server.url, api_key="x"))
    agent = Agent(model)
    seen = []

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    result = agent.run_sync(QUESTION, model_settings={"temperature": 0.0, "max_tokens": 40})
    assert seen == [(2, 3)]
    assert result.output == ANSWER


def test_a_client_that_connects_once_the_url_is_known_is_answered(gateway):
    """``rlvr serve`` prints the URL before uvicorn's loop runs: a client connecting in between
    must wait in the listen queue and be answered, never be refused (the socket listens from
    construction, not from the loop's start)."""
    import socket

    srv = GatewayServer(gateway)
    try:
        early = socket.create_connection((srv.host, srv.port), timeout=5)  # refused if unlistened
        early.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        srv.start()
        early.settimeout(30)
        reply = b""
        while chunk := early.recv(65536):
            reply += chunk
        early.close()
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert b'"tiny"' in reply
    finally:
        srv.stop()

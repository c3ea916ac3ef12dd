"""What a real OpenAI-compatible server guarantees, on the gateway over real HTTP.

vLLM and SGLang refuse what they cannot do and keep serving everyone while one client misbehaves;
so does the gateway: a prompt past the context is a 400 naming the limit, a huge body a 413, a
long prompt's rendering never stalls other clients, a client that hangs up stops its
generation, every field that would change the tokens is honoured or refused, and the text,
usage and logprobs describe the same tokens.
"""

from __future__ import annotations

import asyncio
import threading
import time

import openai
import pytest
from gateway_helpers import ADD_TOOL, QUESTION

from rlvr.agents.gateway import Gateway, GatewayHTTPError
from rlvr.agents.gateway.http import http_client_module
from rlvr.agents.gateway.render import Templates
from rlvr.agents.gateway.server import GatewayServer
from rlvr.agents.gateway.service import engine_context

httpx = http_client_module()
USER = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def server(tool_engine, tiny_tokenizer):
    with GatewayServer(Gateway(tool_engine, tiny_tokenizer, model_name="tiny")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def _post(server, body, path="/chat/completions", timeout=120.0):
    return httpx.post(f"{server.url}{path}", json=body, timeout=timeout)


def test_a_prompt_past_the_context_is_a_400_naming_the_limit(server, tool_engine):
    ctx = engine_context(tool_engine)
    assert ctx == tool_engine.model.config.max_position_embeddings == 1024
    r = _post(server, {"model": "tiny", "messages": USER, "max_tokens": ctx})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert str(ctx) in error["message"]
    long = [{"role": "user", "content": "7 " * ctx}]
    r = _post(server, {"model": "tiny", "messages": long, "max_tokens": 1})
    assert r.status_code == 400 and str(ctx) in r.json()["error"]["message"], r.text
    r = _post(server, {"model": "tiny", "prompt": [5] * (ctx + 1), "max_tokens": 1},
              path="/completions")
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_a_body_over_the_cap_is_a_413(tool_engine, tiny_tokenizer):
    gateway = Gateway(tool_engine, tiny_tokenizer, max_body_bytes=10_000)
    with GatewayServer(gateway) as srv:
        big = [{"role": "user", "content": "x" * 20_000}]
        r = _post(srv, {"model": "m", "messages": big, "max_tokens": 1})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

        def chunks():  # no content-length: the cap holds on the streamed body too
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(30):
                yield b"x" * 1000
            yield b'"}]}'

        r = httpx.post(f"{srv.url}/chat/completions", content=chunks(), timeout=60,
                       headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        r = _post(srv, {"model": "m", "messages": USER, "max_tokens": 1})
        assert r.status_code == 200


@pytest.fixture
def slow_long_renders(tiny_tokenizer, monkeypatch):
    """Rendering a conversation with a long message blocks its thread for 1.5 s (a big prompt on
    a slow tokenizer), whatever this machine's speed: where the rendering runs shows in what
    else runs meanwhile."""
    render = tiny_tokenizer.apply_chat_template

    def slow(conversation, *args, **kwargs):
        if any(len(str(m.get("content") or "")) > 10_000 for m in conversation):
            time.sleep(1.5)
        return render(conversation, *args, **kwargs)

    monkeypatch.setattr(tiny_tokenizer, "apply_chat_template", slow)


def test_a_long_prompt_does_not_stall_other_clients(server, slow_long_renders):
    """While a long prompt renders (1.5 s here), /health keeps answering.

    (The prompt is then refused: it is past the context.) With the rendering on the event loop,
    every other request waits for it: one ping at most would complete meanwhile.
    """
    long = [{"role": "user", "content": "hello world 123 " * 20_000}]
    done: dict[str, float] = {}

    def big():
        t0 = time.monotonic()
        r = _post(server, {"model": "tiny", "messages": long, "max_tokens": 1})
        done["big"] = time.monotonic() - t0
        done["status"] = r.status_code

    pings = []
    with httpx.Client(timeout=120) as ping:
        ping.get(server.url.replace("/v1", "/health"))
        thread = threading.Thread(target=big)
        thread.start()
        while thread.is_alive():
            r = ping.get(server.url.replace("/v1", "/health"))
            if thread.is_alive():
                pings.append(r.status_code)
        thread.join()
    assert done["status"] == 400 and done["big"] > 1.0, done
    assert len(pings) >= 5 and set(pings) == {200}, (pings, done)


class _InFlight:
    """The real engine, counting the generate calls that have not returned (a spy, no mock)."""

    def __init__(self, engine):
        self.engine = engine
        self.max_context = engine.max_context
        self.active = 0

    async def generate(self, prompt_ids, sampling):
        self.active += 1
        try:
            return await self.engine.generate(prompt_ids, sampling)
        finally:
            self.active -= 1


def test_a_client_that_disconnects_stops_its_generation(engine, tiny_tokenizer):
    spy = _InFlight(engine)
    with GatewayServer(Gateway(spy, tiny_tokenizer)) as srv:
        body = {"model": "m", "messages": USER, "max_tokens": 900, "n": 8, "temperature": 1.0,
                "seed": 1}
        with pytest.raises(httpx.TimeoutException):
            r = _post(srv, body, timeout=1.0)
            raise AssertionError(f"answered before the client gave up: {r.text[:300]}")
        deadline = time.monotonic() + 5
        while spy.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spy.active == 0  # 8 x 900 tokens take far longer than that on this model
        r = _post(srv, {"model": "m", "messages": USER, "max_tokens": 2})
        assert r.status_code == 200


@pytest.mark.parametrize(("field", "value"), [
    ("top_k", 0), ("min_p", 0.1), ("repetition_penalty", 1.2), ("min_tokens", 5),
    ("ignore_eos", True), ("best_of", 2), ("modalities", ["text", "audio"]),
    ("functions", [{"name": "add", "parameters": {"type": "object"}}]),
    ("function_call", {"name": "add"}), ("stop_token_ids", [5]), ("reasoning_effort", "high"),
    ("guided_json", {"type": "object"}), ("skip_special_tokens", False),
])
def test_fields_that_change_the_tokens_are_refused_naming_them(server, field, value):
    r = _post(server, {"model": "tiny", "messages": USER, "max_tokens": 2, field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_neutral_values_pass_and_top_k_is_honoured(client):
    ok = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=8, temperature=0,
        extra_body={"min_p": 0, "repetition_penalty": 1.0, "best_of": 1, "ignore_eos": False,
                    "modalities": ["text"]})
    greedy = ok.choices[0].message
    for seed in (1, 2, 3):  # top_k=1 at temperature 1 is greedy
        out = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                             temperature=1.0, seed=seed, extra_body={"top_k": 1})
        assert out.choices[0].message == greedy


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"tools": [ADD_TOOL], "tool_choice": {"type": "function", "function": {"name": "mul"}}},
     "tool_choice", None),
    ({"tools": [ADD_TOOL, ADD_TOOL]}, "tools[1].function.name", None),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "string"}}}]}, "tools[0].function.parameters", None),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": [1]}}}]}, "tools[0].function.parameters", None),
    ({"tools": [ADD_TOOL], "tool_choice": "required"}, "tool_choice", "unsupported_tool_choice"),
    ({"tools": [ADD_TOOL], "tool_choice": {"type": "function", "function": {"name": "add"}}},
     "tool_choice", "unsupported_tool_choice"),
])
def test_tool_choice_and_tools_are_validated(server, body, param, code):
    r = _post(server, {"model": "tiny", "messages": USER, "max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["code"] == code, error


def test_deeply_nested_json_is_a_400(server):
    raw = b'{"model": "tiny", "messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    r = httpx.post(f"{server.url}/chat/completions", content=raw, timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "nested" in r.json()["error"]["message"]


def test_health_model_routes_and_an_unknown_model(tool_engine, tiny_tokenizer):
    with GatewayServer(Gateway(tool_engine, tiny_tokenizer, model_name="tiny",
                               strict_model=True)) as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        assert c.models.retrieve("tiny").id == "tiny"
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("gpt-4o")
        with pytest.raises(openai.NotFoundError, match="does not exist") as caught:
            c.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=2)
        assert caught.value.body["code"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            c.completions.create(model="gpt-4o", prompt="hi", max_tokens=2)
        assert httpx.get(srv.url.replace("/v1", "/health"), timeout=30).status_code == 200
    # outside rlvr serve (training episodes, tests) any model name is served
    with GatewayServer(Gateway(tool_engine, tiny_tokenizer, model_name="tiny")) as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        assert c.chat.completions.create(model="policy", messages=USER, max_tokens=2).choices


def test_special_tokens_never_reach_the_text(tiny_tokenizer):
    t = Templates(tiny_tokenizer)
    words = tiny_tokenizer.encode("12 + 7", add_special_tokens=False)
    special = [tiny_tokenizer.convert_tokens_to_ids(x) for x in tiny_tokenizer.all_special_tokens]
    text, n, stopped = t.reply_text([*words[:2], *special, *words[2:], special[0]], ())
    assert text == "12 + 7" and not stopped
    assert n == len(words) + len(special)


def test_usage_counts_the_tokens_the_logprobs_list(client):
    for kwargs in ({}, {"stop": ["5"]}, {"max_tokens": 3}):
        out = client.chat.completions.create(
            model="tiny", messages=USER, temperature=0, logprobs=True, n=2,
            **{"max_tokens": 40, **kwargs})
        listed = sum(len(c.logprobs.content) for c in out.choices)
        assert out.usage.completion_tokens == listed, (kwargs, out)
    done = client.chat.completions.create(model="tiny", messages=USER, temperature=0,
                                          logprobs=True, max_tokens=40,
                                          tools=[ADD_TOOL])
    assert done.choices[0].finish_reason == "tool_calls"
    assert done.usage.completion_tokens == len(done.choices[0].logprobs.content)


def test_the_event_loop_is_free_while_the_template_renders(tool_engine, tiny_tokenizer,
                                                           slow_long_renders):
    """In-process (the training path): a chat call's rendering runs off the event loop."""
    gateway = Gateway(tool_engine, tiny_tokenizer)
    seen = []

    async def main():
        from rlvr.agents.gateway.protocol import parse_chat

        req = parse_chat({"model": "m", "max_tokens": 1, "messages": [
            {"role": "user", "content": "hello world 123 " * 4000}]})
        task = asyncio.ensure_future(gateway.chat(req, None))
        while not task.done():
            seen.append(time.monotonic())
            await asyncio.sleep(0.01)
        return task.exception()

    error = asyncio.run(main())
    assert isinstance(error, GatewayHTTPError) and error.code == "context_length_exceeded"
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    assert len(seen) > 20 and max(gaps) < 0.5, (len(seen), max(gaps, default=None))

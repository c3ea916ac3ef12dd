"""The vLLM engine's parts that need no vLLM: options, the wire format, and what it refuses.

The real server is tests/agents/test_vllm_real.py; here an attached "server" that lacks vLLM's
dev-mode routes is a real HTTP server on 127.0.0.1 answering 404, as vLLM does without
``VLLM_SERVER_DEV_MODE=1``.
"""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest

from rlvr.agents.engine import SamplingParams, VersionedEngine
from rlvr.agents.engine_registry import EngineRequest, build_engine
from rlvr.agents.errors import EngineConfigError, EngineError, VLLMError
from rlvr.agents.vllm import VLLMEngine, VLLMOptions
from rlvr.agents.vllm.wire import generate_payload, parse_generate, token_versions


@pytest.fixture()
def not_dev_mode():
    """A real HTTP server on 127.0.0.1 that answers every route 404, like a vLLM server
    started without dev mode answers /server_info and /collective_rpc."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_error(404)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_options_are_checked_with_their_keys():
    with pytest.raises(EngineConfigError, match="weight_sync") as err:
        VLLMOptions(weight_sync="nccl")
    assert err.value.key == "weight_sync"
    with pytest.raises(EngineConfigError, match="servers=2 launches") as err:
        VLLMOptions(url="http://127.0.0.1:1", servers=2)
    with pytest.raises(EngineConfigError, match="server_urls needs url"):
        VLLMOptions(server_urls=["http://127.0.0.1:1"])


def test_the_training_config_names_the_dotted_key():
    from rlvr.config import load_config
    from rlvr.errors import ConfigError

    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm.url=http://127.0.0.1:8100"])
    assert cfg.rollout.engine_options == VLLMOptions(url="http://127.0.0.1:8100")
    with pytest.raises(ConfigError, match="rollout.vllm.weight_sync"):
        load_config(None, ["rollout.vllm.weight_sync=ipc"])


def test_the_payload_sends_token_ids_and_asks_for_ids_and_logprobs():
    sampling = SamplingParams(temperature=0.7, max_new_tokens=9, stop_token_ids=(3,),
                              stop=("\n",), seed=5)
    body = generate_payload("m", [1, 2, 3], sampling, 4)
    params = body["sampling_params"]
    assert body["token_ids"] == [1, 2, 3] and body["output_mode"] == "tokens"
    assert params["max_tokens"] == 4 and params["seed"] == 5 and params["logprobs"] == 0
    assert params["include_stop_str_in_output"] is True and params["stop_token_ids"] == [3]
    assert "seed" not in generate_payload("m", [1], SamplingParams(), 1)["sampling_params"]
    assert generate_payload("m", [1], SamplingParams(), 1, lora_name="a1")["model"] == "a1"


def _answer(ids, logprobs, **choice):
    content = [{"token_id": t, "logprob": lp, "top_logprobs": []} for t, lp in zip(ids, logprobs)]
    return {"choices": [{"token_ids": ids, "logprobs": {"content": content}, **choice}]}


def test_answers_are_parsed_or_refused():
    ok = _answer([4, 2], [-0.5, -1.0], finish_reason="stop", stop_reason=2,
                 weight_versions=[{"version": "3", "start": 0, "end": 1},
                                  {"version": "4", "start": 1, "end": 2}])
    out = parse_generate(ok)
    assert (out.token_ids, out.logprobs, out.finish_reason) == ([4, 2], [-0.5, -1.0], "stop")
    assert token_versions(out) == [3, 4]
    assert token_versions(parse_generate(_answer([4], [-0.5], finish_reason="length"))) == [-1]
    assert parse_generate(_answer([], [], finish_reason="abort")).finish_reason == "abort"
    with pytest.raises(EngineError, match="malformed"):
        parse_generate({"choices": []})
    with pytest.raises(EngineError, match="2 token ids but logprobs of 1"):
        parse_generate(_answer([4, 2], [-0.5]))


def test_top_p_and_top_k_are_refused_before_any_request():
    engine = VLLMEngine("http://127.0.0.1:1")
    try:
        for sampling in (SamplingParams(top_p=0.9), SamplingParams(top_k=5)):
            with pytest.raises(VLLMError, match="renormalised"):
                asyncio.run(engine.generate([1, 2], sampling))
    finally:
        engine.close()


def test_a_server_without_dev_mode_is_refused_on_attach(not_dev_mode):
    engine = VLLMEngine(not_dev_mode)
    try:
        with pytest.raises(VLLMError, match="VLLM_SERVER_DEV_MODE=1"):
            asyncio.run(engine.generate([1, 2], SamplingParams()))
        with pytest.raises(VLLMError, match="VLLM_SERVER_DEV_MODE=1"):
            engine.update_weights([])
    finally:
        engine.close()


def test_launching_is_refused_with_several_trainer_ranks(tiny_model_path):
    with pytest.raises(EngineConfigError, match="2 trainer ranks"):
        build_engine(EngineRequest(engine="vllm", model_path=tiny_model_path, world_size=2))


def test_the_engine_records_versions_and_takes_updates_in_flight():
    """A ``VersionedEngine`` every rank shares (``SharedEngine``): the asynchronous trainer
    accepts rollout.inflight_update with it (tests/agents/test_vllm_real.py runs them)."""
    from rlvr.agents.engine import SharedEngine
    from rlvr.training.async_rollout import AsyncRollout

    engine = VLLMEngine("http://127.0.0.1:1")
    try:
        assert isinstance(engine, VersionedEngine) and isinstance(engine, SharedEngine)
        for inflight in ("continue", "abort"):
            AsyncRollout(lambda *a: None, lambda *a: None, max_staleness=1, first_step=1,
                         last_step=2, first_position=0, prompts_per_step=1, version=0,
                         engine=engine, inflight=inflight)
    finally:
        engine.close()

"""Contract test of SGLangEngine against a loopback server speaking SGLang's native HTTP API.

The server below checks every request against the documented wire format (sglang 0.5.23,
reference/sglang-http-api.md) and, like sglang, rejects unknown keys with HTTP 400; it answers
``/generate`` with real tokens and logprobs from the TransformersEngine on the tiny model. This is
a contract test, not SGLang itself: tests/gpu/test_sglang_gpu.py runs the real server on a GPU.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
import torch.distributed as dist

from agents.engine import SamplingParams
from agents.errors import MissingDependencyError, SGLangError
from agents.hf_engine import TransformersEngine
from agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from agents.sglang_engine import SGLangEngine

GENERATE_KEYS = {"input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len",
                 "top_logprobs_num", "stream", "rid"}
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
                 "stop_token_ids", "ignore_eos", "skip_special_tokens", "no_stop_trim", "n",
                 "sampling_seed"}
ADMIN_KEYS = {
    "/update_weights_from_disk": {"model_path", "load_format", "flush_cache", "weight_version"},
    "/init_weights_update_group": {"master_address", "master_port", "rank_offset", "world_size",
                                   "group_name", "backend"},
    "/update_weights_from_distributed": {"names", "dtypes", "shapes", "group_name",
                                         "flush_cache", "weight_version"},
    "/release_memory_occupation": {"tags"},
    "/resume_memory_occupation": {"tags"},
    "/flush_cache": set(),
}


class GlooGroup:
    """One rank of a gloo group built straight from a TCPStore (both ends live in this process)."""

    def __init__(self, *, backend, init_method, world_size, rank, group_name):
        host, port = init_method.removeprefix("tcp://").rsplit(":", 1)
        store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0,
                              timeout=timedelta(seconds=30))
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore(group_name, store), rank, world_size,
                                        timedelta(seconds=30))

    def broadcast(self, tensor):
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()


class FakeSGLang:
    def __init__(self, engine: TransformersEngine):
        self.engine = engine
        self.calls: list[tuple[str, dict]] = []
        self.group: GlooGroup | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._reply(200 if self.path == "/health" else 404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append((self.path, body))
                try:
                    status, answer = fake.handle(self.path, body)
                except ValueError as exc:
                    status, answer = 400, {"error": {"message": str(exc)}}
                self._reply(status, answer)

            def _reply(self, status, answer):
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, path, body):
        if path == "/generate":
            return 200, self.generate(body)
        if path not in ADMIN_KEYS:
            return 404, {"error": "not found"}
        unknown = set(body) - ADMIN_KEYS[path]
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        if path == "/flush_cache":
            return 200, "Cache flushed."
        if path == "/update_weights_from_disk":
            self.engine.update_weights(body["model_path"])
        elif path == "/init_weights_update_group":
            assert body["rank_offset"] == 1 and body["world_size"] == 2
            self.group = GlooGroup(backend="gloo", init_method=f"tcp://{body['master_address']}:"
                                   f"{body['master_port']}", world_size=body["world_size"],
                                   rank=body["rank_offset"], group_name=body["group_name"])
        elif path == "/update_weights_from_distributed":
            tensors = []
            for dtype, shape in zip(body["dtypes"], body["shapes"]):
                t = torch.empty(shape, dtype=getattr(torch, dtype))
                self.group.broadcast(t)
                tensors.append(t)
            self.engine.update_weights(list(zip(body["names"], tensors)))
        return 200, {"success": True, "message": "ok"}

    def generate(self, body):
        unknown = set(body) - GENERATE_KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        sp = body.get("sampling_params", {})
        bad = set(sp) - SAMPLING_KEYS
        if bad:
            raise ValueError(f"unknown sampling_params {sorted(bad)}")
        ids = body["input_ids"]
        if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise ValueError("input_ids must be a list of ints")
        if body.get("return_logprob") is not True or body.get("logprob_start_len") != -1:
            raise ValueError("the agent contract needs return_logprob and logprob_start_len -1")
        sampling = SamplingParams(
            temperature=sp.get("temperature", 1.0), top_p=sp.get("top_p", 1.0),
            top_k=sp.get("top_k", -1), max_new_tokens=sp.get("max_new_tokens", 128),
            stop_token_ids=tuple(sp.get("stop_token_ids", ())), stop=tuple(sp.get("stop", ())),
            seed=sp.get("sampling_seed"),
        )
        out = asyncio.run(self.engine.generate(ids, sampling))
        finish = ({"type": "stop", "matched": out.token_ids[-1]} if out.finish_reason == "stop"
                  else {"type": "length", "length": len(out.token_ids)})
        return {
            "output_ids": out.token_ids,
            "meta_info": {
                "id": "r", "finish_reason": finish, "prompt_tokens": len(ids),
                "completion_tokens": len(out.token_ids), "cached_tokens": 0,
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(out.logprobs,
                                                                         out.token_ids)],
            },
        }

    def close(self):
        self.server.shutdown()


@pytest.fixture()
def fake(tiny_model_path):
    eng = TransformersEngine(tiny_model_path)
    server = FakeSGLang(eng)
    yield server
    server.close()
    eng.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_generate_speaks_the_wire_format_and_matches_the_local_engine(fake, engine):
    sg = SGLangEngine(fake.url)
    sg.wait_healthy(10)
    sp = SamplingParams(temperature=0.9, top_k=40, max_new_tokens=6, seed=5, stop=("zz",),
                        stop_token_ids=(7,))
    remote = asyncio.run(sg.generate([5, 6, 7, 8], sp))
    local = asyncio.run(engine.generate([5, 6, 7, 8], sp))
    assert remote.token_ids == local.token_ids
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert remote.finish_reason == local.finish_reason
    path, body = fake.calls[-1]
    assert path == "/generate" and body["sampling_params"]["sampling_seed"] == 5
    assert "seed" not in body["sampling_params"]
    sg.close()


def test_runner_on_sglang_engine(fake, tiny_tokenizer, frequent_stops):
    from agent_helpers import EchoToolEnv

    sg = SGLangEngine([fake.url, fake.url])  # round-robin over two "servers"
    cfg = RunnerConfig(max_turns=3, max_tokens_per_turn=10, check_token_exact=True,
                       sampling=SamplingParams(stop_token_ids=frequent_stops), seed=1)
    trajs = EpisodeRunner(sg, tiny_tokenizer, cfg).run(
        [EpisodeSpec(env_factory=EchoToolEnv, seed=i) for i in range(3)]
    )
    assert all(t.finish_reason in ("stop", "length") for t in trajs)
    tool_end = tiny_tokenizer.convert_tokens_to_ids("</tool_call>")
    sent = [b["sampling_params"] for p, b in fake.calls if p == "/generate"]
    assert all(tool_end in s["stop_token_ids"] for s in sent)
    sg.close()


def test_weights_memory_and_cache_calls(fake, tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    sg = SGLangEngine(fake.url)
    sp = SamplingParams(temperature=0, max_new_tokens=5)
    before = asyncio.run(sg.generate([5, 6, 7], sp))
    other = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    other.save_pretrained(tmp_path / "step-1")
    sg.update_weights(str(tmp_path / "step-1"), weight_version="step-1")
    after_disk = asyncio.run(sg.generate([5, 6, 7], sp))
    assert after_disk.logprobs != before.logprobs
    # NCCL path (gloo here): init the group, then broadcast the original weights back
    original = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.init_weight_update_group("127.0.0.1", _free_port(), backend="gloo",
                                group_factory=GlooGroup)
    sg.update_weights(original.named_parameters())
    restored = asyncio.run(sg.generate([5, 6, 7], sp))
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-6)
    sg.release_memory()
    sg.resume_memory(["weights"])
    sg.flush_cache()
    paths = [p for p, _ in fake.calls]
    assert paths[-3:] == ["/release_memory_occupation", "/resume_memory_occupation",
                          "/flush_cache"]
    dist_body = dict(fake.calls)["/update_weights_from_distributed"]
    assert dist_body["dtypes"][0] == "float32" and dist_body["group_name"] == "weight_update_group"
    sg.close()


def test_errors_are_clear(fake):
    sg = SGLangEngine(fake.url)
    with pytest.raises(SGLangError, match="needs init_weight_update_group"):
        sg.update_weights([("model.norm.weight", torch.zeros(3))])
    with pytest.raises(SGLangError, match="HTTP 400: .*unknown keys \\['bogus'\\]"):
        sg._post(fake.url, "/flush_cache", {"bogus": 1})
    dead = SGLangEngine(f"http://127.0.0.1:{_free_port()}", request_timeout_s=2)
    with pytest.raises(SGLangError, match="failed"):
        asyncio.run(dead.generate([1, 2], SamplingParams()))
    sg.close()
    dead.close()


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed")
def test_launch_without_sglang_says_how_to_install():
    with pytest.raises(MissingDependencyError, match="pip install 'rlvr\\[sglang\\]'"):
        SGLangEngine.launch("/nonexistent")

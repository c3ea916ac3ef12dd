"""Contract tests of SGLangEngine against the loopback stand-in (tests/agents/sglang_standin.py).

The stand-in behaves like sglang 0.5.23 on each point below; what CPU sglang can run is tested
against the real server in test_sglang_real.py. Each test names the issue-11 point it pins.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import tomllib
import torch
import torch.distributed as dist
from sglang_standin import FakeSGLang, json_body

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import MissingDependencyError, SGLangError
from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from rlvr.agents.sglang import SGLangEngine
from rlvr.agents.sglang.server_process import launch_command, launch_env
from rlvr.agents.sglang.weights import bracket_host, buckets


@pytest.fixture()
def make_fake(tiny_model_path):
    made = []

    def make(**kw):
        fake = FakeSGLang(tiny_model_path, **kw)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.close()


@pytest.fixture()
def fake(make_fake):
    return make_fake()


def _engine(fake_or_url, **kw):
    url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.url
    return SGLangEngine(url, **kw)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _perturbed(tiny_model_path, scale=1.5):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


GREEDY = SamplingParams(temperature=0, max_new_tokens=5)


def test_generate_speaks_the_wire_format_and_matches_the_local_engine(fake, engine):
    sg = _engine(fake)
    sg.wait_healthy(10)
    sp = SamplingParams(temperature=0.9, top_k=40, max_new_tokens=6, seed=5, stop=("zz",),
                        stop_token_ids=(7,))
    remote = asyncio.run(sg.generate([5, 6, 7, 8], sp))
    local = asyncio.run(engine.generate([5, 6, 7, 8], sp))
    assert remote.token_ids == local.token_ids
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert remote.finish_reason == local.finish_reason
    body = json_body(fake, "/generate")[-1]
    assert body["sampling_params"]["sampling_seed"] == 5 and "seed" not in body["sampling_params"]
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
    sent = [b["sampling_params"] for b in json_body(fake, "/generate")
            if b["sampling_params"].get("max_new_tokens", 0) > 1]
    assert sent and all(tool_end in s["stop_token_ids"] for s in sent)
    sg.close()


# ---------------------------------------------------------------- 1. buckets, dtype, disk bf16
def test_tensor_updates_go_in_buckets_within_server_memory(make_fake, tiny_model_path):
    """Point 1: one request per bucket, each under the server's per-update memory; cast to the
    server's dtype. The stand-in fails a request over its memory like an OOM'd server."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    total = sum(t.numel() * 4 for t in model.state_dict().values())
    fake = make_fake(memory_limit_bytes=total // 3, device="cpu")
    sg = _engine(fake, bucket_bytes=total // 4)
    before = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    sg.update_weights(_perturbed(tiny_model_path).state_dict().items())
    changed = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    assert changed.logprobs != before.logprobs
    sg.update_weights(model.state_dict().items())
    restored = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-6)
    reqs = fake.dist_requests
    assert len(reqs) >= 2 * 4  # two updates, >= 4 buckets each
    for body in reqs:
        size = sum(torch.empty(0, dtype=getattr(torch, d)).element_size() * torch.Size(s).numel()
                   for d, s in zip(body["dtypes"], body["shapes"]))
        assert size <= total // 3
    init = json_body(fake, "/init_weights_update_group")
    assert len(init) == 1 and init[0]["backend"] == "gloo"  # a CPU server gets gloo
    # without buckets (old behaviour: everything in one request) the server runs out of memory
    sg.bucket_bytes = 1 << 40
    with pytest.raises(SGLangError, match="out of memory"):
        sg.update_weights(model.state_dict().items())
    sg.close()


def test_updates_are_cast_to_a_bf16_servers_dtype(make_fake, tiny_model_path):
    from transformers import AutoModelForCausalLM

    fake = make_fake(dtype="bfloat16", device="cpu")
    sg = _engine(fake, bucket_bytes=1 << 20)
    assert sg.dtype == torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.update_weights(model.state_dict().items())
    dtypes = {d for body in fake.dist_requests for d in body["dtypes"]}
    assert dtypes == {"bfloat16"}
    sg.close()


def test_disk_sync_writes_bf16_shards_in_buckets(make_fake, tiny_model_path, tmp_path):
    """Point 1 (fallback): the disk path writes the server's dtype (bf16), not fp32, in shards."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    fake = make_fake(dtype="bfloat16")
    sg = _engine(fake, weight_sync="disk", sync_dir=tmp_path / "sync", bucket_bytes=1 << 18)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.update_weights(model.state_dict().items(), weight_version="step-1")
    shards = sorted((tmp_path / "sync").glob("*.safetensors"))
    assert len(shards) >= 2
    names = set()
    for shard in shards:
        with safe_open(str(shard), "pt") as f:
            for key in f.keys():  # noqa: SIM118
                assert f.get_tensor(key).dtype == torch.bfloat16
                names.add(key)
    assert names == set(model.state_dict())
    body = json_body(fake, "/update_weights_from_disk")[-1]
    assert body == {"model_path": str(tmp_path / "sync"), "flush_cache": True,
                    "weight_version": "step-1"}
    sg.close()


def test_buckets_respect_the_byte_limit_and_keep_order():
    tensors = [(f"t{i}", torch.ones(n)) for i, n in enumerate([10, 10, 30, 5, 5, 5])]
    got = list(buckets(tensors, max_bytes=25 * 2, dtype=torch.bfloat16))
    assert [[n for n, _ in b] for b in got] == [["t0", "t1"], ["t2"], ["t3", "t4", "t5"]]
    assert all(t.dtype == torch.bfloat16 for b in got for _, t in b)
    assert [[n for n, _ in b] for b in buckets(tensors, max_bytes=1)] == [[n] for n, _ in tensors]


# ---------------------------------------------------------------- 2. release / resume
def test_release_pauses_first_and_resume_restores_only_released_tags(make_fake, tiny_model_path):
    """Point 2: a release while a request runs would kill the scheduler; the engine pauses
    (drains) first. Resume sends exactly the released tags; lost weights are re-pushed."""
    from transformers import AutoModelForCausalLM

    fake = make_fake(device="cpu")
    sg = _engine(fake)
    before = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    sg.resume_memory()  # nothing released: nothing sent (resuming an unreleased tag kills it)
    assert not json_body(fake, "/resume_memory_occupation")
    fake.hold = threading.Event()
    running = threading.Thread(target=lambda: asyncio.run(sg.generate([5, 6, 7], GREEDY)))
    running.start()
    while not fake.active:
        time.sleep(0.01)
    releasing = threading.Thread(target=sg.release_memory)
    releasing.start()
    time.sleep(0.3)
    fake.hold.set()
    releasing.join(30)
    running.join(30)
    assert not fake.dead
    assert fake.released == {"kv_cache", "weights", "cuda_graph"}
    sg.release_memory()  # twice: no second release
    assert len(json_body(fake, "/release_memory_occupation")) == 1
    sg.resume_memory()
    assert json_body(fake, "/resume_memory_occupation") == [
        {"tags": ["kv_cache", "weights", "cuda_graph"]}]
    assert json_body(fake, "/continue_generation")
    with pytest.raises(SGLangError, match="update_weights"):  # the weights did not survive
        asyncio.run(sg.generate([5, 6, 7], GREEDY))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.update_weights(model.state_dict().items())
    after = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    assert after.logprobs == pytest.approx(before.logprobs, abs=1e-6)
    assert not fake.dead
    sg.close()


def test_a_flush_waits_for_another_clients_request_to_end(make_fake):
    """Shared servers (several trainer ranks): another rank's request may run for a while when
    rank 0 flushes the prefix cache after a load (sglang answers 400 meanwhile). The flush waits
    for a quiet moment (it gave up after 5 s before, and the run failed at random under load),
    and still fails past its limit."""
    fake = make_fake()
    sg = _engine(fake)
    other = _engine(fake)  # another rank's engine on the same server
    fake.hold = threading.Event()
    running = threading.Thread(target=lambda: asyncio.run(other.generate([5, 6, 7], GREEDY)))
    running.start()
    while not fake.active:
        time.sleep(0.01)
    with pytest.raises(SGLangError, match="400"):
        sg.flush_cache(wait_s=0.2)
    threading.Timer(6.0, fake.hold.set).start()
    t0 = time.monotonic()
    sg.flush_cache()
    assert 5.5 < time.monotonic() - t0 < 30
    running.join(30)
    sg.close()
    other.close()


def test_release_without_pause_kills_the_stand_in_like_sglang(make_fake):
    """The stand-in reproduces the failure the pause avoids (so the test above can fail)."""
    fake = make_fake()
    sg = _engine(fake)
    fake.hold = threading.Event()
    failed: list[BaseException] = []

    def generate() -> None:
        try:
            asyncio.run(sg.generate([5, 6, 7], GREEDY))
        except SGLangError as exc:  # the request held when the scheduler died
            failed.append(exc)

    running = threading.Thread(target=generate)
    running.start()
    while not fake.active:
        time.sleep(0.01)
    with pytest.raises(SGLangError):
        sg.clients[fake.url].post("/release_memory_occupation", {"tags": ["kv_cache"]})
    assert fake.dead
    fake.hold.set()
    running.join(30)
    assert failed and "scheduler died" in str(failed[0])
    sg.close()


def test_release_is_a_no_op_without_the_memory_saver(make_fake):
    fake = make_fake(memory_saver=False)
    sg = _engine(fake)
    sg.release_memory()
    sg.resume_memory()
    assert not json_body(fake, "/release_memory_occupation")
    assert not json_body(fake, "/pause_generation")
    assert asyncio.run(sg.generate([5, 6, 7], GREEDY)).token_ids
    sg.close()


def test_weights_survive_a_release_with_cpu_backup(make_fake):
    fake = make_fake(weights_cpu_backup=True)
    sg = _engine(fake)
    sg.release_memory(["kv_cache"])
    sg.resume_memory()
    assert json_body(fake, "/resume_memory_occupation") == [{"tags": ["kv_cache"]}]
    assert asyncio.run(sg.generate([5, 6, 7], GREEDY)).token_ids
    sg.close()


# ---------------------------------------------------------------- 3. seeds
def test_seeded_sampling_is_refused_where_seeds_are_ignored(make_fake):
    """Point 3: sampling_seed is silently ignored without --enable-deterministic-inference."""
    fake = make_fake(deterministic=False)
    sg = _engine(fake)
    with pytest.raises(SGLangError, match="--enable-deterministic-inference"):
        asyncio.run(sg.generate([5, 6, 7], SamplingParams(seed=3, max_new_tokens=3)))
    loose = _engine(fake, allow_unseeded=True)
    assert asyncio.run(loose.generate([5, 6, 7], SamplingParams(seed=3, max_new_tokens=3)))
    assert asyncio.run(sg.generate([5, 6, 7], SamplingParams(max_new_tokens=3)))  # unseeded ok
    sg.close()
    loose.close()


def test_launch_command_by_device_and_seeding():
    cpu = launch_command("/m", python="py", host="127.0.0.1", port=1, device="cpu")
    assert "--enable-memory-saver" not in cpu and cpu[cpu.index("--device") + 1] == "cpu"
    for flag in ("--sleep-on-idle", "--disable-overlap-schedule", "--max-total-tokens"):
        assert flag in cpu
    assert cpu[cpu.index("--dtype") + 1] == "float32"
    gpu = launch_command("/m", python="py", host="h", port=1, device="cuda", deterministic=True,
                         api_key="k")
    assert "--enable-memory-saver" in gpu and "--enable-deterministic-inference" in gpu
    assert gpu[gpu.index("--api-key") + 1] == "k"


# ---------------------------------------------------------------- 4. versions
def test_old_servers_are_refused(make_fake):
    """Point 4: <= 0.5.4 prepends prompt tokens to output_ids (the stand-in does too)."""
    old = make_fake(version="0.5.4")
    with pytest.raises(SGLangError, match=r"sglang 0\.5\.4; rlvr needs sglang >= 0\.5\.5"):
        _ = _engine(old).infos
    raw = old.generate({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2},
                        "return_logprob": True, "logprob_start_len": -1})[1]
    assert raw["output_ids"][:3] == [5, 6, 7]  # what the refusal protects against
    mid = make_fake(version="0.5.5")  # no /server_info before 0.5.10: /get_server_info
    assert _engine(mid).infos[mid.url].version == "0.5.5"


# ---------------------------------------------------------------- 5. logprob convention
def test_untempered_logprob_servers_are_refused(make_fake):
    """Point 5: SGLANG_RETURN_ORIGINAL_LOGPROB=1 flips the convention; the probe sees it."""
    bad = make_fake(original_logprob=True)
    with pytest.raises(SGLangError, match="SGLANG_RETURN_ORIGINAL_LOGPROB"):
        _ = _engine(bad).infos
    good = make_fake()
    assert _engine(good).infos


def test_launched_server_env_drops_the_variable():
    env = launch_env("cpu", {"SGLANG_RETURN_ORIGINAL_LOGPROB": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "SGLANG_USE_CPU_ENGINE": "1"}


# ---------------------------------------------------------------- 6. context overflow
def test_context_overflow_is_length_not_http_400(make_fake):
    """Point 6: max_new_tokens is clamped to the context left; a full prompt gets "length"."""
    fake = make_fake(context_length=32)  # prompts must be shorter than 32 - 6 = 26
    sg = _engine(fake)
    out = asyncio.run(sg.generate(list(range(5, 29)), SamplingParams(max_new_tokens=20)))
    assert len(out.token_ids) <= 8
    assert json_body(fake, "/generate")[-1]["sampling_params"]["max_new_tokens"] == 8
    full = asyncio.run(sg.generate(list(range(5, 31)), SamplingParams(max_new_tokens=10)))
    assert (full.token_ids, full.finish_reason) == ([], "length")
    sg.close()


# ---------------------------------------------------------------- 7. group store layout
def test_single_prefix_group_never_meets_sglangs_layout(make_fake, tiny_model_path):
    """Point 7: the old stand-in's group (one PrefixStore) cannot meet sglang's nested one."""

    class OnePrefixGroup:
        def __init__(self, *, backend, init_method, world_size, rank, group_name, **_):
            host, port = init_method.removeprefix("tcp://").rsplit(":", 1)
            store = dist.TCPStore(host, int(port), world_size, is_master=True,
                                  timeout=timedelta(seconds=5))
            self.pg = dist.ProcessGroupGloo(dist.PrefixStore(group_name, store), rank,
                                            world_size, timedelta(seconds=5))

        def broadcast(self, tensor):
            raise AssertionError("unreachable")

        def destroy(self):
            pass

    fake = make_fake(device="cpu", group_timeout_s=5)
    sg = _engine(fake, group_factory=OnePrefixGroup, request_timeout_s=90)
    with pytest.raises(Exception):  # noqa: B017 - gloo's timeout error type varies by version
        sg.init_weight_update_group("127.0.0.1", _free_port())
    sg.close()


# ---------------------------------------------------------------- 8. ranks per server
def test_two_servers_get_consecutive_rank_offsets(make_fake, tiny_model_path):
    """Point 8: ranks from each server's tp*pp; a real 3-rank gloo group (us + two servers)."""
    from transformers import AutoModelForCausalLM

    a, b = make_fake(device="cpu"), make_fake(device="cpu")
    sg = SGLangEngine([a.url, b.url])
    sg.update_weights(_perturbed(tiny_model_path).state_dict().items())
    bodies = json_body(a, "/init_weights_update_group") + json_body(b, "/init_weights_update_group")
    assert [(x["rank_offset"], x["world_size"]) for x in bodies] == [(1, 3), (2, 3)]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.update_weights(model.state_dict().items())
    assert a.dist_requests and len(a.dist_requests) == len(b.dist_requests)
    sg.close()


def test_data_parallel_servers_are_refused(make_fake):
    fake = make_fake(dp_size=2)
    with pytest.raises(SGLangError, match="dp_size=2"):
        _ = _engine(fake).infos


def test_rank_offsets_follow_tp(make_fake):
    a, b = make_fake(tp_size=4), make_fake()
    sg = SGLangEngine([a.url, b.url])
    assert [i.ranks for i in sg.infos.values()] == [4, 1]
    sg.close()


def test_pipeline_parallel_servers_are_refused(make_fake):
    # sglang 0.5.23 joins the weight-update group as rank_offset + tp_rank: pipeline stages
    # would claim the same ranks and the group would never form (a hang, not an error).
    fake = make_fake(pp_size=2)
    with pytest.raises(SGLangError, match="pp_size=2.*--tp-size"):
        _ = _engine(fake).infos


# ---------------------------------------------------------------- 9. smaller points
def test_api_key_is_sent_as_bearer(make_fake):
    fake = make_fake(api_key="s3cret")
    with pytest.raises(SGLangError, match="api-key"):
        _ = _engine(fake).infos
    sg = _engine(fake, api_key="s3cret")
    assert asyncio.run(sg.generate([5, 6, 7], GREEDY)).token_ids
    sg.flush_cache()
    sg.close()


def test_ipv6_master_addresses_are_bracketed():
    assert bracket_host("::1") == "[::1]" and bracket_host("10.0.0.1") == "10.0.0.1"
    assert bracket_host("[::1]") == "[::1]"


def test_http_aborts_map_to_finish_reason_abort(fake):
    sg = _engine(fake)
    assert sg.infos  # attach first (its probe is a /generate too)
    fake.abort_next = (503, "Request timed out (SLA)")
    out = asyncio.run(sg.generate([5, 6, 7], GREEDY))
    assert (out.token_ids, out.finish_reason) == ([], "abort")
    fake.abort_next = (500, "Out of memory even after retracting all other requests")
    assert asyncio.run(sg.generate([5, 6, 7], GREEDY)).finish_reason == "abort"
    assert asyncio.run(sg.generate([5, 6, 7], GREEDY)).finish_reason in ("stop", "length")
    sg.close()


def test_sglang_extra_is_the_released_package():
    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extra = data["project"]["optional-dependencies"]["sglang"]
    assert "sglang>=0.5.23" in extra and not any("[srt]" in e for e in extra)


def test_errors_are_clear(fake):
    sg = _engine(fake)
    with pytest.raises(SGLangError, match="HTTP 400: .*unknown keys \\['bogus'\\]"):
        sg.clients[fake.url].post("/flush_cache", {"bogus": 1})
    dead = SGLangEngine(f"http://127.0.0.1:{_free_port()}", request_timeout_s=2)
    with pytest.raises(SGLangError, match="failed"):
        asyncio.run(dead.generate([1, 2], SamplingParams()))
    sg.close()
    dead.close()


def test_launch_without_sglang_says_how_to_install(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed in this venv")
    monkeypatch.delenv("RLVR_SGLANG_PYTHON", raising=False)
    with pytest.raises(MissingDependencyError, match="pip install 'rlvr\\[sglang\\]'"):
        SGLangEngine.launch("/nonexistent")


def test_distributed_updates_run_in_a_weight_update_session(make_fake, tiny_model_path):
    """sglang 0.5.23 refuses /update_weights_from_distributed outside begin/end_weight_update
    (found against the real server); older servers have no such routes and need none."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    new = make_fake(device="cpu")
    sg = _engine(new)
    sg.update_weights(model.state_dict().items())
    paths = [p for p, _ in new.calls if "weight" in p]
    assert paths[1] == "/begin_weight_update" and paths[-1] == "/end_weight_update"
    assert not new.session
    old = make_fake(device="cpu", version="0.5.10")
    sg2 = _engine(old)
    sg2.update_weights(model.state_dict().items())
    assert old.dist_requests
    sg.close()
    sg2.close()


def test_a_refused_bucket_raises_instead_of_hanging(make_fake, tiny_model_path):
    from transformers import AutoModelForCausalLM

    fake = make_fake(device="cpu")
    sg = _engine(fake)
    sg._dist.session_call = lambda path, payload: False  # as if the session were never opened
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    t0 = time.monotonic()
    with pytest.raises(SGLangError, match="begin_weight_update"):
        sg.update_weights(model.state_dict().items())
    assert time.monotonic() - t0 < 30 and sg._dist.group is None
    sg.close()


def test_token_versions_read_sglangs_weight_version_spans():
    from rlvr.agents.engine import Completion
    from rlvr.agents.sglang.wire import token_versions

    def completion(meta, n=5):
        return Completion([1] * n, [-0.1] * n, "stop", {"meta_info": meta})

    spans = [{"version": "3", "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 5}]
    assert token_versions(completion({"weight_versions": spans})) == [3, 3, 4, 4, 4]
    named = [{"version": "default", "start": 0, "end": 1}, {"version": "7", "start": 1, "end": 5}]
    assert token_versions(completion({"weight_versions": named})) == [-1, 7, 7, 7, 7]
    assert token_versions(completion({"weight_version": "2"}, 3)) == [2, 2, 2]
    assert token_versions(completion({}, 2)) == [-1, -1]

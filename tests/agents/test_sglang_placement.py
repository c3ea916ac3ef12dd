"""Weight-sync mode from where the servers are; the colocated memory order; dtype ``auto``.

Against the loopback stand-in (tests/agents/sglang_standin.py) and sglang 0.5.23's released
behaviour: NCCL refuses two ranks of one group on one GPU; ``/resume_memory_occupation`` takes
tags one kind at a time (``scheduler_components/weight_updater.py``); ``--dtype auto`` resolves
from the model's ``config.json`` (``model_config._get_and_verify_dtype``).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from sglang_standin import FakeSGLang, json_body

from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang import SGLangEngine
from rlvr.agents.sglang.placement import (
    SyncFacts,
    choose_weight_sync,
    colocated_servers,
    server_gpus,
    trainer_gpus,
)
from rlvr.agents.sglang.server_info import ServerInfo, resolved_dtype
from rlvr.agents.sglang.server_process import launch_command


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


@pytest.fixture(scope="module")
def dist_info():
    from rlvr.learner import init_distributed

    return init_distributed("cpu")


def _facts(colocated=(), mine=None, theirs=None, all_cpu=False):
    return SyncFacts(tuple(colocated), mine, theirs or {}, all_cpu)


def test_sync_mode_follows_where_the_servers_are():
    assert choose_weight_sync("auto", _facts(all_cpu=True)) == "distributed"  # gloo
    assert choose_weight_sync("auto", _facts(colocated=["http://s"])) == "disk"
    assert choose_weight_sync("auto", _facts(mine="2.27.5", theirs={"s": "2.27.5"})) \
        == "distributed"
    assert choose_weight_sync("auto", _facts(mine="2.27.5", theirs={"s": "2.30.7"})) == "disk"
    assert choose_weight_sync("disk", _facts()) == "disk"


def test_nccl_to_a_server_on_a_trainer_gpu_is_refused():
    with pytest.raises(SGLangError, match="two ranks of one group on one GPU.*auto"):
        choose_weight_sync("distributed", _facts(colocated=["http://127.0.0.1:30000"]))


def test_different_nccl_versions_are_refused_naming_both():
    with pytest.raises(SGLangError, match=r"NCCL 2\.27\.5 and http://s NCCL 2\.30\.7"):
        choose_weight_sync("distributed", _facts(mine="2.27.5", theirs={"http://s": "2.30.7"}))


def test_server_and_trainer_gpus():
    assert server_gpus(ServerInfo(tp_size=2, base_gpu_id=4, gpu_id_step=2)) == {4, 6}
    assert trainer_gpus({"LOCAL_WORLD_SIZE": "2"}) == {0, 1}
    assert trainer_gpus({"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "6,7"}) == {6, 7}
    infos = {"http://127.0.0.1:1": ServerInfo(base_gpu_id=0),
             "http://127.0.0.1:2": ServerInfo(base_gpu_id=4),
             "http://127.0.0.1:3": ServerInfo(base_gpu_id=1, device="cpu"),
             "http://192.0.2.1:4": ServerInfo(base_gpu_id=0)}  # another host (TEST-NET-1)
    assert colocated_servers(infos, {"LOCAL_WORLD_SIZE": "4"}) == ("http://127.0.0.1:1",)


def test_colocated_server_is_synced_through_disk(make_fake, tiny_model_path, tmp_path,
                                                 monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = make_fake(device="cuda", base_gpu_id=0)  # on this host, trainer rank 0's GPU
    sg = SGLangEngine(fake.url, sync_dir=tmp_path / "sync")
    _ = sg.infos
    assert sg.weight_sync == "disk"
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    sg.update_weights(model.state_dict().items())
    assert json_body(fake, "/update_weights_from_disk") and not fake.dist_requests
    sg.close()
    with pytest.raises(SGLangError, match="Duplicate GPU"):
        _ = SGLangEngine(fake.url, weight_sync="distributed").infos


def test_colocated_sync_frees_cache_resumes_weights_updates_then_kv_cache(
        make_fake, tiny_model_path, tmp_path, dist_info, monkeypatch):
    """The trainer's sync: empty_cache -> resume weights -> update -> resume the rest."""
    from rlvr.trainer import Trainer

    fake = make_fake(device="cpu", memory_saver=True)
    sg = SGLangEngine(fake.url, sync_dir=tmp_path / "sync")
    events = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    sg.release_memory()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    actor = SimpleNamespace(
        named_sync_tensors=lambda adapter_only: iter(model.state_dict().items()))
    fake.calls.clear()
    monkeypatch.setattr(fake, "calls", _Recorder(events))
    Trainer.sync_weights(SimpleNamespace(shares_weights=False, engine=sg, actor=actor,
                                         adapter_sync=False,
                                         config=SimpleNamespace(
                                             rollout=SimpleNamespace(max_staleness=0)),
                                         dist=SimpleNamespace(device=torch.device("cuda"))))
    steps = [e for e in events if e != "/flush_cache"]
    assert steps[:2] == ["empty_cache", "/resume_memory_occupation ['weights']"]
    update = steps.index("/update_weights_from_distributed")
    rest = steps.index("/resume_memory_occupation ['kv_cache', 'cuda_graph']")
    assert 1 < update < rest and steps[-1] == "/continue_generation"
    assert not sg._memory.weights_stale
    sg.close()


class _Recorder(list):
    """``FakeSGLang.calls`` that also logs each path (and resumed tags) into ``events``."""

    def __init__(self, events):
        super().__init__()
        self.events = events

    def append(self, item):
        path, body = item
        tags = f" {body['tags']}" if path == "/resume_memory_occupation" else ""
        self.events.append(path + tags)
        super().append(item)


def test_launch_on_cuda_has_fp32_lm_head_and_no_weights_cpu_backup():
    cmd = launch_command("/m", python="py", host="h", port=1, device="cuda")
    assert "--enable-fp32-lm-head" in cmd and "--enable-memory-saver" in cmd
    assert "--enable-weights-cpu-backup" not in cmd  # the trainer re-pushes weights anyway


@pytest.mark.parametrize(("config", "expected"), [
    ({"torch_dtype": "bfloat16", "model_type": "qwen2"}, "bfloat16"),
    ({"dtype": "float32", "model_type": "qwen2"}, "float16"),
    ({"model_type": "llama"}, "float16"),
    ({"torch_dtype": "float32", "model_type": "gemma2"}, "bfloat16"),
])
def test_dtype_auto_is_resolved_as_sglang_does(tmp_path, config, expected):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert resolved_dtype(ServerInfo(dtype="auto", model_path=str(tmp_path))) == expected
    assert resolved_dtype(ServerInfo(dtype="float32", model_path=str(tmp_path))) == "float32"


def test_dtype_auto_on_an_unreadable_model_is_refused(make_fake):
    fake = make_fake(dtype="auto")
    fake.args["model_path"] = "/nowhere/Qwen2.5-7B"
    with pytest.raises(SGLangError, match="explicit --dtype"):
        _ = SGLangEngine(fake.url).dtype


def test_tied_embedding_is_sent_once(make_fake, tiny_model_path, dist_info):
    from rlvr.learner import Actor, ActorConfig

    fake = make_fake(device="cpu")
    sg = SGLangEngine(fake.url)
    actor = Actor.from_pretrained(tiny_model_path, ActorConfig(), dist_info)
    sg.update_weights(actor.named_full_tensors())
    names = [n for body in fake.dist_requests for n in body["names"]]
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert len(names) == len(set(names))
    sg.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA torch reports its NCCL")
def test_server_nccl_is_reported_probed_or_pinned(tmp_path):
    import sys

    from rlvr.agents.sglang.placement import probe_nccl, server_nccl

    assert probe_nccl(sys.executable) is None  # a CPU torch: no NCCL to report
    assert probe_nccl(str(tmp_path / "no-python")) is None
    assert server_nccl(ServerInfo(version="0.5.23", nccl_version="2.27.3"), None) == "2.27.3"
    assert server_nccl(ServerInfo(version="0.5.23"), sys.executable) == "2.30.7"  # pinned torch
    assert server_nccl(ServerInfo(version="0.5.10"), None) is None  # unknown: not checked

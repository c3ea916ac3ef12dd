"""The SGLang engine's seams: one weight-sync strategy chosen once, a fleet apart from the engine.

Against the fake server (``sglang_standin``); the real servers' syncs are in test_sglang_real.py
and test_sglang_router.py.
"""

from __future__ import annotations

import pytest
import torch
from sglang_standin import FakeSGLang

from rlvr.agents.errors import RequestError
from rlvr.agents.sglang import LaunchSpec, ServerFleet, SGLangEngine
from rlvr.agents.sglang.weight_sync import AdapterSync, BroadcastSync, DiskSync, DrainSync


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


@pytest.mark.parametrize(("asked", "strategy"), [("auto", BroadcastSync), ("disk", DiskSync)])
def test_the_leader_chooses_its_strategy_once_on_attach(make_fake, asked, strategy):
    fake = make_fake(device="cpu")
    sg = SGLangEngine(fake.url, weight_sync=asked)
    try:
        assert sg._sync is None  # nothing is chosen before the servers are known
        _ = sg.infos
        chosen = sg._sync
        assert isinstance(chosen, strategy) and sg.weight_sync == chosen.mode
        _ = sg.dtype
        assert sg._sync is chosen
    finally:
        sg.close()


def test_a_follower_drains_the_pairs_and_sends_nothing(make_fake):
    fake = make_fake(device="cpu")
    sg = SGLangEngine(fake.url, leader=False)
    seen = []

    def pairs():
        for i in range(3):
            seen.append(i)
            yield f"w{i}", torch.zeros(2)

    try:
        assert isinstance(sg._sync, DrainSync)
        sg.update_weights(pairs())
        assert seen == [0, 1, 2] and fake.calls == []  # not even attached
    finally:
        sg.close()


def test_serving_an_adapter_replaces_the_strategy_and_names_requests(make_fake):
    fake = make_fake(device="cpu")
    sg = SGLangEngine(fake.url, leader=False)
    try:
        assert sg.lora_name is None
        sg.serve_lora({"r": 4}, prefix="rlvr-test")
        assert isinstance(sg._sync, AdapterSync)
        sg.update_weights(iter([]))
        assert sg.lora_name == "rlvr-test-v1"  # a follower names what the leader loaded
    finally:
        sg.close()


def test_launch_keywords_split_into_the_spec_and_the_engine():
    spec, rest = LaunchSpec.split({"python": "/x/python", "servers": 2, "leader": False,
                                   "bucket_bytes": 7})
    assert spec == LaunchSpec(python="/x/python", servers=2)
    assert rest == {"leader": False, "bucket_bytes": 7}


def test_an_engine_takes_its_urls_from_the_fleet_and_closes_it():
    fleet = ServerFleet("http://127.0.0.1:1", ["http://127.0.0.1:2", "http://127.0.0.1:3"])
    closed = []
    fleet.close = lambda: closed.append(True)  # type: ignore[method-assign]
    sg = SGLangEngine(fleet)
    assert sg.urls == ["http://127.0.0.1:1"]
    assert sg.server_urls == ["http://127.0.0.1:2", "http://127.0.0.1:3"]
    assert sg.process is None
    sg.close()
    assert closed == [True]
    with pytest.raises(RequestError, match="server_urls is given by the fleet"):
        SGLangEngine(fleet, server_urls=["http://127.0.0.1:4"])
    with pytest.raises(RequestError, match="at least one URL"):
        ServerFleet([])

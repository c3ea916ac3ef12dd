"""Two REAL sglang 0.5.23 CPU servers behind the REAL sglang-router (one set for the module).

``SGLangEngine.launch(servers=2)`` starts both servers at once and, once they are healthy,
``python -m sglang_router.launch_router`` in front of them (the servers' venv has
``sglang-router``: ``bash dev.sh setup-sglang``). ``/generate`` goes through the router; weight,
version and pause calls go to each server (the router forwards none of them:
``rlvr.agents.sglang.router``). Each test proves on BOTH servers what it claims: requests counted in
each server's own log, logprobs read from each server directly. Gated like test_sglang_real.py
(skipped without the venv, a failure under ``RLVR_REQUIRE_SGLANG=1``).

Tests that change the servers' weights put the original ones back before they end. CI runs the
core (about a minute on 2 cores, most of it the servers' start); the disk sync, the in-flight
abort and two torchrun ranks run with ``RLVR_SGLANG_ROUTER_FULL=1`` (a minute more).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest
import torch
from agent_helpers import continued_logprobs
from sglang_real_helpers import (
    QUICKSTART,
    assert_every_episode_trained_once,
    generate_through_an_inflight_update,
    many,
    require_venv,
    short_run_overrides,
)

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import SGLangError
from rlvr.agents.sglang import SGLangEngine

pytestmark = pytest.mark.slow  # end-to-end: handed out first on two workers (tests/conftest.py)

TOL = 1e-4  # float32 server vs float32 transformers (test_sglang_real.py: measured 6.7e-6)
PROMPTS = [[5 + i, 17, 40 + 2 * i, 9, 100 + i] for i in range(8)]
FULL = pytest.mark.skipif(
    os.environ.get("RLVR_SGLANG_ROUTER_FULL") != "1",
    reason="outside CI's time budget: RLVR_SGLANG_ROUTER_FULL=1 runs it (BENCHMARKS.md, "
           "\"Several sglang servers behind sglang-router\")")


@pytest.fixture(scope="module")
def routed(tiny_model_path, tmp_path_factory):
    """The launched engine: ``urls`` is the router, ``server_urls`` the two servers."""
    python = require_venv("test_sglang_router")
    log = tmp_path_factory.mktemp("sglang-router") / "server.log"
    t0 = time.monotonic()
    engine = SGLangEngine.launch(tiny_model_path, python=python, device="cpu", log_path=log,
                                 startup_timeout_s=540, allow_unseeded=True, servers=2)
    print(f"\n[test_sglang_router] 2 servers + router ready after {time.monotonic() - t0:.0f} s "
          f"(logs {log.parent})")
    yield engine
    engine.close()


def _attach(routed, **kw):
    """A new engine on the same router and servers (attach mode)."""
    return SGLangEngine(routed.urls[0], server_urls=routed.server_urls, allow_unseeded=True, **kw)


def _direct(routed):
    """One engine per server, bypassing the router."""
    return [SGLangEngine(u, allow_unseeded=True) for u in routed.server_urls]


def _generates(routed) -> list[int]:
    """``POST /generate`` requests each server has logged so far (the servers' own count)."""
    return [proc.log.read_text(errors="replace").count('"POST /generate HTTP')
            for proc in routed.processes[:2]]


def _routed_generates(routed) -> int:
    """``POST /generate`` requests the router has answered so far (its log has a "started" and
    a "finished processing request" line per request)."""
    return sum(1 for line in routed.processes[-1].log.read_text(errors="replace").splitlines()
               if "uri=/generate" in _plain(line) and "finished processing request" in line)


def _plain(line: str) -> str:
    """``line`` without the router log's ANSI colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


class _Counts:
    """Requests each server got through the router between ``__init__`` and ``routed``.

    Requests rlvr sends to every server itself (the attach probes, the sync guard's scoring
    probe) reach each server alike, so a server's share of the router's requests is its count
    less half of what the servers got beyond the router's.
    """

    def __init__(self, routed) -> None:
        self.engine = routed
        self.servers, self.router = _generates(routed), _routed_generates(routed)

    def routed(self) -> tuple[list[int], int]:
        got = [b - a for a, b in zip(self.servers, _generates(self.engine))]
        via = _routed_generates(self.engine) - self.router
        direct = sum(got) - via
        assert direct % len(got) == 0, (got, via)
        return [g - direct // len(got) for g in got], via


def _weight_versions(routed) -> list[str]:
    return [routed.clients[u].get("/get_model_info")["weight_version"]
            for u in routed.server_urls]


def _logprobs(model, prompt, tokens, temperature=1.0):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1: -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _max_gap(model, prompts, outs):
    gaps = [(_logprobs(model, p, o.token_ids) - torch.tensor(o.logprobs)).abs().max()
            for p, o in zip(prompts, outs) if o.token_ids]
    return float(torch.stack(gaps).max())


def _train_step(model, lr=1e-2):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    ids = torch.tensor(PROMPTS)
    model(ids, labels=ids).loss.backward()
    opt.step()
    return model.eval()


def test_the_router_is_found_and_refused_as_a_server(routed, tiny_model_path, tmp_path):
    """``launch(servers=2)`` puts the router in ``urls`` and the servers in ``server_urls``;
    attaching by the router's URL alone reads the servers from its ``/workers``; a router given
    as its own server is refused with what to do (its /get_server_info is not a server's)."""
    from rlvr.agents.engine_registry import EngineRequest, build_engine
    from rlvr.agents.sglang import SGLangOptions

    assert len(routed.server_urls) == 2 and routed.urls[0] not in routed.server_urls
    assert {i.version for i in routed.infos.values()} == {"0.5.23"}
    built = build_engine(EngineRequest(
        engine="sglang", model_path=tiny_model_path, work_dir=tmp_path, serve_model=False,
        options=SGLangOptions(url=routed.urls[0], allow_unseeded=True)))
    try:
        assert sorted(built.engine.server_urls) == sorted(routed.server_urls)
        assert built.engine.urls == routed.urls
    finally:
        built.engine.close()
    lone = SGLangEngine(routed.urls[0], allow_unseeded=True)
    with pytest.raises(SGLangError, match="is an sglang-router, not a server.*server_urls"):
        _ = lone.infos
    lone.close()


def test_generation_through_the_router_reaches_both_servers(routed, tiny_model):
    counts = _Counts(routed)
    outs = asyncio.run(many(routed, PROMPTS * 2, SamplingParams(max_new_tokens=8)))
    served, via = counts.routed()  # the first use also attaches: probes go to each server
    print(f"\n[test_sglang_router] 16 requests through the router: per server {served}")
    assert via == sum(served) == 16 and min(served) >= 1, (served, via)
    assert _max_gap(tiny_model, PROMPTS * 2, outs) < TOL


@pytest.mark.parametrize("weight_sync", [pytest.param("disk", marks=FULL), "distributed"])
def test_a_weight_sync_lands_on_both_servers(routed, tiny_model_path, tiny_model, tmp_path,
                                             weight_sync):
    """After one sync through the routed engine, EACH server (asked directly) gives the trained
    weights' logprobs at the fp32 level, and not the old ones'; then both carry the version."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(routed, weight_sync=weight_sync, sync_dir=tmp_path / "sync",
                 bucket_bytes=256 * 1024)
    direct = _direct(routed)
    try:
        t0 = time.perf_counter()
        sg.update_weights(trained.state_dict().items(), weight_version="synced")
        seconds = time.perf_counter() - t0
        assert sg.weight_sync == weight_sync
        sp = SamplingParams(temperature=1.0, max_new_tokens=12)
        gaps = []
        for server in direct:
            outs = asyncio.run(many(server, PROMPTS, sp))
            gaps.append((_max_gap(trained, PROMPTS, outs), _max_gap(tiny_model, PROMPTS, outs)))
        print(f"\n[test_sglang_router] {weight_sync} sync to 2 servers {seconds:.2f} s; "
              f"(new, old) gap per server {gaps}")
        assert all(new < TOL and old > 100 * TOL for new, old in gaps), gaps
        assert _weight_versions(routed) == ["synced", "synced"]
    finally:
        sg.update_weights(str(tiny_model_path), weight_version="default")
        sg.close()
        for server in direct:
            server.close()


def test_inflight_continue_pauses_and_updates_both_servers(routed, tiny_model_path, tiny_model,
                                                           tmp_path):
    """``update_weights_in_flight`` while requests run on both servers: each server is paused
    in place, updated and continued (the router forwards none of it); every request's tokens are
    version 0 then version 1, with the old then the new weights' logprobs."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(routed, weight_sync="disk", sync_dir=tmp_path / "sync",
                 max_concurrency=len(PROMPTS))
    sp = SamplingParams(temperature=1.0, max_new_tokens=400)
    before = _generates(routed)
    try:
        sg.set_weight_version(0)
        assert _weight_versions(routed) == ["0", "0"]
        outs, _ = generate_through_an_inflight_update(
            sg, trained.state_dict().items(), "continue", PROMPTS, sp)
        assert _weight_versions(routed) == ["1", "1"]
        served = [b - a for a, b in zip(before, _generates(routed))]
        assert min(served) >= 1, served
        mixed = 0
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort" and out.regenerated == 0
            k = out.versions.count(0)
            assert out.versions == [0] * k + [1] * (len(out.token_ids) - k)
            got = torch.tensor(out.logprobs)
            if k:
                old = _logprobs(tiny_model, prompt, out.token_ids[:k])
                assert (old - got[:k]).abs().max() < TOL
            if 0 < k < len(out.token_ids):
                mixed += 1
                after = continued_logprobs(tiny_model, trained, prompt, out.token_ids, k)
                assert (after - got[k:]).abs().max() < TOL
        print(f"\n[test_sglang_router] in-flight continue via router: per server {served} "
              f"requests, {mixed}/{len(PROMPTS)} span the update")
        assert mixed >= 1
    finally:
        sg.update_weights(str(tiny_model_path), weight_version="default")
        sg.close()


def test_async_training_through_the_router_accounts_every_episode(routed, tiny_model_path,
                                                                  tmp_path):
    """rollout.max_staleness=1 with the router's URL alone (servers read from its /workers):
    episodes are generated on both servers, weights reach both between steps and in flight,
    every episode is trained once, none is staler than 1, and the first step passes the sync
    guard at the fp32 level."""
    from rlvr.config import load_config
    from rlvr.trainer import Trainer

    config = load_config(QUICKSTART, [
        *short_run_overrides(tiny_model_path, tmp_path, routed.urls[0], 3),
        "rollout.max_staleness=1", "actor.tis_cap=2.0", "rollout.inflight_update=continue",
    ])
    counts = _Counts(routed)
    trainer = Trainer(config, log=lambda *_: None)
    try:
        history = trainer.train().history
        assert_every_episode_trained_once(trainer, history, steps=3)
        served, via = counts.routed()
        versions = _weight_versions(routed)
        print(f"\n[test_sglang_router] async training via router: {via} /generate through the "
              f"router, per server {served}, weight versions {versions}, in-flight updates "
              f"{history[-1]['async/inflight_updates']:.0f}")
        assert via >= 3 * 4 * 4 and sum(served) == via and min(served) >= 1, (served, via)
        assert versions[0] == versions[1] != "default"
    finally:
        routed.update_weights(str(tiny_model_path), weight_version="default")


@FULL
def test_inflight_abort_through_the_router_regenerates_under_the_new_version(
        routed, tiny_model_path, tmp_path):
    """Mode "abort": each server aborts its running requests; the router hands the aborts back
    (it does not retry them on the other server) and the engine sends them again: every
    regenerated completion is version 1 with the new weights' logprobs."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(routed, weight_sync="disk", sync_dir=tmp_path / "sync",
                 max_concurrency=len(PROMPTS))
    sp = SamplingParams(temperature=1.0, max_new_tokens=400)
    try:
        outs, _ = generate_through_an_inflight_update(
            sg, trained.state_dict().items(), "abort", PROMPTS, sp)
        assert _weight_versions(routed) == ["1", "1"]
        assert sg.regenerated == sum(o.regenerated for o in outs) >= 1
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort"
            if out.regenerated:
                assert out.versions == [1] * len(out.token_ids)
                gap = (_logprobs(trained, prompt, out.token_ids)
                       - torch.tensor(out.logprobs)).abs().max()
                assert gap < TOL
        print(f"\n[test_sglang_router] in-flight abort via router: {sg.regenerated} "
              "requests regenerated")
    finally:
        sg.update_weights(str(tiny_model_path), weight_version="default")
        sg.close()


@FULL
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_torchrun_ranks_send_their_episodes_through_the_router(
        routed, tiny_model_path, tmp_path, run_process_group, mode):
    """``torchrun --nproc_per_node=2 rlvr train`` with the router's URL: each rank generates its
    episodes through the router, rank 0 syncs the weights (gloo broadcast) into both servers,
    and every step's rows, from both servers, pass the sync guard at the fp32 level. ``async``:
    k = 1 with in-flight updates, rank 0's producer loading both servers and rank 1's following
    the versions they hold; every episode trained once, the probe proving both servers."""
    import sys

    from rlvr.config import load_config
    from rlvr.config.loader import dump_config
    from rlvr.metrics import read_jsonl

    out = tmp_path / "run"
    config = load_config(QUICKSTART, [
        *short_run_overrides(tiny_model_path, out, routed.urls[0], 2),
        *(["rollout.max_staleness=1", "actor.tis_cap=2.0", "rollout.inflight_update=continue",
           "trainer.steps=3"] if mode == "async" else []),
    ])
    steps = config.trainer.steps
    cfg_path = tmp_path / "config.yaml"
    dump_config(config, cfg_path)
    counts = _Counts(routed)
    try:
        run_process_group(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
             "-m", "rlvr.cli", "train", str(cfg_path)],
            cwd=Path(__file__).parents[2], env=dict(os.environ, OMP_NUM_THREADS="1"),
            timeout=400, check=True)
        rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rollout/logprob_diff" in r]
        served, via = counts.routed()
        print(f"\n[test_sglang_router] 2 torchrun ranks via router: {via} /generate through "
              f"the router, per server {served}, logprob_diff per step "
              f"{[r['rollout/logprob_diff'] for r in rows]}")
        assert via >= steps * 4 * 4 and sum(served) == via and min(served) >= 1, (served, via)
        if mode == "sync":
            assert len(rows) == 2 and max(r["rollout/logprob_diff"] for r in rows) < 1e-4
            return
        logged = [r for r in read_jsonl(out / "metrics.jsonl") if "async/episodes_started" in r]
        assert len(logged) == steps and logged[-1]["async/episodes_started"] == steps * 4 * 4
        assert logged[-1]["async/dropped_stale"] == 0.0
        assert all(r["async/staleness_max"] <= 1.0 for r in logged)
        proven = [r["sync/probe_logprob_diff"] for r in logged if "sync/probe_logprob_diff" in r]
        assert proven and max(proven) < 1e-4
    finally:
        routed.update_weights(str(tiny_model_path), weight_version="default")


@FULL
def test_rlvr_launches_two_servers_and_the_router_from_the_config(tiny_model_path, tmp_path):
    """``rollout.sglang.url: null, servers: 2``: the trainer's engine starts both servers and the
    router, trains through them with every step's rows at the fp32 level, and stops all three."""
    python = require_venv("test_sglang_router")
    from rlvr.config import load_config
    from rlvr.metrics import read_jsonl
    from rlvr.trainer import Trainer

    config = load_config(Path(__file__).parents[2] / "configs" / "quickstart.yaml", [
        f"model.path={tiny_model_path}", "sft.enabled=false", f"trainer.output_dir={tmp_path}",
        "trainer.steps=2", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8",
        "eval.every=0", "rollout.engine=sglang", "rollout.sglang.servers=2",
        f"rollout.sglang.python={python}", "rollout.sglang.allow_unseeded=true",
        "rollout.max_logprob_diff=1e-4", "rollout.sglang.startup_timeout_s=540",
    ])
    trainer = Trainer(config, log=lambda *_: None)
    engine = trainer.engine
    assert len(engine.server_urls) == 2 and len(engine.processes) == 3
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/logprob_diff" in r]
    assert len(rows) == 2 and max(r["rollout/logprob_diff"] for r in rows) < 1e-4
    assert all(p.exit_code() is not None for p in engine.processes)

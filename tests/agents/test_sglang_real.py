"""SGLangEngine against a REAL sglang 0.5.23 server on this CPU (one server for the module).

The server runs in its own venv (``bash dev.sh setup-sglang``; ``bash dev.sh test`` builds it
and exports ``RLVR_SGLANG_PYTHON``), launched by ``SGLangEngine.launch(device="cpu")`` with the
flags of ``rlvr.agents.sglang.server_process`` (float32, torch_native attention, small KV
pool). Outside CI the module is skipped, with the reason printed, when that venv is absent; with
``RLVR_REQUIRE_SGLANG=1`` (``.ci/run``) its absence is a failure. What CPU sglang cannot do
(NCCL, the memory saver, deterministic seeds) is covered by the stand-in in
test_sglang_engine.py.

Tests that change the server's weights put the original ones back before they end.
"""

from __future__ import annotations

import asyncio
import os
import threading
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
from rlvr.agents.sglang import SGLangEngine

pytestmark = pytest.mark.slow  # end-to-end: handed out first on two workers (tests/conftest.py)

TOL = 1e-4  # float32 server vs float32 transformers: measured max 6.7e-6 per token


@pytest.fixture(scope="module")
def server(tiny_model_path, tmp_path_factory):
    python = require_venv("test_sglang_real")
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    t0 = time.monotonic()
    engine = SGLangEngine.launch(tiny_model_path, python=python, device="cpu", log_path=log,
                                 startup_timeout_s=540, allow_unseeded=True)
    print(f"\n[test_sglang_real] server healthy after {time.monotonic() - t0:.0f} s (log {log})")
    yield engine
    engine.close()


def _attach(server, **kw):
    return SGLangEngine(server.urls[0], allow_unseeded=True, **kw)


def _logprobs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1: -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


PROMPTS = [[5 + i, 17, 40 + 2 * i, 9, 100 + i] for i in range(8)]


def _max_gap(model, prompts, outs, temperature):
    gaps = [(_logprobs(model, p, o.token_ids, temperature) - torch.tensor(o.logprobs)).abs().max()
            for p, o in zip(prompts, outs) if o.token_ids]
    return float(torch.stack(gaps).max())


def test_server_info_is_read_and_checked(server):
    info = next(iter(server.infos.values()))
    assert info.version == "0.5.23" and info.device == "cpu" and info.dtype == "float32"
    assert info.context_length and not info.memory_saver and not info.deterministic
    assert server.dtype == torch.float32


@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=1.0, max_new_tokens=12),
    SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12),
    SamplingParams(temperature=0, max_new_tokens=12),
], ids=["t1", "t0.7-top_p", "greedy"])
def test_logprobs_equal_transformers(server, tiny_model, sampling):
    outs = asyncio.run(many(server, PROMPTS, sampling))
    assert all(len(o.token_ids) == len(o.logprobs) > 0 for o in outs)
    t = sampling.temperature or 1.0
    assert _max_gap(tiny_model, PROMPTS, outs, t) < TOL
    if sampling.greedy:
        for p, o in zip(PROMPTS, outs):
            with torch.no_grad():
                logits = tiny_model(torch.tensor([p + o.token_ids])).logits[0, len(p) - 1: -1]
            assert logits.argmax(-1).tolist() == o.token_ids


def test_score_gives_the_sampled_tokens_logprobs(server, tiny_model):
    """Teacher-forced scoring (the async sync guard's probe): input-token logprobs equal the
    ones reported while sampling and a transformers forward, from any start, a second time (the
    prefix now cached) too; at temperature 1 whatever the sampling temperature was."""
    from rlvr.agents.errors import RequestError

    outs = asyncio.run(many(server, PROMPTS[:3], SamplingParams(temperature=1.0,
                                                                   max_new_tokens=12)))
    for prompt, out in zip(PROMPTS, outs):
        ids = prompt + out.token_ids
        for _ in range(2):
            scored = server.score(ids, len(prompt))
            assert list(scored) == server.server_urls
            got = torch.tensor(scored[server.urls[0]])
            assert (got - torch.tensor(out.logprobs)).abs().max() < TOL
        whole = torch.tensor(server.score(ids, 1)[server.urls[0]])
        ref = _logprobs(tiny_model, ids[:1], ids[1:], 1.0)
        assert (whole - ref).abs().max() < TOL
    with pytest.raises(RequestError):
        server.score([1, 2, 3], 3)


def test_score_of_the_last_vocabulary_id_is_that_tokens(server, tiny_model):
    """sglang 0.5.23 echoes the model's last token id as 0 beside its input logprob
    (``rlvr.agents.sglang.scoring``); a sampled episode may hold it (about one in ten CI runs
    sampled it here), and its score must be that token's, not an error."""
    last = tiny_model.config.vocab_size - 1
    ids = PROMPTS[0] + [last, 7, 8, last]
    got = torch.tensor(server.score(ids, 1)[server.urls[0]])
    assert (got - _logprobs(tiny_model, ids[:1], ids[1:], 1.0)).abs().max() < TOL


def test_score_after_an_update_that_kept_the_cache_is_the_new_weights(server, tiny_model_path,
                                                                       tiny_model, tmp_path):
    """An in-flight ``continue`` update keeps sglang's prefix cache, whose keys and values the
    old weights computed; a score must not reuse them (``rlvr.agents.sglang.scoring``): the probe
    would blame a sync that landed."""
    from transformers import AutoModelForCausalLM

    prompt = PROMPTS[0] * 4  # long enough that a reused prefix would count
    out = asyncio.run(server.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=8)))
    ids = prompt + out.token_ids
    server.score(ids, len(prompt))  # the old weights' prefix is now in the radix cache
    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(server, sync_dir=tmp_path / "sync", weight_sync="disk")
    try:
        sg.update_weights_in_flight(trained.state_dict().items(), 1, "continue")  # no flush
        got = torch.tensor(sg.score(ids, len(prompt))[server.urls[0]])
        new = _logprobs(trained, prompt, out.token_ids, 1.0)
        old = _logprobs(tiny_model, prompt, out.token_ids, 1.0)
        assert (got - new).abs().max() < TOL and (got - old).abs().max() > 100 * TOL
    finally:
        sg.update_weights(str(tiny_model_path), weight_version="default")
        sg.close()


def test_stop_token_is_part_of_the_completion(server, tiny_model_path):
    """The token that ended a completion is its last, with a logprob: one of the stop ids or
    the model's eos (sglang stops at both; unseeded sampling on CPU draws the eos now and then)."""
    from transformers import AutoTokenizer

    stops = tuple(range(50, 300))  # most of the vocabulary: generation stops within a few tokens
    enders = {*stops, AutoTokenizer.from_pretrained(tiny_model_path).eos_token_id}
    outs = asyncio.run(many(server, PROMPTS, SamplingParams(max_new_tokens=30,
                                                             stop_token_ids=stops)))
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert stopped
    assert any(o.token_ids[-1] in stops for o in stopped)  # the stop ids do stop generation
    for o in stopped:
        assert o.token_ids[-1] in enders and len(o.logprobs) == len(o.token_ids)
        assert not any(t in enders for t in o.token_ids[:-1])


def _train_step(model, lr=1e-2):
    """One AdamW step on a language-model loss: weights move like an RL step's."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    ids = torch.tensor(PROMPTS)
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    model.eval()
    return model


@pytest.mark.parametrize("weight_sync", ["disk", "distributed"])
def test_weight_sync_after_a_training_step_lands(server, tiny_model_path, tiny_model, tmp_path,
                                                 weight_sync):
    """Disk reload (bucketed shards) and the gloo broadcast, against the real server: after the
    sync the server's logprobs equal the trained model's at the fp32 level, and differ from the
    old weights' by far more (the sync landed)."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(server, weight_sync=weight_sync, sync_dir=tmp_path / "sync",
                 bucket_bytes=256 * 1024)
    try:
        t0 = time.perf_counter()
        sg.update_weights(trained.state_dict().items(), weight_version="step-1")
        seconds = time.perf_counter() - t0
        sp = SamplingParams(temperature=1.0, max_new_tokens=12)
        outs = asyncio.run(many(sg, PROMPTS, sp))
        new_gap = _max_gap(trained, PROMPTS, outs, 1.0)
        old_gap = _max_gap(tiny_model, PROMPTS, outs, 1.0)
        print(f"\n[test_sglang_real] {weight_sync} sync {seconds:.2f} s; gap to the trained "
              f"weights {new_gap:.2e}, to the old ones {old_gap:.2e}")
        assert new_gap < TOL and old_gap > 100 * TOL
    finally:
        sg.update_weights(str(tiny_model_path))  # back to the module's weights
        sg.close()
    outs = asyncio.run(many(server, PROMPTS[:2], SamplingParams(max_new_tokens=4)))
    assert _max_gap(tiny_model, PROMPTS[:2], outs, 1.0) < TOL


def test_a_lora_policy_gets_merged_weights_equal_to_the_adapted_model(
        server, tiny_model_path, tiny_model, tmp_path, caplog):
    """CPU sglang cannot serve LoRA (``rlvr.agents.sglang.lora.CPU_REFUSAL``), so a LoRA policy's
    engine takes merged weights: after the sync the server's logprobs equal the learner's module
    with its adapter applied (peft's layers), and differ from the base's (the adapter landed)."""
    from transformers import AutoModelForCausalLM

    from rlvr.agents.engine_registry import EngineRequest, build_engine
    from rlvr.agents.sglang import SGLangOptions
    from rlvr.learner.lora import LoraConfig, apply_lora, merged_tensors

    lora = LoraConfig(rank=4, alpha=8.0)
    adapted = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                              dtype=torch.float32), lora).eval()
    torch.manual_seed(0)
    for name, param in adapted.named_parameters():
        if ".lora_B." in name:
            param.data.normal_(0, 0.05)
    with caplog.at_level("WARNING", logger="rlvr.agents.sglang.engine_builder"):
        built = build_engine(EngineRequest(
            engine="sglang", model_path=tiny_model_path, work_dir=tmp_path,
            lora=lora.peft_kwargs(), options=SGLangOptions(url=server.urls[0],
                                                           allow_unseeded=True,
                                                           weight_sync="disk")))
    sg = built.engine
    try:
        assert not built.serves_adapter
        assert any("without --enable-lora" in r.getMessage() for r in caplog.records)
        sg.update_weights(merged_tensors(iter(adapted.state_dict().items()), lora))
        outs = asyncio.run(many(sg, PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=12)))
        new_gap = _max_gap(adapted, PROMPTS, outs, 1.0)
        old_gap = _max_gap(tiny_model, PROMPTS, outs, 1.0)
        print(f"\n[test_sglang_real] LoRA merged sync: gap to the adapted model {new_gap:.2e}, "
              f"to the base {old_gap:.2e}")
        assert new_gap < TOL and old_gap > 100 * TOL
    finally:
        sg.update_weights(str(tiny_model_path))  # back to the module's weights
        sg.close()


def test_flush_release_resume(server):
    server.flush_cache()
    server.release_memory()  # no memory saver on CPU: nothing to free, nothing sent
    server.resume_memory()
    client = server.clients[server.urls[0]]
    assert client.post("/pause_generation", {"mode": "abort"})
    assert client.post("/continue_generation", {})
    out = asyncio.run(server.generate([5, 6, 7], SamplingParams(max_new_tokens=4)))
    # The server generates again; the random tiny model may sample its end token early (seen
    # once in CI, at logprob -6.1): then the completion is shorter and says "stop".
    assert 1 <= len(out.token_ids) <= 4, out
    assert len(out.token_ids) == 4 or out.finish_reason == "stop", out


def test_context_overflow_is_a_length_finish(server):
    from rlvr.agents.sglang.client import SGLangHTTPError

    ctx, max_input = server.context_length, server.max_input_len
    assert max_input is not None and max_input < ctx
    prompt = [7] * (max_input - 1)
    # The random tiny model may sample EOS inside the few tokens of room and finish "stop" (seen
    # once in CI): every try must stay within the room, and one that used it up says "length".
    finishes = []
    for _ in range(5):
        out = asyncio.run(server.generate(prompt, SamplingParams(max_new_tokens=20)))
        assert len(out.token_ids) <= ctx - len(prompt)
        finishes.append(out.finish_reason)
        if out.finish_reason == "length":
            break
    assert finishes[-1] == "length" and set(finishes) <= {"length", "stop"}, finishes
    full = asyncio.run(server.generate([7] * max_input, SamplingParams(max_new_tokens=10)))
    assert (full.token_ids, full.finish_reason) == ([], "length")
    with pytest.raises(SGLangHTTPError) as err:  # what the clamp avoids: sglang's HTTP 400
        server.clients[server.urls[0]].post("/generate", {
            "input_ids": prompt, "sampling_params": {"max_new_tokens": 20}})
    assert err.value.status == 400 and "context length" in err.value.detail


def test_abort_is_finish_reason_abort(server):
    # The random tiny model may sample EOS within its first tokens and finish "stop" before the
    # abort lands (seen once in CI): such a request was not aborted, so try again; an abort must
    # come back as finish reason "abort" with no tokens.
    sp = SamplingParams(max_new_tokens=600)
    finishes = []
    for _ in range(10):
        results: list = []
        thread = threading.Thread(target=lambda out=results: out.append(
            asyncio.run(server.generate([5, 6, 7], sp))))
        thread.start()
        time.sleep(0.3)  # in flight, or still queued (an abort ends that too), on a fast machine
        server.clients[server.urls[0]].post("/abort_request", {"abort_all": True})
        thread.join(120)
        assert results, "the request never returned"
        finishes.append(results[0].finish_reason)
        if results[0].finish_reason == "abort":
            assert results[0].token_ids == []
            return
    pytest.fail(f"no request was aborted: finish reasons {finishes}")


def test_episode_runner_is_token_exact(server, tiny_tokenizer):
    from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
    from rlvr.envs.tool_env import ToolUseEnv

    runner = EpisodeRunner(server, tiny_tokenizer, RunnerConfig(
        max_turns=2, max_tokens_per_turn=12, check_token_exact=True,
        sampling=SamplingParams(stop=(" ",))))
    trajs = runner.run([EpisodeSpec(env_factory=ToolUseEnv, seed=i) for i in range(4)],
                       group_size=2)
    runner.close()
    assert len(trajs) == 8 and all(t.finish_reason != "error" for t in trajs)


def test_rlvr_eval_engine_sglang_end_to_end(server, tiny_model_path, tmp_path, capsys):
    import json

    from rlvr.cli import eval_main

    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: sglang_e2e\n"
        "entries:\n"
        "  - env: rlvr/Math-v0\n"
        "    name: arith\n"
        "    split: test\n"
        "    n_tasks: 6\n"
        "    kwargs: {answer_format: plain, system_prompt: null, source: arithmetic,\n"
        "             source_kwargs: {n_tasks: 6, n_operands: 2, min_digits: 1, max_digits: 1,\n"
        "                             operators: '+'}}\n"
    )
    args = ["--model", str(tiny_model_path), "--suite", str(suite), "--engine", "sglang",
            "--sglang-url", server.urls[0], "--sglang-allow-unseeded",
            "--samples", "2", "--temperature", "1.0",
            "--max-new-tokens", "6", "--out", str(tmp_path / "out"), "--no-progress"]
    assert eval_main(args) == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["models"][0]["metrics"]


def test_training_on_the_real_server_keeps_the_gap_at_fp32_level(server, tiny_model_path,
                                                                  tmp_path):
    """Three GRPO steps with rollout.engine=sglang: weights synced at start and after every
    step (gloo broadcast), each step's engine-vs-learner gap stays at the fp32 level."""
    from rlvr.config import load_config
    from rlvr.metrics import read_jsonl
    from rlvr.trainer import train

    config = load_config(QUICKSTART, short_run_overrides(tiny_model_path, tmp_path,
                                                         server.urls[0], 3))
    try:
        train(config, log=lambda *_: None)
        rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/logprob_diff" in r]
        assert len(rows) == 3
        diffs = [r["rollout/logprob_diff"] for r in rows]
        print(f"\n[test_sglang_real] trainer on sglang: logprob_diff per step {diffs}, "
              f"sync s {[round(r.get('time/sync', 0), 3) for r in rows]}")
        assert max(diffs) < 1e-4
    finally:
        server.update_weights(str(tiny_model_path))


def test_the_gateway_serves_openai_clients_on_real_sglang(server, tiny_model, tiny_tokenizer):
    """The gateway in front of the real server: chat with n and logprobs, streaming, token-id
    completions; the returned logprobs are the server's, equal to transformers' at fp32."""
    import openai

    from rlvr.agents.gateway import Gateway
    from rlvr.agents.gateway.server import GatewayServer

    gateway = Gateway(server, tiny_tokenizer, model_name="tiny")
    user = [{"role": "user", "content": "what is two plus two"}]
    with GatewayServer(gateway) as srv:
        episode = gateway.open_episode()
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        on_episode = openai.OpenAI(base_url=srv.url.replace(
            "/v1", f"/episodes/{episode.capture.key}/v1"), api_key="x", max_retries=0)
        out = on_episode.chat.completions.create(model="tiny", messages=user, n=2, max_tokens=8,
                                                 temperature=1.0, logprobs=True)
        [call] = episode.capture.calls
        assert call.prompt_ids == gateway.templates.render(user, None)
        for choice, kept in zip(out.choices, call.choices):
            got = [t.logprob for t in choice.logprobs.content]
            assert got == pytest.approx(kept.logprobs[: len(got)], abs=1e-6)
            ref = _logprobs(tiny_model, call.prompt_ids, kept.token_ids, 1.0)
            assert float((ref - torch.tensor(kept.logprobs)).abs().max()) < TOL
        chunks = list(client.chat.completions.create(model="tiny", messages=user, max_tokens=6,
                                                     stream=True))
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        text = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=5,
                                         temperature=0)
        greedy = asyncio.run(server.generate(PROMPTS[0], SamplingParams(
            temperature=0, max_new_tokens=5, stop_token_ids=tuple(sorted(
                gateway.templates.end_ids)))))
        assert text.choices[0].text == gateway.templates.reply_text(greedy.token_ids, ())[0]


def test_an_agent_function_on_real_sglang_is_token_exact(server, tiny_model, tiny_tokenizer):
    from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
    from rlvr.envs.agent_env import AgentEnv
    from rlvr.verifiers import Verdict

    async def two_turn_agent(client, task):
        messages = list(task.messages)
        for _ in range(2):
            reply = await client.chat.completions.create(model="policy", messages=messages)
            messages += [reply.choices[0].message.model_dump(exclude_none=True),
                         {"role": "user", "content": "are you sure?"}]
        return reply.choices[0].message.content

    def grade(answer, task):
        return Verdict(score=1.0, passed=True, reason="correct")

    tasks = [{"id": "q", "question": "what is two plus two"}]
    runner = EpisodeRunner(server, tiny_tokenizer, RunnerConfig(
        max_turns=3, max_tokens_per_turn=8, max_response_tokens=200, check_token_exact=True))
    try:
        trajs = runner.run([EpisodeSpec(env_factory=lambda: AgentEnv(
            two_turn_agent, source=tasks, verifier=grade), seed=0)], group_size=3)
    finally:
        runner.close()
    for traj in trajs:
        assert traj.finish_reason == "stop" and traj.reward == 1.0 and not traj.extra_rows
        assert traj.outcome.turns == 2
        mask = torch.tensor(traj.response_mask, dtype=torch.bool)
        ref = _logprobs(tiny_model, traj.prompt_ids, traj.response_ids, 1.0)
        assert float((ref - torch.tensor(traj.rollout_logprobs))[mask].abs().max()) < TOL


@pytest.mark.parametrize("weight_sync", ["disk", "distributed"])
def test_inflight_continue_keeps_the_cache_and_later_tokens_carry_the_new_version(
        server, tiny_model_path, tiny_model, tmp_path, weight_sync):
    """``/pause_generation`` in place, update with a weight version, ``/continue_generation``:
    the running requests go on; the tokens before the update carry version 0 and the old
    weights' logprobs, those after carry version 1 (sglang's ``weight_versions`` spans) and the
    logprobs of the new weights over the KV cache the old ones wrote."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    # every HTTP thread busy with a paused /generate: the update must not need one of them
    sg = _attach(server, weight_sync=weight_sync, sync_dir=tmp_path / "sync",
                 max_concurrency=len(PROMPTS))
    sp = SamplingParams(temperature=1.0, max_new_tokens=400)
    try:
        outs, seconds = generate_through_an_inflight_update(
            sg, trained.state_dict().items(), "continue", PROMPTS, sp)
        mixed = 0
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort" and out.regenerated == 0
            k = out.versions.count(0)
            assert out.versions == [0] * k + [1] * (len(out.token_ids) - k)
            got = torch.tensor(out.logprobs)
            if k:
                before = _logprobs(tiny_model, prompt, out.token_ids[:k], 1.0)
                assert (before - got[:k]).abs().max() < TOL
            if 0 < k < len(out.token_ids):
                mixed += 1
                after = continued_logprobs(tiny_model, trained, prompt, out.token_ids, k)
                assert (after - got[k:]).abs().max() < TOL
        print(f"\n[test_sglang_real] in-flight continue ({weight_sync}): {seconds:.2f} s, "
              f"{mixed}/{len(outs)} requests span the update")
        assert mixed >= 1, [(len(o.token_ids), o.versions.count(0)) for o in outs]
    finally:
        sg.update_weights(str(tiny_model_path))  # back to the module's weights (flushed)
        sg.close()


def test_inflight_abort_regenerates_under_the_new_version(server, tiny_model_path, tiny_model,
                                                          tmp_path):
    """``/pause_generation`` abort, update, continue: the requests that were running come back
    aborted and are sent again: every token carries version 1 and the new weights' logprobs."""
    from transformers import AutoModelForCausalLM

    trained = _train_step(AutoModelForCausalLM.from_pretrained(tiny_model_path,
                                                               dtype=torch.float32))
    sg = _attach(server, weight_sync="disk", sync_dir=tmp_path / "sync",
                 max_concurrency=len(PROMPTS))
    sp = SamplingParams(temperature=1.0, max_new_tokens=400)
    try:
        outs, seconds = generate_through_an_inflight_update(
            sg, trained.state_dict().items(), "abort", PROMPTS, sp)
        assert sg.regenerated == sum(o.regenerated for o in outs) >= 1
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort"
            if out.regenerated:
                assert out.versions == [1] * len(out.token_ids)
                gap = (_logprobs(trained, prompt, out.token_ids, 1.0)
                       - torch.tensor(out.logprobs)).abs().max()
                assert gap < TOL
        print(f"\n[test_sglang_real] in-flight abort: {seconds:.2f} s, {sg.regenerated} "
              f"requests regenerated")
    finally:
        sg.update_weights(str(tiny_model_path))
        sg.close()


@pytest.mark.parametrize("inflight", ["off", "continue", "abort"])
def test_async_training_on_the_real_server_with_inflight_updates(server, tiny_model_path,
                                                                 tmp_path, inflight):
    """rollout.max_staleness=1 with the sglang engine: the producer plays ahead on the server,
    the learner's weights reach it between steps and mid-generation (``inflight``); every
    episode is trained once, no row is staler than 1, and the first step (played by the
    weights the learner started from) passes the sync guard at the fp32 level."""
    from rlvr.config import load_config
    from rlvr.trainer import Trainer

    config = load_config(QUICKSTART, [
        *short_run_overrides(tiny_model_path, tmp_path, server.urls[0], 3),
        "rollout.max_staleness=1", "actor.tis_cap=2.0", f"rollout.inflight_update={inflight}",
    ])
    trainer = Trainer(config, log=lambda *_: None)
    try:
        history = trainer.train().history
        assert_every_episode_trained_once(trainer, history, steps=3)
        # every version the server came to hold was proven by the probe (version_probe)
        proven = [m["sync/probe_logprob_diff"] for m in history if "sync/probe_logprob_diff" in m]
        assert proven and max(proven) < 1e-4 and history[-1]["sync/probe_checks"] >= 1
        print(f"\n[test_sglang_real] async {inflight} on sglang: in-flight updates "
              f"{history[-1].get('async/inflight_updates', 0):.0f}, regenerated "
              f"{history[-1].get('async/regenerated', 0):.0f}, stale tokens "
              f"{[round(m['async/stale_token_frac'], 2) for m in history]}")
    finally:
        server.update_weights(str(tiny_model_path))


def test_two_ranks_play_asynchronously_on_one_server(server, tiny_model_path, tmp_path,
                                                     run_process_group):
    """``torchrun --nproc_per_node=2`` asynchronous RL on one real server shared by both ranks
    (``sglang_two_rank_worker.py``): rank 0's producer loads the weights and names their
    version, rank 1's waits for it; both ranks' rows carry the server's versions, stay within
    k = 1, every episode is trained once, and rank 0's probe proves what the server holds. The
    server starts with a version an earlier run named, higher than this run's."""
    import json
    import sys

    worker = Path(__file__).parent / "sglang_two_rank_worker.py"
    server.set_weight_version(7)  # as an earlier run may leave it: no follower may trust it
    try:
        run_process_group(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
             str(worker), str(tmp_path), server.urls[0], str(tiny_model_path), "continue"],
            cwd=Path(__file__).parents[2], env=dict(os.environ, OMP_NUM_THREADS="1"),
            timeout=400, check=True)
    finally:
        server.update_weights(str(tiny_model_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["follower"] for r in ranks] == [False, True]
    for rank in ranks:
        assert rank["versioned"] and rank["accounted"]
        assert rank["trained"] == rank["started"] == 3 * 2 * 2  # 2 prompts x 2 per rank and step
        assert rank["dropped"] == {"stale": 0, "untrained": 0}
        for step, versions in rank["versions"].items():  # the server's versions, within k = 1
            assert versions and int(step) - 2 <= min(versions) <= max(versions) <= int(step) - 1
    h0, h1 = ranks[0]["history"], ranks[1]["history"]
    for a, b in zip(h0, h1):
        keys = [k for k in a if k.startswith(("async/episodes", "async/dropped", "sync/probe",
                                              "async/staleness"))]
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    proven = [m["sync/probe_logprob_diff"] for m in h0 if "sync/probe_logprob_diff" in m]
    assert proven and max(proven) < 1e-4
    assert "eval/accuracy" in h0[1]

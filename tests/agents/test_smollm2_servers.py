"""The imported SmolLM2-135M-Instruct folder served: by ``rlvr serve`` and by a real CPU sglang.

``rlvr serve --model FILE.gguf`` imports (once) and serves the file; the real sglang 0.5.23
server (its own venv, ``RLVR_SGLANG_PYTHON``) loads the imported folder and its float32
logprobs equal transformers' on the same tokens, its greedy tokens are transformers' argmax.
Both take minutes on 2 CPU cores: they run with ``RLVR_SMOLLM2_FULL=1`` (not in CI).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sglang_real_helpers import many, require_venv

from rlvr.agents.engine import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4  # float32 server vs float32 transformers (the tiny model: max 6.7e-6 per token)
QUESTIONS = ["What is 17 + 25?", "Name a colour.", "What is 3 + 4?", "Say hello."]


@pytest.mark.slow
def test_rlvr_serve_serves_the_gguf_file(smollm2_full, smollm2_gguf, smollm2_path):
    import openai

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr.cli", "serve", "--model", str(smollm2_gguf), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        client = openai.OpenAI(base_url=match.group(1), api_key="none", max_retries=0)
        assert client.models.list().data[0].id == smollm2_path.name
        out = client.chat.completions.create(
            model="x", max_tokens=8, temperature=0,
            messages=[{"role": "user", "content": "What is 17 + 25?"}])
        assert out.choices[0].message.content.strip()
        assert 1 <= out.usage.completion_tokens <= 8
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


@pytest.mark.slow
def test_real_sglang_serves_the_imported_folder_with_transformers_logprobs(smollm2_full,
                                                                          smollm2_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.agents.sglang import SGLangEngine

    python = require_venv("test_smollm2_servers")
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}],
                                       add_generation_prompt=True, tokenize=True,
                                       return_dict=False) for q in QUESTIONS]
    engine = SGLangEngine.launch(smollm2_path, python=python, device="cpu",
                                 log_path=tmp_path / "server.log", startup_timeout_s=540,
                                 allow_unseeded=True)
    try:
        for sampling in (SamplingParams(temperature=0, max_new_tokens=8),
                         SamplingParams(temperature=1.0, max_new_tokens=8)):
            outs = asyncio.run(many(engine, prompts, sampling))
            for prompt, out in zip(prompts, outs):
                assert out.token_ids and len(out.token_ids) == len(out.logprobs)
                ids = torch.tensor([prompt + out.token_ids])
                with torch.no_grad():
                    logits = model(ids).logits[0, len(prompt) - 1: -1].float()
                logp = torch.log_softmax(logits, -1).gather(
                    1, torch.tensor(out.token_ids)[:, None])[:, 0]
                assert (logp - torch.tensor(out.logprobs)).abs().max().item() < TOL
                if sampling.greedy:
                    assert logits.argmax(-1).tolist() == out.token_ids
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize("weight_sync", ["distributed", "disk"])
def test_smollm2_trains_on_a_real_sglang_server_with_every_sync_proven(smollm2_full,
                                                                       smollm2_gguf, tmp_path,
                                                                       weight_sync):
    """Two GRPO steps of the SmolLM2 recipe with a real CPU sglang server as the engine: after
    step 1's update the server samples step 2 with the new weights (the sync guard's gap,
    measured on the server's own logprobs, stays at float32 noise)."""
    from rlvr.config import load_config
    from rlvr.trainer import train

    python = require_venv("test_smollm2_servers")
    config = load_config(ROOT / "configs" / "smollm2_quickstart.yaml", [
        f"model.path={smollm2_gguf}", f"trainer.output_dir={tmp_path / 'run'}",
        "trainer.steps=2", "trainer.threads=1", "eval.every=0", "eval.tasks=2",
        "eval.max_new_tokens=4", "rollout.prompts_per_step=4", "rollout.group_size=2",
        "actor.optim.lr=1e-5", "actor.micro_batch_size=8", "rollout.engine=sglang",
        "actor.entropy_coef=0.01",  # a gradient even when every reward of step 1 is equal
        f"rollout.sglang.python={python}", "rollout.sglang.allow_unseeded=true",
        f"rollout.sglang.weight_sync={weight_sync}", "rollout.sglang.startup_timeout_s=540",
        "trainer.progress=false"])
    result = train(config, log=lambda *_: None)
    first, second = result.history
    assert first["actor/grad_norm"] > 0  # a real update, synced before step 2's rollout
    assert second["rollout/logprob_diff"] < TOL, second["rollout/logprob_diff"]

"""Real SGLang on a GPU (NCCL weight sync, memory saver, seeds): runs only with CUDA and sglang.

Never run on this project's machines (no GPU); the CPU-runnable parts run against a real server
in tests/agents/test_sglang_real.py.
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="needs sglang"),
]


def test_real_sglang_matches_the_logprob_convention(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
    from rlvr.agents.sglang.engine import SGLangEngine

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    engine = SGLangEngine.launch(tiny_model_path, device="cuda", mem_fraction_static=0.3,
                                 deterministic=True, bucket_bytes=1 << 20,
                                 extra_args=["--dtype", "float32", "--disable-cuda-graph"],
                                 log_path=tmp_path / "sglang.log", startup_timeout_s=600)
    try:
        prompt = tok.apply_chat_template([{"role": "user", "content": "1+1="}],
                                         add_generation_prompt=True, tokenize=True)["input_ids"]
        sp = SamplingParams(temperature=0.8, max_new_tokens=16, seed=3)
        out = asyncio.run(engine.generate(list(prompt), sp))
        assert 0 < len(out.token_ids) == len(out.logprobs) <= 16
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        ids = torch.tensor([list(prompt) + out.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1] / 0.8
        mine = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        assert (mine - torch.tensor(out.logprobs)).abs().max().item() < 2e-2
        if out.finish_reason == "stop":  # the stop token is part of the completion
            assert out.token_ids[-1] == tok.eos_token_id
        again = asyncio.run(engine.generate(list(prompt), sp))
        assert again.token_ids == out.token_ids  # sampling_seed makes it reproducible
        engine.update_weights(str(tiny_model_path))
        engine.release_memory()
        engine.resume_memory()  # weights survive (--enable-weights-cpu-backup) ...
        engine.update_weights(model.state_dict().items())  # ... and NCCL buckets re-push them
        assert asyncio.run(engine.generate(list(prompt), sp)).token_ids == out.token_ids
        env_mod = pytest.importorskip("rlvr.envs.tool_env")
        runner = EpisodeRunner(engine, tok, RunnerConfig(max_turns=2, max_tokens_per_turn=16,
                                                         check_token_exact=True))
        trajs = runner.run([EpisodeSpec(env_factory=env_mod.ToolUseEnv, seed=i)
                            for i in range(4)], group_size=2)
        assert len(trajs) == 8
    finally:
        engine.close()


def test_real_sglang_serves_the_lora_adapter_it_is_synced(tiny_model_path, tmp_path):
    """A LoRA policy on a launched GPU server: the adapter is loaded by name (no merged weights)
    and the server's logprobs are the adapted model's, not the base's."""
    from transformers import AutoModelForCausalLM

    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.engine_registry import EngineRequest, build_engine
    from rlvr.agents.sglang import SGLangOptions
    from rlvr.learner.lora import LoraConfig, adapter_state, apply_lora

    lora = LoraConfig(rank=4, alpha=8.0)
    built = build_engine(EngineRequest(
        engine="sglang", model_path=tiny_model_path, work_dir=tmp_path, lora=lora.peft_kwargs(),
        options=SGLangOptions(launch_args=["--dtype", "float32", "--disable-cuda-graph",
                                           "--mem-fraction-static", "0.3"],
                              allow_unseeded=True, startup_timeout_s=600)))
    engine = built.engine
    try:
        assert built.serves_adapter
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        adapted = apply_lora(AutoModelForCausalLM.from_pretrained(
            tiny_model_path, dtype=torch.float32), lora).eval()
        torch.manual_seed(0)
        for name, param in adapted.named_parameters():
            if ".lora_B." in name:
                param.data.normal_(0, 0.05)
        prompt = [5, 17, 40, 9, 100]
        sp = SamplingParams(temperature=1.0, max_new_tokens=12)
        for _ in range(2):  # the second sync loads a new name and unloads the first
            engine.update_weights(adapter_state(iter(adapted.state_dict().items())))
            out = asyncio.run(engine.generate(prompt, sp))
            ids = torch.tensor([prompt + out.token_ids])
            gaps = []
            for model in (adapted, base):
                with torch.no_grad():
                    logits = model(ids).logits[0, len(prompt) - 1: -1]
                mine = torch.log_softmax(logits, -1).gather(
                    1, torch.tensor(out.token_ids)[:, None])[:, 0]
                gaps.append((mine - torch.tensor(out.logprobs)).abs().max().item())
            assert gaps[0] < 2e-2 < gaps[1]
        assert engine.lora_name is not None and engine.lora_name.endswith("-v2")
    finally:
        engine.close()

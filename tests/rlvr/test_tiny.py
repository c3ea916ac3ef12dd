import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.tiny import TinyModelSpec, tiny_model_dir


def test_tiny_model_loads_with_plain_transformers(tiny_model_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert model.config.model_type == "qwen2"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ids = tok("12+7=", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["1", "2", "+", "7", "="]
    out = model(torch.tensor([ids])).logits
    assert out.shape == (1, 5, model.config.vocab_size)
    assert model.config.vocab_size == len(tok)


def test_chat_template_is_chatml_and_prefix_stable(tiny_model_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "1+1="}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n1+1=<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    longer = msgs + [
        {"role": "assistant", "content": "2"},
        {"role": "tool", "name": "t", "content": "r"},
    ]
    full = tok.apply_chat_template(longer, tokenize=False)
    assert full.startswith(text + "2<|im_end|>\n")
    assert full.endswith("<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n")


def test_tools_are_rendered_in_the_system_turn(tiny_model_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tool = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    text = tok.apply_chat_template([{"role": "user", "content": "q"}], tools=[tool], tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert json.dumps(tool) in text


def test_build_is_deterministic_and_cached(tmp_path):
    spec = TinyModelSpec(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, vocab_size=320, seed=3)
    a = tiny_model_dir(spec, cache_dir=tmp_path / "a")
    b = tiny_model_dir(spec, cache_dir=tmp_path / "b")
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert tiny_model_dir(spec, cache_dir=tmp_path / "a") == a


def test_bad_spec_names_the_field():
    with pytest.raises(ValueError, match="hidden_size .* divisible by num_attention_heads"):
        TinyModelSpec(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="num_hidden_layers must be > 0; got 0"):
        TinyModelSpec(num_hidden_layers=0)

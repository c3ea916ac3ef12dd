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


_BUILD_AND_LOAD = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer, __version__
from rlvr.tiny import TinyModelSpec, tiny_model_dir
spec = TinyModelSpec(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, intermediate_size=64, vocab_size=320, seed=5)
path = tiny_model_dir(spec, cache_dir=sys.argv[1])
AutoTokenizer.from_pretrained(path)
AutoModelForCausalLM.from_pretrained(path)
print(__version__, path)
"""


def _other_transformers() -> tuple[dict[str, str], str]:
    """Environment variables running this interpreter on another transformers release, and why.

    Under one of ``bash dev.sh compat``'s overlays (a ``pip --target`` directory first on
    PYTHONPATH) the other release is the main environment's; in the main environment it is an
    overlay of another major version from the compat cache (``$RLVR_COMPAT_CACHE`` or
    ``~/.cache/rlvr/compat``). Skips when neither is here.
    """
    import os
    from pathlib import Path

    import transformers

    here = Path(transformers.__file__).resolve().parent.parent
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(Path(p).resolve() == here for p in path):  # we run on an overlay: the other is main
        rest = [p for p in path if Path(p).resolve() != here]
        return {"PYTHONPATH": os.pathsep.join(rest)}, "main"
    cache = Path(os.environ.get("RLVR_COMPAT_CACHE", Path.home() / ".cache" / "rlvr" / "compat"))
    major = transformers.__version__.split(".")[0]
    for overlay in sorted(cache.glob("tf-*/site")):
        version = overlay.parent.name.split("-")[1]
        if (overlay.parent / ".complete").exists() and version.split(".")[0] != major:
            root = str(Path(__file__).resolve().parents[2])
            return {"PYTHONPATH": os.pathsep.join([str(overlay), root, *path])}, version
    pytest.skip(f"no transformers release of another major version than {transformers.__version__}"
                f" here: `bash dev.sh compat` installs them under {cache}")


def test_one_cache_serves_two_transformers_versions(tmp_path):
    """A tiny model cached by transformers 5.x must not be handed to 4.x (it cannot load it)."""
    import os
    import subprocess
    import sys

    import transformers

    from rlvr.tiny import TinyModelSpec, tiny_model_dir

    env, other = _other_transformers()
    cache = tmp_path / "cache"

    def other_builds_and_loads() -> str:
        done = subprocess.run([sys.executable, "-c", _BUILD_AND_LOAD, str(cache)],
                              env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"transformers {other}: {done.stderr[-3000:]}"
        return done.stdout.split()[-1]

    spec = TinyModelSpec(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, vocab_size=320, seed=5)

    def we_build_and_load() -> str:
        path = tiny_model_dir(spec, cache_dir=cache)
        AutoTokenizer.from_pretrained(path)
        AutoModelForCausalLM.from_pretrained(path)
        return str(path)

    ours = we_build_and_load()
    theirs = other_builds_and_loads()  # 4.x over a 5.x build: "TokenizersBackend" unless keyed
    assert ours != theirs, f"transformers {transformers.__version__} and {other} share {ours}"
    assert we_build_and_load() == ours  # each finds its own build again


def test_tool_prompt_line_renders_tools_as_the_compact_envs_tool_line(tmp_path):
    """``tool_prompt: line``: a ``tools=`` request is token for token the env's tool line."""
    from rlvr.envs.compact_tool_env import CompactToolUseEnv

    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 320, "seed": 3}
    hermes = tiny_model_dir(TinyModelSpec(**small), cache_dir=tmp_path)
    line = tiny_model_dir(TinyModelSpec(**small, tool_prompt="line"), cache_dir=tmp_path)
    assert hermes != line
    assert (hermes / "model.safetensors").read_bytes() == (line / "model.safetensors").read_bytes()
    tok = AutoTokenizer.from_pretrained(line)
    env = CompactToolUseEnv()
    messages, info = env.reset(seed=0)
    assert "tools" not in info and messages[0]["content"] == "Tools: calculator(expression)"
    native = CompactToolUseEnv(announce="template")
    question, info = native.reset(seed=0)
    assert question == messages[1:]
    as_line = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    as_tools = tok.apply_chat_template(question, tools=info["tools"], add_generation_prompt=True,
                                       tokenize=False)
    assert as_tools == as_line
    with_system = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, *question],
        tools=info["tools"] + [{"type": "function", "function": {"name": "now"}}], tokenize=False)
    assert with_system.startswith("<|im_start|>system\nS\nTools: calculator(expression), now()"
                                  "<|im_end|>\n")
    plain = AutoTokenizer.from_pretrained(hermes)
    assert "# Tools" in plain.apply_chat_template(question, tools=info["tools"], tokenize=False)


def test_an_unknown_tool_prompt_names_the_field():
    with pytest.raises(ValueError,
                       match="tool_prompt: unknown value 'json'; allowed: hermes, line"):
        TinyModelSpec(tool_prompt="json")

"""A tiny Qwen2-architecture model and tokenizer, built locally: no download, seeded, cached.

The CPU quickstart and the tests need a real causal LM with a real chat template but cannot fetch
one from a hub. ``tiny_model_dir(spec)`` returns a HuggingFace directory (config, safetensors
weights, ``tokenizer.json`` and a chat template) that ``AutoModelForCausalLM`` and
``AutoTokenizer`` load like any other; it is built once per spec and cached under
``$RLVR_CACHE`` (default ``~/.cache/rlvr``).

The cache is keyed by the spec and by the library versions the files depend on
(``format_key``): transformers 5.x writes ``"tokenizer_class": "TokenizersBackend"``, which 4.x
cannot load, and the seeded weight initialisation and the trained BPE are code of transformers
and tokenizers. So one cache serves several transformers versions side by side, and a cached
directory is always what a fresh build in the running environment would write.

The tokenizer is a byte-level BPE whose pre-tokenizer splits every digit on its own (so numbers
are spelled digit by digit, which makes arithmetic learnable for a tiny model), trained on a small
seeded synthetic corpus. The chat template follows Qwen2.5's ChatML layout, with tool schemas in
the system turn, ``<tool_call>`` blocks from the assistant and ``<tool_response>`` blocks for tool
results. Deviations from Qwen2.5: no default system prompt, and past assistant turns are rendered
verbatim (prefix-stable), which is what token-exact multi-turn rollouts need. With
``tool_prompt="line"`` the tools are one system line, ``Tools: calculator(expression)`` (19
tokens where Qwen2.5's schema section costs ~380 for that one tool), the line
rlvr/CompactToolUse-v0 writes, so a ``tools=`` request reads what that env's warm-up taught.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from rlvr.config_checks import bounded, check_choice, check_fields
from rlvr.errors import ConfigError

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

_HERMES_TOOLS = (
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
#: ``tool_prompt: line``: the tools as one system line, ``Tools: calculator(expression)``, as
#: ``rlvr.envs.compact_tool_env.tool_line`` writes it (after the system message, if any).
_LINE_TOOLS = (
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "Tools: {% for tool in tools %}"
    "{% set f = tool.function if tool.function is defined else tool %}"
    "{{ f.name }}({{ ((f.parameters or {}).properties or {}) | join(', ') }})"
    "{% if not loop.last %}, {% endif %}{% endfor %}<|im_end|>\n"
)
_CHAT_TEMPLATE = (
    "{% if tools %}"
    "@TOOLS@"
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: How ``tools`` are rendered, by ``TinyModelSpec.tool_prompt``.
TOOL_PROMPTS = {"hermes": _HERMES_TOOLS, "line": _LINE_TOOLS}
#: The default (``tool_prompt: hermes``) chat template.
CHAT_TEMPLATE = _CHAT_TEMPLATE.replace("@TOOLS@", _HERMES_TOOLS)


def chat_template(tool_prompt: str = "hermes") -> str:
    """The tiny model's chat template with ``tools`` rendered as ``tool_prompt`` says."""
    return _CHAT_TEMPLATE.replace("@TOOLS@", TOOL_PROMPTS[tool_prompt])

_WORDS = (
    "the answer is what compute calculate find sum product difference of and a an to in for with "
    "number numbers value total result question please step let us add subtract multiply divide "
    "plus minus times equals def return print input python function code test tests list int str "
    "if else elif for while range len import from class self true false none error wrong correct "
    "try again feedback attempt tool tools call calculator search lookup document population city "
    "country capital year born river mountain height area you are helpful assistant user system "
    "reason think solve write program output expected got failed passed boxed frac sqrt answer: "
    "#### name arguments expression query result: x y z n k i j"
).split()


@dataclass(frozen=True, kw_only=True)
class TinyModelSpec:
    """The shape of a tiny Qwen2 model and its tokenizer.

    Attributes:
        hidden_size: width of the residual stream.
        num_hidden_layers: decoder layers.
        num_attention_heads: query heads (hidden_size must divide by it).
        num_key_value_heads: key/value heads (grouped-query attention).
        intermediate_size: MLP width.
        vocab_size: BPE vocabulary size target (special and added tokens come on top).
        max_position_embeddings: longest sequence the rotary embedding is configured for.
        seed: seeds the tokenizer corpus and the weight initialisation.
        tool_prompt: how the chat template renders a request's ``tools``: ``hermes``
            (Qwen2.5's tool section with each JSON schema, ~150 tokens for the calculator
            alone) or ``line`` (one system line, ``Tools: calculator(expression)``: the tokens
            rlvr/CompactToolUse-v0 writes, so an agent that passes ``tools=`` sees what the
            warm-up taught).
    """

    #: Caveats the configuration reference prints (``rlvr.config.docs``).
    CAVEATS: ClassVar[dict[str, str]] = {"": "Used only when `model.path` is null."}

    hidden_size: int = bounded(192, gt=0)
    num_hidden_layers: int = bounded(4, gt=0)
    num_attention_heads: int = bounded(6, gt=0)
    num_key_value_heads: int = bounded(2, gt=0)
    intermediate_size: int = bounded(512, gt=0)
    vocab_size: int = bounded(400, ge=300)  # 256 bytes + merges
    max_position_embeddings: int = bounded(1024, gt=0)
    seed: int = 0
    tool_prompt: str = "hermes"

    def __post_init__(self) -> None:
        check_fields(self)
        check_choice("tool_prompt", self.tool_prompt, TOOL_PROMPTS)
        for name, heads in (("hidden_size", "num_attention_heads"),
                            ("num_attention_heads", "num_key_value_heads")):
            if getattr(self, name) % getattr(self, heads):
                raise ConfigError(f"{name} ({getattr(self, name)}) must be divisible by {heads} "
                                  f"({getattr(self, heads)})", key=name)

    def key(self) -> str:
        """A short content hash naming this spec's cache directory."""
        fields = asdict(self)
        if self.tool_prompt == "hermes":  # the key of the directories built before the field
            del fields["tool_prompt"]
        blob = json.dumps(fields, sort_keys=True) + "|v1|" + chat_template(self.tool_prompt)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def format_key() -> str:
    """The library versions a built directory's files depend on, as a directory-name suffix.

    transformers decides the tokenizer config's format and the weights' initialisation;
    tokenizers trains the BPE and writes ``tokenizer.json``.
    """
    import tokenizers
    import transformers

    return f"tf{transformers.__version__}-tok{tokenizers.__version__}"


def cache_root() -> Path:
    """Where built tiny models live: ``$RLVR_CACHE`` or ``~/.cache/rlvr``."""
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr"))


def _corpus(seed: int, n: int = 6000) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        lines.append(f"{words} {a}{op}{b}= {rng.randint(0, 99999)}")
        lines.append(f'<tool_call>\n{{"name": "{rng.choice(_WORDS)}", "arguments": '
                     f'{{"expression": "{a} {op} {b}"}}}}\n</tool_call>')
    return lines


def build_tokenizer(spec: TinyModelSpec):
    """Train the digit-splitting byte-level BPE tokenizer and wrap it for transformers.

    Returns:
        A ``PreTrainedTokenizerFast`` with pad/eos set and the chat template attached.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    tok.add_tokens(ADDED_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template(spec.tool_prompt)
    return fast


def build_model(spec: TinyModelSpec, vocab_size: int, pad_token_id: int, eos_token_id: int):
    """A freshly initialised ``Qwen2ForCausalLM`` of the given shape (seeded)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = {k: v for k, v in asdict(spec).items()
             if k not in ("vocab_size", "seed", "tool_prompt")}
    config = Qwen2Config(vocab_size=vocab_size, **shape, tie_word_embeddings=True,
                         pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    return model


def tiny_model_dir(spec: TinyModelSpec | None = None, cache_dir: str | Path | None = None) -> Path:
    """Return the directory of the tiny model for ``spec``, building it on first use.

    The build is atomic (a temporary directory renamed into place), so concurrent callers and
    interrupted builds never leave a half-written model behind.

    Args:
        spec: the model shape; the default spec if omitted.
        cache_dir: overrides ``cache_root()``.

    Returns:
        A directory loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``.
    """
    spec = spec or TinyModelSpec()
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / "tiny" / f"{spec.key()}-{format_key()}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.key()}-", dir=root / "tiny"))
    try:
        tokenizer = build_tokenizer(spec)
        model = build_model(spec, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "rlvr_tiny_spec.json").write_text(json.dumps(asdict(spec), indent=2))
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target

"""A tiny model taught one tool conversation, so real clients see real tool calls.

The random tiny model never writes a ``<tool_call>``; a few dozen Adam steps on two rendered
conversations (a call to ``add``, then an answer after the tool's result) make its greedy output
exactly those turns, through the real engine and gateway.
"""

from __future__ import annotations

import json

import torch

# exactly what pydantic-ai sends for ``def add(a: int, b: int) -> int: """Add two integers."""``
ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"additionalProperties": False,
                   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "type": "object"},
    "strict": True}}
QUESTION = "What is 2 plus 3?"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER = "Answer: 5"


def tool_conversations():
    """The two (prompt messages, assistant text) pairs the model learns."""
    first = [{"role": "user", "content": QUESTION}]
    second = [*first, {"role": "assistant", "content": CALL},
              {"role": "tool", "name": "add", "content": "5"}]
    return [(first, CALL), (second, ANSWER)]


def tool_model(tokenizer):
    """A one-layer tiny Qwen2 (the tiny tokenizer's vocabulary) taught the tool conversation."""
    from rlvr.tiny import TinyModelSpec, build_model

    torch.manual_seed(0)
    spec = TinyModelSpec(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=128)
    model = build_model(spec, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    teach_tool_use(model, tokenizer)
    return model


def teach_tool_use(model, tokenizer, steps: int = 80, conversations=None) -> None:
    """Fit ``model`` (in place) to answer the conversations greedily, with ADD_TOOL offered.

    ``conversations``: (prompt messages, assistant text) pairs; default ``tool_conversations()``.
    """
    rows = []
    for messages, reply in conversations or tool_conversations():
        prompt = tokenizer.apply_chat_template(messages, tools=[ADD_TOOL],
                                               add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if not isinstance(prompt, list) else prompt)
        target = tokenizer.encode(reply, add_special_tokens=False)
        target += [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        rows.append((prompt, target))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = 0.0
        for prompt, target in rows:
            ids = torch.tensor([prompt + target])
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
            loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(target))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def arguments(call) -> dict:
    return json.loads(call.function.arguments)

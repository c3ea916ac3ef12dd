"""Fixtures for the agents tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def engine(tiny_model, tiny_tokenizer):
    from rlvr.agents.hf.engine import TransformersEngine

    eng = TransformersEngine(tiny_model, tiny_tokenizer, max_batch_size=16)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def frequent_stops(tiny_tokenizer) -> tuple[int, ...]:
    """Ids ending a turn early: the random tiny model rarely emits eos, so a quarter of the
    ordinary vocabulary stops generation (turns of ~4 tokens, finish reason "stop")."""
    special = set(tiny_tokenizer.all_special_ids) | set(
        tiny_tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>", "<tool_response>",
                                              "</tool_response>"])
    )
    return tuple(i for i in range(len(tiny_tokenizer)) if i % 4 == 1 and i not in special)


@pytest.fixture(scope="session")
def tool_engine(tiny_tokenizer):
    """The transformers engine on a one-layer tiny model taught one tool conversation
    (``gateway_helpers.tool_model``): greedy requests get real tool calls."""
    from gateway_helpers import tool_model

    from rlvr.agents.hf.engine import TransformersEngine

    engine = TransformersEngine(tool_model(tiny_tokenizer), tiny_tokenizer, max_batch_size=16)
    yield engine
    engine.close()

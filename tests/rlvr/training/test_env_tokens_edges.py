"""``EnvTokenGuard`` with tokenizers lacking the ``<tool_response>`` tags, and its edge cases.

Each test asserts what the guard must do; together they fail on every small change of
``rlvr.training.env_tokens`` (``bash dev.sh mutate rlvr/training/env_tokens.py``).
"""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rlvr.batch import RolloutBatch
from rlvr.errors import BatchError
from rlvr.training.env_tokens import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    EnvTokenGuard,
    tool_result_positions,
)
from rlvr.trajectory import Trajectory


def byte_tokenizer(*added: str, bos: bool = False) -> PreTrainedTokenizerFast:
    """A real byte-level tokenizer without merges (one token per byte), plus ``added`` tokens;
    with ``bos``, encoding with special tokens prepends ``<s>`` (as Llama's tokenizers do)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)} | {"<s>": len(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", len(alphabet))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")
    if added:
        fast.add_tokens(list(added), special_tokens=True)
    return fast


def _batch(response, mask, scores=None, advantages=None) -> RolloutBatch:
    traj = Trajectory(prompt_ids=[1, 2], response_ids=list(response), response_mask=list(mask),
                      rollout_logprobs=[0.0] * len(response),
                      token_level_scores=list(scores or [0.0] * len(response)))
    batch = RolloutBatch.from_trajectories([traj], pad_token_id=0)
    if advantages is not None:
        batch.set("advantages", torch.tensor([advantages], dtype=torch.float32))
    return batch


def _env_result(tokenizer) -> tuple[list[int], list[int]]:
    """Model tokens, then an env tool result (mask 0), then model tokens again."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    model, env = enc("ab"), enc(f"{TOOL_RESPONSE_OPEN}42{TOOL_RESPONSE_CLOSE}")
    return model + env + model, [1] * 2 + [0] * len(env) + [1] * 2


def test_without_the_tags_only_the_reward_placement_is_checked():
    tok = byte_tokenizer()
    guard = EnvTokenGuard(tok)
    assert (guard.open_id, guard.close_id) == (None, None)
    response, mask = _env_result(tok)
    # an advantage on env tokens would be caught with the tags; here nothing finds the result
    batch = _batch(response, mask, advantages=[1.0] * len(response))
    assert guard.check(batch) == {"check/tool_result_tokens": 0.0}
    assert (guard.episodes, guard.tool_tokens) == (1, 0)
    scores = [0.0] * len(response)
    scores[3] = 1.0  # on an env token
    with pytest.raises(BatchError, match="row 0: a reward is at response position 3"):
        guard.check(_batch(response, mask, scores=scores, advantages=[0.0] * len(response)))


def test_a_tokenizer_with_only_the_opening_tag_checks_no_results():
    tok = byte_tokenizer(TOOL_RESPONSE_OPEN)
    guard = EnvTokenGuard(tok)
    assert guard.open_id is not None and guard.close_id is None
    response, mask = _env_result(tok)
    assert guard.check(_batch(response, mask, advantages=[1.0] * len(response))) == {
        "check/tool_result_tokens": 0.0}


def test_with_both_tags_a_result_is_found_and_checked():
    tok = byte_tokenizer(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)
    guard = EnvTokenGuard(tok)
    response, mask = _env_result(tok)
    # <tool_response> 4 2 </tool_response>: 4 tokens at positions 2..5
    adv = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert guard.check(_batch(response, mask, advantages=adv)) == {
        "check/tool_result_tokens": 4.0}
    adv[4] = 0.5
    with pytest.raises(BatchError, match="position 4 has response_mask 0.0 and advantage 0.5"):
        guard.check(_batch(response, mask, advantages=adv))
    with pytest.raises(BatchError, match="needs a batch after stage B"):
        guard.check(_batch(response, mask))


def test_tags_are_found_with_a_tokenizer_that_adds_a_bos_token():
    tok = byte_tokenizer(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE, bos=True)
    assert tok.encode(TOOL_RESPONSE_OPEN)[0] == tok.bos_token_id  # what the guard must skip
    guard = EnvTokenGuard(tok)
    assert guard.open_id == tok.convert_tokens_to_ids(TOOL_RESPONSE_OPEN)
    assert guard.close_id == tok.convert_tokens_to_ids(TOOL_RESPONSE_CLOSE)


def test_one_token_responses():
    inside = tool_result_positions(torch.tensor([[8], [5]]), torch.tensor([[0], [0]]), 8, 9)
    assert inside.tolist() == [[True], [False]]


def test_tool_result_positions_spans_open_to_close_per_row():
    ids = torch.tensor([[5, 8, 1, 9, 5], [8, 1, 9, 8, 1]])
    mask = torch.tensor([[1, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    inside = tool_result_positions(ids, mask, open_id=8, close_id=9)
    # row 1: an unclosed second result runs to the end
    assert inside.tolist() == [[False, True, True, True, False], [True, True, True, True, True]]


def test_the_chat_tokenizer_has_single_tag_ids(tiny_model_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    guard = EnvTokenGuard(tok)
    assert guard.open_id == tok.convert_tokens_to_ids(TOOL_RESPONSE_OPEN)
    assert guard.close_id == tok.convert_tokens_to_ids(TOOL_RESPONSE_CLOSE)

"""Parsing sglang's scoring answer (``rlvr.agents.sglang.scoring``) on answers shaped as
sglang 0.5.23 writes them; the real server's answers are checked in test_sglang_real.py."""

from __future__ import annotations

import pytest

from rlvr.agents.errors import EngineError
from rlvr.agents.sglang.scoring import parse_scores, score_payload


def _answer(ids, logprobs, vocab_size=404):
    """``meta_info.input_token_logprobs`` as sglang 0.5.23 builds it, its display clip included."""
    shown = [x if x < vocab_size - 1 else 0 for x in ids]
    return {"meta_info": {"input_token_logprobs": [[lp, s, None] for lp, s in
                                                    zip([None, *logprobs], shown)]}}


def test_the_payload_scores_the_whole_sequence_without_sampling():
    body = score_payload([1, 2, 3], 1, "adapter")
    assert body["input_ids"] == [1, 2, 3] and body["logprob_start_len"] == 0
    assert body["sampling_params"]["max_new_tokens"] == 0 and body["lora_path"] == "adapter"


def test_scores_from_start_on():
    ids = [5, 17, 40, 9]
    assert parse_scores(_answer(ids, [-1.0, -2.0, -3.0]), ids, 2) == [-2.0, -3.0]


def test_the_last_vocabulary_id_reported_as_zero_is_its_real_score():
    """sglang 0.5.23 shows the model's last token id (here 403 of 404) as 0; the logprob is the
    real token's. Without accepting it, a probe holding that token failed every check."""
    ids = [5, 17, 403, 9, 100, 403]
    assert parse_scores(_answer(ids, [-1.0, -2.0, -3.0, -4.0, -5.0]), ids, 1) == [
        -1.0, -2.0, -3.0, -4.0, -5.0]


@pytest.mark.parametrize("shown, why", [
    ([None, 40, 18, 9], "another id echoed"),
    ([None, 40, 0, 9], "0 for an id below one echoed unchanged: no clip explains it"),
    ([None, 17, 9, 100], "shifted by one"),
])
def test_an_answer_for_other_tokens_is_refused(shown, why):
    ids = [5, 40, 17, 9]
    body = {"meta_info": {"input_token_logprobs": [[None if s is None else -1.0, s, None]
                                                    for s in shown]}}
    with pytest.raises(EngineError, match="scored token"):
        parse_scores(body, ids, 1)


def test_an_answer_of_another_length_or_a_null_logprob_is_refused():
    ids = [5, 17, 40]
    with pytest.raises(EngineError, match="expected one per position"):
        parse_scores(_answer(ids[:2], [-1.0]), ids, 1)
    body = _answer(ids, [-1.0, -2.0])
    body["meta_info"]["input_token_logprobs"][2][0] = None
    with pytest.raises(EngineError, match="scored token"):
        parse_scores(body, ids, 1)

"""Scoring given tokens on SGLang servers (``ScoringEngine.score``): input-token logprobs.

``/generate`` with ``max_new_tokens: 0``, ``return_logprob`` and ``logprob_start_len: 0``
prefills the whole sequence and answers ``meta_info.input_token_logprobs``: one ``[logprob, id,
text]`` entry per position, the first ``None`` (it has no prefix), then the logprob of each
token given everything before it; the entries from ``start`` on are the score. Starting the
logprobs at 0 keeps sglang from reusing its radix cache (it matches a cached prefix only up to
``logprob_start_len``): after an in-flight update that kept the cache, a cached prefix holds keys
and values the previous weights computed, and the score must be the current weights' alone.
Measured on sglang 0.5.23 (CPU, float32): equal to a transformers forward to float32 rounding,
and untempered whatever the request's temperature.

The ids sglang 0.5.23 reports beside the input logprobs are clipped for display
(``logprob_result_processor``: ``x if x < vocab_size - 1 else 0``, meant for multimodal
placeholders), so the model's last token id comes back as 0 while its logprob, and the sequence
the model saw, are the real ones. ``parse_scores`` accepts a reported 0 only where the clip
explains it: the sent id is above every id the server echoed unchanged.
"""

from __future__ import annotations

from typing import Any

from rlvr.agents.errors import EngineError


def score_payload(token_ids: list[int], start: int, lora_name: str | None) -> dict[str, Any]:
    """The ``/generate`` body that scores ``token_ids[start:]`` (``start >= 1``; no cache reuse)."""
    payload: dict[str, Any] = {
        "input_ids": list(token_ids),
        "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "stream": False,
    }
    if lora_name is not None:
        payload["lora_path"] = lora_name
    return payload


def parse_scores(body: dict[str, Any], token_ids: list[int], start: int) -> list[float]:
    """The logprobs of ``token_ids[start:]`` from a ``score_payload`` answer.

    Raises:
        EngineError: the answer does not hold one logprob per scored token, for those tokens.
    """
    entries = (body.get("meta_info") or {}).get("input_token_logprobs")
    want = token_ids[start:]
    if not isinstance(entries, list) or len(entries) != len(token_ids):
        raise EngineError(f"scoring {len(token_ids)} tokens: the server answered "
                          f"{len(entries) if isinstance(entries, list) else entries!r} input "
                          f"token logprobs, expected one per position")
    echoed = [int(e[1]) for e in entries[1:]]
    kept = [t for t, e in zip(token_ids[1:], echoed) if t == e]
    clip_floor = max(kept, default=0)  # the clip hides only ids above every one shown unchanged
    scores = []
    for entry, token, shown in zip(entries[start:], want, echoed[start - 1:]):
        clipped = shown == 0 and token > clip_floor
        if entry[0] is None or (shown != token and not clipped):
            raise EngineError(f"scoring: the server scored token {entry[1]} ({entry[0]}) where "
                              f"{token} was sent")
        scores.append(float(entry[0]))
    return scores

"""The vLLM completions wire format: one ``SamplingParams`` to a ``/v1/completions`` body, and back.

rlvr sends token ids and reads token ids: the prompt is a list of ids (vLLM never tokenizes
it), ``return_token_ids`` gives the generated ids, ``logprobs: 0`` the sampled tokens' logprobs
(under the server's ``--logprobs-mode processed_logprobs``: ``log_softmax(logits / T)``, the
convention of ``rlvr.agents.engine``). Stop strings are matched on the text but never trim the
ids (``include_stop_str_in_output``); the eos or stop id that ended generation is kept.
"""

from __future__ import annotations

from typing import Any

from rlvr.agents.engine import FINISH_REASONS, Completion, SamplingParams
from rlvr.agents.errors import EngineError


def completion_payload(model: str, prompt_ids: list[int], sampling: SamplingParams,
                       max_new: int, lora_name: str | None = None) -> dict[str, Any]:
    """The ``/v1/completions`` body that generates one completion of ``prompt_ids``.

    ``model`` is the served model name, or the served LoRA adapter's name (``lora_name``).
    """
    payload: dict[str, Any] = {
        "model": lora_name or model,
        "prompt": list(prompt_ids),
        "max_tokens": max_new,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": sampling.top_k,
        "n": 1,
        "logprobs": 0,
        "return_token_ids": True,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "add_special_tokens": False,
    }
    if sampling.stop_token_ids:
        payload["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        payload["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        payload["seed"] = sampling.seed
    return payload


def parse_completion(body: dict[str, Any]) -> Completion:
    """The ``Completion`` of a ``/v1/completions`` answer (one choice).

    Raises:
        EngineError: the answer lacks the token ids or their logprobs, or they disagree.
    """
    try:
        choice = body["choices"][0]
        token_ids = [int(t) for t in choice["token_ids"]]
        logprobs = [float(x) for x in (choice.get("logprobs") or {})["token_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EngineError(f"malformed vLLM completion ({exc!r}): {str(body)[:500]}") from None
    if len(token_ids) != len(logprobs):
        raise EngineError(f"vLLM returned {len(token_ids)} token ids but {len(logprobs)} "
                          "logprobs")
    reason = choice.get("finish_reason")
    finish = reason if reason in FINISH_REASONS else "abort"
    info = {"stop_reason": choice.get("stop_reason"), "finish_reason": reason}
    return Completion(token_ids, logprobs, finish, info)  # type: ignore[arg-type]

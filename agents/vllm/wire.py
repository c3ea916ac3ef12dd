"""vLLM's token-in/token-out wire format: ``SamplingParams`` to a generate body, and back.

The route is ``/inference/v1/generate``. rlvr sends token ids and reads token ids: the prompt
is a list of ids (vLLM never tokenizes it), the answer's ``token_ids`` are the generated ids,
``logprobs: 0`` gives each sampled token's logprob (under the server's ``--logprobs-mode
processed_logprobs``: ``log_softmax(logits / T)``, the convention of ``rlvr.agents.engine``),
and ``weight_versions`` names the weights that sampled each token (spans over the output,
labelled by ``/update_weight_version``). Stop strings are matched on the text but never trim
the ids (``include_stop_str_in_output``); the eos or stop id that ended generation is kept.
The route exists on servers started with ``--enable-scale-out`` (vLLM 0.32 answers 403
otherwise).
"""

from __future__ import annotations

from typing import Any

from rlvr.agents.engine import FINISH_REASONS, Completion, SamplingParams
from rlvr.agents.errors import EngineError
from rlvr.agents.sglang.wire import span_versions

GENERATE = "/inference/v1/generate"


def generate_payload(model: str, prompt_ids: list[int], sampling: SamplingParams,
                     max_new: int, lora_name: str | None = None) -> dict[str, Any]:
    """The ``/inference/v1/generate`` body that generates one completion of ``prompt_ids``.

    ``model`` is the served model name, or the served LoRA adapter's name (``lora_name``).
    """
    params: dict[str, Any] = {
        "max_tokens": max_new,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": sampling.top_k,
        "n": 1,
        "logprobs": 0,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
    }
    if sampling.stop_token_ids:
        params["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    return {"model": lora_name or model, "token_ids": list(prompt_ids),
            "sampling_params": params, "output_mode": "tokens"}


def parse_generate(body: dict[str, Any]) -> Completion:
    """The ``Completion`` of an ``/inference/v1/generate`` answer (one choice).

    ``info["weight_versions"]`` keeps the answer's version spans (``token_versions``).

    Raises:
        EngineError: the answer lacks the token ids or their logprobs, or they disagree.
    """
    try:
        choice = body["choices"][0]
        token_ids = [int(t) for t in choice.get("token_ids") or []]
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(c["logprob"]) for c in content]
        logprob_ids = [int(c["token_id"]) for c in content]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise EngineError(f"malformed vLLM answer ({exc!r}): {str(body)[:500]}") from None
    if logprob_ids != token_ids:
        raise EngineError(f"vLLM returned {len(token_ids)} token ids but logprobs of "
                          f"{len(logprob_ids)} tokens (or of other ids)")
    reason = choice.get("finish_reason")
    finish = reason if reason in FINISH_REASONS else "abort"
    info = {"stop_reason": choice.get("stop_reason"), "finish_reason": reason,
            "weight_versions": choice.get("weight_versions") or []}
    return Completion(token_ids, logprobs, finish, info)  # type: ignore[arg-type]


def token_versions(completion: Completion) -> list[int]:
    """Each token's weight version from the answer's ``weight_versions`` spans (-1: unknown)."""
    return span_versions(list(completion.info.get("weight_versions") or []),
                         len(completion.token_ids))

"""SGLang's ``/generate`` wire format: the request's ``sampling_params`` and the response parser.

Facts (sglang 0.5.5 to 0.5.23, ``docs/engines.md``, "The SGLang HTTP API rlvr relies on"):

* ``sampling_params`` rejects unknown keys with HTTP 400: the seed is ``sampling_seed``.
* ``output_ids`` are never trimmed: they include the matched stop token whatever ``no_stop_trim``
  says; ``no_stop_trim`` only keeps the stop string in ``text``, which rlvr never reads (it is
  sent so the two stay consistent for a human reading the server's answers).
* ``meta_info.output_token_logprobs`` holds ``[logprob, token_id, text_or_null]`` per output id.
* ``meta_info.finish_reason`` is ``{"type": "stop" | "length" | "abort", ...}``.
"""

from __future__ import annotations

from typing import Any

from rlvr.agents.engine import Completion, SamplingParams
from rlvr.agents.errors import SGLangError

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def sampling_payload(
    sampling: SamplingParams, *, max_new_tokens: int | None = None
) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for ``sampling`` (only keys sglang accepts).

    Args:
        sampling: the engine-neutral sampling parameters.
        max_new_tokens: overrides ``sampling.max_new_tokens`` (the engine clamps it to the
            server's context length).
    """
    out: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens if max_new_tokens is None else max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "no_stop_trim": True,
        "skip_special_tokens": False,
    }
    if sampling.stop_token_ids:
        out["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        out["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        out["sampling_seed"] = sampling.seed
    return out


def generate_payload(prompt_ids: list[int], sampling: SamplingParams, max_new_tokens: int,
                     lora_name: str | None = None) -> dict[str, Any]:
    """The ``/generate`` request body: token ids in, token ids and their logprobs out.

    Args:
        prompt_ids: the prompt's token ids.
        sampling: the sampling parameters (``sampling_payload``).
        max_new_tokens: the clamped ``max_new_tokens``.
        lora_name: the served adapter to generate with (None: the base weights).
    """
    payload: dict[str, Any] = {
        "input_ids": list(prompt_ids),
        "sampling_params": sampling_payload(sampling, max_new_tokens=max_new_tokens),
        "return_logprob": True,
        "logprob_start_len": -1,
        "stream": False,
    }
    if lora_name is not None:
        payload["lora_path"] = lora_name
    return payload


def parse_generate_response(body: dict[str, Any]) -> Completion:
    """A ``Completion`` from a ``/generate`` response.

    Raises:
        SGLangError: fields are missing or the logprobs are not aligned with ``output_ids``.
    """
    try:
        ids = [int(t) for t in body["output_ids"]]
        meta = body["meta_info"]
        entries = meta["output_token_logprobs"]
        finish = meta.get("finish_reason") or {"type": "abort"}
    except (KeyError, TypeError, ValueError) as exc:
        raise SGLangError(f"/generate answered without {exc}; got keys {sorted(body)}") from None
    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
    reason = _FINISH.get(str(kind), "abort")
    if reason == "abort":  # whatever was generated is dropped: the episode ends with "error"
        return Completion([], [], "abort", {"meta_info": meta})
    if len(entries) != len(ids) or any(int(e[1]) != t for e, t in zip(entries, ids)):
        raise SGLangError(
            f"/generate: output_token_logprobs ({len(entries)} entries) are not aligned with "
            f"output_ids ({len(ids)} ids)"
        )
    if any(e[0] is None for e in entries):
        raise SGLangError("/generate returned a null logprob; logprob_start_len must be -1")
    logprobs = [float(e[0]) for e in entries]
    return Completion(ids, logprobs, reason, {"meta_info": meta})  # type: ignore[arg-type]


def token_versions(completion: Completion) -> list[int]:
    """The weight version of each token, from ``meta_info.weight_versions`` (sglang >= 0.5.23).

    Each span is ``{"version", "start", "end"}`` over the output tokens. Versions rlvr named
    (``str(int)``) are read back as ints; tokens under another name (the server's "default"
    before any was set) or outside every span get -1 (unknown: counted as the oldest).
    """
    meta = completion.info.get("meta_info") or {}
    n = len(completion.token_ids)
    spans = meta.get("weight_versions")
    if not spans and meta.get("weight_version") is not None:  # one version for all tokens
        spans = [{"version": meta["weight_version"], "start": 0, "end": n}]
    return span_versions(spans or [], n)


def span_versions(spans: list[dict[str, Any]], n: int) -> list[int]:
    """Each of ``n`` output tokens' version from ``{"version", "start", "end"}`` spans.

    The span shape of sglang's ``meta_info.weight_versions`` and vLLM's ``weight_versions``.
    Versions rlvr named (``str(int)``) are read back as ints; tokens under another name or
    outside every span get -1.
    """
    out = [-1] * n
    for span in spans:
        try:
            version = int(span["version"])
        except (KeyError, TypeError, ValueError):
            continue
        start, end = max(int(span["start"]), 0), min(int(span["end"]), len(out))
        out[start:end] = [version] * max(end - start, 0)
    return out


def aborted(message: str) -> Completion:
    """The completion of a request the server aborted (an HTTP error carrying an abort)."""
    return Completion([], [], "abort", {"abort": message})
